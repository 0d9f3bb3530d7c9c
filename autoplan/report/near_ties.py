"""Plans the model cannot tell apart, and how ``search`` orders them (the ordering itself is
:func:`autoplan.search.ranking.robust_order`, applied by ``search``).

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

from dataclasses import dataclass

import numpy as np

from autoplan.calibration.uncertainty import ErrorBand, band_text
from autoplan.search.ranking import (  # noqa: F401 (context_band, near_tied_count: re-exported)
    HEADROOM_MARGIN,
    REORDER_WITHIN,
    ROBUST_MARK,
    context_band,
    leading_feasible,
    near_tied_count,
    result_band,
)
from autoplan.space import KNOBS



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
                f"cross-node collectives; a rank so placed is marked {ROBUST_MARK}, column robust_moved)")


def near_ties(result) -> NearTies:
    """The near-tied plans of ``result`` (a ``SearchResult`` ranked feasible-first)."""
    band = result_band(result)
    rows = leading_feasible(result)
    n = near_tied_count(result.table["tokens_per_s_per_gpu"][rows], band)
    batch = result.table.batch.take(rows[:n])
    differ = tuple(k for k in KNOBS if hasattr(batch, k) and _varies(getattr(batch, k)))
    return NearTies(num_plans=n, differing_knobs=differ, band=band)


def _varies(values: np.ndarray) -> bool:
    """Whether ``values`` holds more than one value (NaN counting as one; no sort, and unlike a
    bare ``np.unique`` it does not import ``numpy.ma``, ~20 ms)."""
    return len(values) > 1 and bool(((values != values[0]) & ~(np.isnan(values) & np.isnan(values[0]))).any())
