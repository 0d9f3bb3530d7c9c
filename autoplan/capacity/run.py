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


def run_capacity(setup: CapacitySetup, query: CapacityQuery,
                 progress: Callable[[int], None] | None = None) -> CapacityResult:
    """Search the grid, refine it ``query.refine_rounds`` times near the front, rank the points."""
    start = time.monotonic()
    gpus = {gpu.name: gpu for gpu in query.gpu_types}
    usable = {name: _usable(setup, query, gpu) for name, gpu in gpus.items()}
    counts = {name: grid.geometric_grid(gpu, query.gpus_low, query.gpus_high, usable[name])
              for name, gpu in gpus.items()}
    empty = [f"{name} (rented by {grid.rental_unit(gpu)})" for name, gpu in gpus.items() if not counts[name]]
    if len(empty) == len(gpus):
        raise AutoplanError(f"--gpus {query.gpus_low}..{query.gpus_high} holds no whole rental unit of "
                            f"{', '.join(empty)}: widen the range")
    bests: dict[tuple[str, int], list[PhaseBest]] = {}
    _evaluate(setup, query, gpus, counts, bests, progress)
    for _ in range(query.refine_rounds):
        new = _refinements(query, gpus, bests, usable)
        if not any(new.values()):
            break
        _evaluate(setup, query, gpus, new, bests, progress)
    phases = phase_frame([row for rows in bests.values() for row in rows])
    points, note = add_ranges(point_frame(phases, query.price_usd()), setup.trainer, gpus, setup.model.is_moe)
    points = rank_points(points, query.deadline_days, query.budget_usd, query.prefer, query.pessimistic)
    return CapacityResult(setup=setup, query=query, points=points, phases=phases, bests=bests,
                          elapsed_s=time.monotonic() - start, note=note)


def _evaluate(setup, query, gpus: dict[str, GPUSpec], counts: dict[str, list[int]], bests, progress) -> None:
    for name, gpu in gpus.items():
        for count in counts[name]:
            bests[(name, count)] = evaluate_point(setup, gpu, count, query.phases)
            if progress is not None:
                progress(len(bests))


def _usable(setup: CapacitySetup, query: CapacityQuery, gpu: GPUSpec) -> Callable[[int], bool]:
    """Which rented counts can reach every phase's batch (any count, with a batch tolerance)."""
    if setup.gbs_tolerance > 0:
        return lambda rented: True
    values = setup.space.values
    sizes = np.unique(np.multiply.outer(np.multiply.outer(values["tp"], values["pp"]), values["cp"]).ravel())
    batches = tuple(setup.gbs_seqs(phase) for phase in query.phases)
    return lambda rented: any(grid.batch_reachable(n, sizes, batches) for n in grid.job_gpu_counts(gpu, rented))


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
