"""Plans the model cannot tell apart, and how ``search`` orders them.

Every prediction carries the error band of its (trainer, GPU generation, dense/MoE) group
(:mod:`autoplan.calibration.uncertainty`). A plan is *near-tied* with the best one when their
tokens/s intervals overlap: ``tokens · high >= best · low``. The plans of one search share one
band, so the near-tied plans are the ranked list's first ``n`` feasible rows.

Among the near-tied plans whose point predictions also lie within ``REORDER_WITHIN`` of the
best one's, the order is by robustness, then by the predicted rank (a stable re-ordering; every
other row keeps its place). The band is the error of a prediction against a measurement; two
plans of one search share most of that error (the same model, GPU, trainer and profile), so
the band overstates how uncertain their *order* is: with the Hopper band of -35/+51% hundreds
of plans overlap the best, and re-ordering all of them by robustness would rank a plan twice
as slow first. ``REORDER_WITHIN`` (5%) is a product rule, not a fitted value: it is the order
of the held-out error on the best-measured sources (SC'21 5.8%, Korthikanti 2.1%, NeMo H100
7.0%, ``python benchmarks/accuracy.py``), the scale below which the model's order of two plans
is not evidence. The robustness keys:

1. memory headroom under ``HEADROOM_MARGIN`` of the usable memory goes last: allocator
   fragmentation and the memory band can turn such a plan into an OOM;
2. fewer parallel dimensions (tp, cp, ep, pp, dp) whose group crosses the scale-up domain
   (NVLink): cross-node collectives are where the time model is least sure and where a slow
   link or a straggler costs most.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from autoplan.calibration.uncertainty import ErrorBand, band_text, error_band
from autoplan.cost.comm import strides
from autoplan.space import KNOBS
from autoplan.units import GiB

HEADROOM_MARGIN = 0.10  # fraction of the GPU's usable memory
REORDER_WITHIN = 0.05  # re-order by robustness only plans predicted within 5% of the best
CROSSING_DIMS = ("tp", "cp", "ep", "pp", "dp")


@dataclass(frozen=True)
class NearTies:
    """The near-tied plans of a search: how many (the best included), the knobs in which they
    differ, and the band that makes them tied."""

    num_plans: int
    differing_knobs: tuple[str, ...]
    band: ErrorBand

    def line(self) -> str:
        """One line for the terminal ('' when the best plan stands alone)."""
        if self.num_plans < 2:
            return ""
        unmeasured = ", unmeasured pair" if not self.band.measured else ""
        differ = f"; they differ in {', '.join(self.differing_knobs)}" if self.differing_knobs else ""
        return (f"The top {self.num_plans} plans are within the model's uncertainty "
                f"({band_text(self.band.tokens_low_factor, self.band.tokens_high_factor)} tokens/s, "
                f"{self.band.group}{unmeasured}){differ}; those predicted within {REORDER_WITHIN:.0%} of the "
                f"best are ordered by robustness (memory headroom >= {HEADROOM_MARGIN:.0%}, then fewer "
                "cross-node collectives)")


def result_band(result) -> ErrorBand:
    """The error band of a search's predictions (its trainer, GPU and model kind)."""
    return context_band(result.ctx)


def context_band(ctx) -> ErrorBand:
    """The error band of predictions in ``ctx`` (a ``CostContext``: its trainer, GPU, model kind
    and GPU count)."""
    return error_band(ctx.profile.name, ctx.cluster.gpu, ctx.model.is_moe, gpus=ctx.training.gpus)


def near_tied_count(tokens_per_s: np.ndarray, band: ErrorBand) -> int:
    """How many of the leading rows (feasible, ranked by tokens/s) have an interval that
    overlaps the best one's: tokens · high >= best · low."""
    if len(tokens_per_s) == 0:
        return 0
    best = float(np.max(tokens_per_s))
    return _leading_run(tokens_per_s * band.tokens_high_factor >= best * band.tokens_low_factor)


def _leading_run(mask: np.ndarray) -> int:
    """How many leading entries of ``mask`` are true."""
    return int(np.argmin(mask)) if not mask.all() else len(mask)


def cross_node_dims(result, rows: np.ndarray) -> np.ndarray:
    """Per row: how many of tp, cp, ep, pp, dp form groups that leave the scale-up domain
    (stride · size > domain size, the test of ``autoplan.cost.comm.group_link``)."""
    b = result.table.batch.take(rows)
    st = strides(b.placement, b.tp, b.cp, b.dp, b.pp)
    st["ep"] = b.etp  # expert groups are laid out over the etp-strided ranks (cost.time)
    domain = float(result.ctx.cluster.scale_up_domain_size)
    sizes = {"tp": b.tp, "cp": b.cp, "ep": b.ep, "pp": b.pp, "dp": b.dp}
    return sum(((sizes[d] > 1) & (st[d] * sizes[d] > domain)).astype(int) for d in CROSSING_DIMS)


def _leading_feasible(result) -> np.ndarray:
    return np.arange(_leading_run(np.asarray(result.feasible, dtype=bool)))


def near_ties(result) -> NearTies:
    """The near-tied plans of ``result`` (a ``SearchResult`` ranked feasible-first)."""
    band = result_band(result)
    rows = _leading_feasible(result)
    n = near_tied_count(result.table["tokens_per_s_per_gpu"][rows], band)
    batch = result.table.batch.take(rows[:n])
    differ = tuple(k for k in KNOBS if hasattr(batch, k) and _varies(getattr(batch, k)))
    return NearTies(num_plans=n, differing_knobs=differ, band=band)


def _varies(values: np.ndarray) -> bool:
    """Whether ``values`` holds more than one value (NaN counting as one; no sort, and unlike a
    bare ``np.unique`` it does not import ``numpy.ma``, ~20 ms)."""
    return len(values) > 1 and bool(((values != values[0]) & ~(np.isnan(values) & np.isnan(values[0]))).any())


def reordered_count(tokens_per_s: np.ndarray, num_near_tied: int) -> int:
    """How many leading plans ``robust_order`` re-orders: the near-tied ones predicted within
    ``REORDER_WITHIN`` of the best (``tokens_per_s`` ranked, best first)."""
    if num_near_tied < 2:
        return num_near_tied
    head = np.asarray(tokens_per_s[:num_near_tied], dtype=float)
    return _leading_run(head >= (1.0 - REORDER_WITHIN) * float(np.max(head)))


def robust_order(result):
    """``result`` with its near-tied plans re-ordered by robustness (stable; see the module
    docstring); the Pareto display of nsga2 and a lone best plan are left as they are."""
    from autoplan.search.recipe import take

    if result.sampler == "nsga2":
        return result
    n = reordered_count(result.table["tokens_per_s_per_gpu"], near_ties(result).num_plans)
    if n < 2:
        return result
    head = np.arange(n)
    usable = result.ctx.cluster.gpu.usable_memory_bytes / GiB
    tight = result.table["memory_headroom_gib"][head] < HEADROOM_MARGIN * usable
    order = np.lexsort((head, cross_node_dims(result, head), tight))
    permutation = np.concatenate([order, np.arange(n, len(result.table))])
    return replace(result, table=take(result.table, permutation), reasons=result.reasons[permutation])
