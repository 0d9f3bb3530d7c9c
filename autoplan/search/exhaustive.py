"""The exhaustive sampler: every layout of the space, evaluated in vectorised chunks.

It is the exact reference the other samplers are measured against (benchmarks/speed.py). The
product of the space is walked in flat-index chunks of ``CHUNK_SIZE``, each chunk becomes one
``LayoutBatch`` and one ``evaluate`` call; chunk boundaries are fixed, so the result does not
depend on timing, nor on how ``--workers`` deal the chunks out (:mod:`autoplan.search.parallel`).
With a storage every evaluated layout is added to the study in bulk.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

import numpy as np

from autoplan.cost.context import CostContext
from autoplan.cost.evaluate import CostTable
from autoplan.search import recipe
from autoplan.search.recipe import RecipeCounts
from autoplan.space import SearchSpace, indices_to_values, layouts_from_values

CHUNK_SIZE = 1 << 16

Progress = Callable[[int, int], None]


def run_exhaustive(ctx: CostContext, space: SearchSpace, *,
                   allow_uneven: bool = True, chunk_size: int = CHUNK_SIZE,
                   progress: Progress | None = None,
                   deadline: float | None = None) -> tuple[CostTable, RecipeCounts]:
    """Assess every layout of ``space`` (until ``deadline``, a ``time.monotonic()`` value).

    Returns the assessed table (layouts with a non-integer dp are counted, not kept) and the
    recipe counts.
    """
    parts = assess_chunks(ctx, space, range(num_chunks(space, chunk_size)),
                          chunk_size=chunk_size, allow_uneven=allow_uneven, progress=progress,
                          deadline=deadline)
    return combine(space, parts)


def num_chunks(space: SearchSpace, chunk_size: int = CHUNK_SIZE) -> int:
    return -(-space.size // chunk_size)


def assess_chunks(ctx: CostContext, space: SearchSpace, numbers: Iterable[int], *,
                  chunk_size: int = CHUNK_SIZE, allow_uneven: bool = True,
                  progress: Progress | None = None,
                  deadline: float | None = None) -> list[tuple[int, CostTable, RecipeCounts]]:
    """(chunk number, assessed table, counts) of chunks ``numbers`` of the product (chunk k
    holds the flat indices [k·chunk_size, (k+1)·chunk_size)), the first one even past the
    deadline."""
    numbers = list(numbers)
    total = sum(min(chunk_size, space.size - k * chunk_size) for k in numbers)
    parts: list[tuple[int, CostTable, RecipeCounts]] = []
    done = 0
    for k in numbers:
        if deadline is not None and parts and time.monotonic() > deadline:
            break
        index = np.arange(k * chunk_size, min((k + 1) * chunk_size, space.size), dtype=np.int64)
        batch, kept, reaches = layouts_from_values(indices_to_values(space, index), ctx.training)
        table = recipe.assess(ctx, batch, reaches, allow_uneven=allow_uneven)
        counts = recipe.count(table, dropped_degrees=int((~kept).sum()))
        parts.append((k, recipe.compact(table), counts))
        done += len(index)
        if progress is not None:
            progress(done, total)
    return parts


def combine(space: SearchSpace, parts: Iterable[tuple[int, CostTable, RecipeCounts]]
            ) -> tuple[CostTable, RecipeCounts]:
    """The chunks' tables concatenated in chunk order and their counts added, so the result
    does not depend on which process assessed which chunk."""
    counts = RecipeCounts(space_size=space.size)
    tables = []
    for _, table, part_counts in sorted(parts, key=lambda part: part[0]):
        counts.add(part_counts)
        tables.append(table)
    return recipe.concat(tables), counts


def store_layouts(store, space: SearchSpace, tables: Iterable[CostTable]) -> None:
    """Add the assessed layouts of ``tables`` that the study does not hold yet, in bulk."""
    from autoplan.search.storage import bulk_add
    from autoplan.search.trials import frozen_trials
    from autoplan.space import KNOBS

    study = store.persistent if store.persistent is not None else store.working
    existing = {tuple(t.params.get(k) for k in KNOBS) for t in study.get_trials(deepcopy=False)}
    for table in tables:
        rows = missing_rows(table, existing)
        bulk_add(study, frozen_trials(space, recipe.take(table, rows), 1))


def missing_rows(table: CostTable, existing: set[tuple]) -> np.ndarray:
    """Rows of ``table`` whose knob values are not among ``existing`` (tuples in KNOBS order)."""
    from autoplan.space import KNOBS

    if not existing:
        return np.arange(len(table))
    keys = [tuple(recipe.describe_knob(k, getattr(table.batch, k)[i]) for k in KNOBS)
            for i in range(len(table))]
    return np.array([i for i, key in enumerate(keys) if key not in existing], dtype=np.int64)
