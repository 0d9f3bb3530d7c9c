"""The capacity search: every GPU type over a geometric grid of rented GPU counts, refined near
the Pareto front of days vs cost, each point's phases searched for their best layout.

``run_capacity(setup, query)`` returns a :class:`CapacityResult` with one row per point, ranked
(:func:`autoplan.capacity.front.rank_points`): rank 1 is the chosen point when one meets the
deadline and the budget.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from autoplan.capacity import grid
from autoplan.capacity.band import add_ranges
from autoplan.capacity.front import (
    chosen_row,
    constraint_reasons,
    pareto_mask,
    phase_frame,
    point_frame,
    rank_points,
)
from autoplan.capacity.points import CapacitySetup, PhaseBest, evaluate_point
from autoplan.capacity.query import CapacityQuery
from autoplan.errors import AutoplanError
from autoplan.specs.hardware import GPUSpec


@dataclass
class CapacityResult:
    """Every point tried (ranked), the phase rows behind them and the searches of each phase."""

    setup: CapacitySetup
    query: CapacityQuery
    points: pd.DataFrame  # ranked; see rank_points
    phases: pd.DataFrame  # one row per (hardware, gpus, phase)
    bests: dict[tuple[str, int], list[PhaseBest]]
    elapsed_s: float
    note: str = ""  # why the days/cost ranges are missing, if they are

    @property
    def chosen(self) -> pd.Series | None:
        return chosen_row(self.points)

    def phase_bests(self, hardware: str, gpus: int) -> list[PhaseBest]:
        return self.bests[(hardware, int(gpus))]


BINDING_ROUNDS = 6  # bisections of each GPU type's counts where the deadline or the budget starts to hold
# Around each GPU type's cheapest count within the limits, every usable count within this factor is
# tried (at most DENSE_COUNTS of them, the nearest): a count's best plan depends on which data-
# parallel degrees reach the batch, so days and cost saw-tooth from one count to the next (1,008
# GB200 73.7 days, 1,080 102.9) and a bisection alone steps over the cheaper counts.
DENSE_FACTOR = grid.GRID_RATIO
DENSE_COUNTS = 16


def run_capacity(setup: CapacitySetup, query: CapacityQuery,
                 progress: Callable[[int], None] | None = None) -> CapacityResult:
    """Search the grid, refine it ``query.refine_rounds`` times near the front and bisect it where
    the deadline and the budget bind, rank the points.

    With a batch tolerance every count is usable, but the grid of the counts that reach the batch
    exactly is searched too (and refined alike): those are the counts a tolerance of 0 searches,
    and a count's best plan under a tolerance is at least as fast as its exact one, so a looser
    tolerance never gives a dearer answer (it gave $11.06M where the exact batch found $9.85M)."""
    start = time.monotonic()
    gpus = {gpu.name: gpu for gpu in query.gpu_types}
    usable = {name: _usable(setup, query, gpu) for name, gpu in gpus.items()}
    exact = {name: _usable(setup, query, gpu, exact=True) for name, gpu in gpus.items()}
    counts = {name: sorted({*grid.geometric_grid(gpu, query.gpus_low, query.gpus_high, usable[name]),
                            *grid.geometric_grid(gpu, query.gpus_low, query.gpus_high, exact[name])})
              for name, gpu in gpus.items()}
    empty = [f"{name} (rented by {grid.rental_unit(gpu)})" for name, gpu in gpus.items() if not counts[name]]
    if len(empty) == len(gpus):
        raise AutoplanError(f"--gpus {query.gpus_low}..{query.gpus_high} holds no whole rental unit of "
                            f"{', '.join(empty)}: widen the range")
    bests: dict[tuple[str, int], list[PhaseBest]] = {}
    _evaluate(setup, query, gpus, counts, bests, progress)
    for _ in range(query.refine_rounds):
        new = _union(_refinements(query, gpus, bests, usable), _refinements(query, gpus, bests, exact))
        if not any(new.values()):
            break
        _evaluate(setup, query, gpus, new, bests, progress)
    if query.deadline_days is not None or query.budget_usd is not None:
        for _ in range(BINDING_ROUNDS):
            new = _binding(query, gpus, bests, usable)
            if not any(new.values()):
                break
            _evaluate(setup, query, gpus, new, bests, progress)
        _evaluate(setup, query, gpus, _around_cheapest(query, gpus, bests, usable), bests, progress)
    phases = phase_frame([row for rows in bests.values() for row in rows])
    points, note = add_ranges(point_frame(phases, query.price_usd()), setup.trainer, gpus, setup.model.is_moe)
    points = rank_points(points, query.deadline_days, query.budget_usd, query.prefer, query.pessimistic)
    return CapacityResult(setup=setup, query=query, points=points, phases=phases, bests=bests,
                          elapsed_s=time.monotonic() - start, note=note)


def _evaluate(setup, query, gpus: dict[str, GPUSpec], counts: dict[str, list[int]], bests, progress) -> None:
    for name, gpu in gpus.items():
        for count in counts.get(name, ()):
            bests[(name, count)] = evaluate_point(setup, gpu, count, query.phases)
            if progress is not None:
                progress(len(bests))


def _usable(setup: CapacitySetup, query: CapacityQuery, gpu: GPUSpec, exact: bool = False) -> Callable[[int], bool]:
    """Which rented counts can reach every phase's batch (any count, with a batch tolerance);
    ``exact``: those that reach it exactly, whatever the tolerance."""
    if setup.gbs_tolerance > 0 and not exact:
        return lambda rented: True
    values = setup.space.values
    sizes = np.unique(np.multiply.outer(np.multiply.outer(values["tp"], values["pp"]), values["cp"]).ravel())
    batches = tuple(setup.gbs_seqs(phase) for phase in query.phases)
    return lambda rented: any(grid.batch_reachable(n, sizes, batches) for n in grid.job_gpu_counts(gpu, rented))


def _points_meeting(query: CapacityQuery, bests) -> tuple[pd.DataFrame, np.ndarray]:
    """The points tried so far, and whether each meets the deadline and the budget."""
    points = point_frame(phase_frame([row for rows in bests.values() for row in rows]), query.price_usd())
    reasons = constraint_reasons(points, query.deadline_days, query.budget_usd, query.pessimistic)
    return points, np.asarray([reason == "" for reason in reasons], dtype=bool)


def _union(a: dict[str, list[int]], b: dict[str, list[int]]) -> dict[str, list[int]]:
    return {name: sorted({*a.get(name, ()), *b.get(name, ())}) for name in {*a, *b}}


def _binding(query: CapacityQuery, gpus: dict[str, GPUSpec], bests, usable) -> dict[str, list[int]]:
    """Per GPU type, a count between each pair of neighbouring tried counts of which one meets the
    deadline and the budget and the other does not (geometric midpoint, the nearest untried usable
    count strictly between): where the cheapest plan within the limits lies."""
    points, meets = _points_meeting(query, bests)
    out = {}
    for name, gpu in gpus.items():
        mine = points["hardware"].to_numpy() == name
        tried = sorted(zip(points.loc[mine, "gpus"].astype(int), meets[mine]))
        flips = [(a, b) for (a, ok_a), (b, ok_b) in zip(tried, tried[1:]) if ok_a != ok_b]
        out[name] = grid.between(gpu, [count for count, _ in tried], flips, query.gpus_low, query.gpus_high,
                                 usable[name])
    return out


def _around_cheapest(query: CapacityQuery, gpus: dict[str, GPUSpec], bests, usable) -> dict[str, list[int]]:
    """Per GPU type, the untried usable counts within DENSE_FACTOR of its cheapest count that
    meets the deadline and the budget (none where no count does), the DENSE_COUNTS nearest."""
    points, meets = _points_meeting(query, bests)
    out = {}
    for name, gpu in gpus.items():
        mine = (points["hardware"].to_numpy() == name) & meets
        if not mine.any():
            continue
        best = int(points.loc[mine].sort_values("cost_usd")["gpus"].iloc[0])
        low, high = max(query.gpus_low, int(best / DENSE_FACTOR)), min(query.gpus_high, int(best * DENSE_FACTOR))
        tried = {count for (hw, count) in bests if hw == name}
        fresh = [int(c) for c in grid.unit_counts(gpu, low, high, usable[name]) if int(c) not in tried]
        out[name] = sorted(sorted(fresh, key=lambda c: abs(np.log(c / best)))[:DENSE_COUNTS])
    return out


def _refinements(query: CapacityQuery, gpus: dict[str, GPUSpec], bests, usable) -> dict[str, list[int]]:
    """Per GPU type, the counts half way between its front points and their tried neighbours."""
    phases = phase_frame([row for rows in bests.values() for row in rows])
    points = point_frame(phases, query.price_usd())
    front = points[pareto_mask(points["train_days"].to_numpy(), points["cost_usd"].to_numpy())]
    out = {}
    for name, gpu in gpus.items():
        tried = [count for (hw, count) in bests if hw == name]
        on_front = [int(c) for c in front.loc[front["hardware"] == name, "gpus"]]
        out[name] = grid.refine(gpu, tried, on_front, query.gpus_low, query.gpus_high, usable[name])
    return out
