"""Local polish after TPE: evaluate every layout within two knob changes of the best ones.

A TPE trial costs milliseconds while the vectorised cost model evaluates a layout in about a
microsecond (STYLE.md §2), so after the sampler's trials the layouts that differ from the best
feasible ones in one or two knobs are evaluated, one ``evaluate`` call per round. Each round
expands the ``NUM_SEEDS`` fastest feasible layouts not expanded yet (a best-first local search);
it stops after ``MAX_ROUNDS`` rounds or when no seed is left (a round takes milliseconds, so
it runs even when the sampler's ``--timeout`` has passed). The layouts it
finds are reported with the trials' (plans.csv); those that beat every trial join the study.
"""

from __future__ import annotations

from itertools import combinations

import numpy as np

from autoplan.cost.context import CostContext
from autoplan.cost.evaluate import CostTable
from autoplan.layout import LayoutBatch
from autoplan.search import recipe
from autoplan.space import KNOBS, SearchSpace, indices_to_values, layouts_from_values

NUM_SEEDS = 4
MAX_ROUNDS = 8


def flat_index(space: SearchSpace, batch: LayoutBatch) -> np.ndarray:
    """Position of each layout in the space's product (C order over KNOBS)."""
    axes = [np.searchsorted(space.code_values(k), getattr(batch, k)) for k in KNOBS]
    return np.ravel_multi_index(axes, space.shape).astype(np.int64)


def neighbours(space: SearchSpace, seeds: np.ndarray) -> np.ndarray:
    """Flat indices of every layout that differs from a seed (flat index) in <= 2 knobs."""
    shape = space.shape
    base = np.stack(np.unravel_index(seeds, shape), axis=1)  # [seeds, knobs]
    found = [seeds]
    free = [i for i, n in enumerate(shape) if n > 1]
    for i, j in combinations(free, 2):
        grid = np.stack(np.meshgrid(np.arange(shape[i]), np.arange(shape[j]), indexing="ij"), -1)
        grid = grid.reshape(-1, 2)
        rows = np.repeat(base, len(grid), axis=0)
        rows[:, i] = np.tile(grid[:, 0], len(base))
        rows[:, j] = np.tile(grid[:, 1], len(base))
        found.append(np.ravel_multi_index(rows.T, shape))
    return np.unique(np.concatenate(found))


def polish(ctx: CostContext, space: SearchSpace, table: CostTable, *,
           allow_uneven: bool = True) -> CostTable:
    """The assessed layouts found around the best of ``table`` (none of which is in it)."""
    known = flat_index(space, table.batch)
    index = {"flat": known, "tps": _feasible_speed(table)}
    expanded = np.zeros(0, dtype=np.int64)
    found: list[CostTable] = []
    for _ in range(MAX_ROUNDS):
        open_ = ~np.isin(index["flat"], expanded) & np.isfinite(index["tps"])
        order = np.flatnonzero(open_)[np.argsort(-index["tps"][open_], kind="stable")][:NUM_SEEDS]
        if len(order) == 0:
            break
        seeds = index["flat"][order]
        expanded = np.concatenate([expanded, seeds])
        candidates = neighbours(space, seeds)
        candidates = candidates[~np.isin(candidates, index["flat"])]
        batch, kept, reaches = layouts_from_values(indices_to_values(space, candidates), ctx.training)
        new = recipe.compact(recipe.assess(ctx, batch, reaches, allow_uneven=allow_uneven))
        found.append(new)
        index = {"flat": np.concatenate([index["flat"], candidates[kept]]),
                 "tps": np.concatenate([index["tps"], _feasible_speed(new)])}
    if not found:
        return recipe.take(table, np.zeros(0, dtype=np.int64))
    return recipe.concat(found)


def _feasible_speed(table: CostTable) -> np.ndarray:
    """tokens/s/GPU of feasible layouts, -inf for the others."""
    return np.where(table["feasible"], table["tokens_per_s_per_gpu"], -np.inf)
