"""How far a point's days and cost may be off: the cost model's held-out error band of its
(trainer, GPU generation, dense/MoE) group at its GPU count
(:func:`autoplan.calibration.uncertainty.error_band`).

Days and GPU-hours are tokens / (tokens/s), so their interval is the tokens/s band inverted:
``days_low = days / tokens_high_factor`` and ``days_high = days / tokens_low_factor``; cost
scales with GPU-hours at a fixed price, so it takes the same factors. The chosen point and the
front use the point predictions; the ranges say how much to trust them.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from autoplan.calibration.uncertainty import BandsError, ErrorBand, error_band
from autoplan.specs.hardware import GPUSpec


def interval(values, band: ErrorBand) -> tuple[np.ndarray, np.ndarray]:
    """(low, high) of a time-like figure (days, GPU-hours, cost): value / tokens_high_factor and
    value / tokens_low_factor."""
    values = np.asarray(values, dtype=float)
    return values / band.tokens_high_factor, values / band.tokens_low_factor


def add_ranges(points: pd.DataFrame, trainer: str, gpus: Mapping[str, GPUSpec], moe: bool) -> tuple[pd.DataFrame, str]:
    """(``points`` with band_group, days_low/days_high, gpu_hours_low/gpu_hours_high and
    cost_low_usd/cost_high_usd from the error band of each point's GPU type and count, a note).
    The bands come from a generated file (``python benchmarks/accuracy.py --write-bands``):
    without it the points come back unchanged and the note says why."""
    out = points.copy()
    try:
        bands = [error_band(trainer, gpus[name], moe, gpus=float(count))
                 for name, count in zip(out["hardware"], out["gpus"])]
    except BandsError as exc:
        return out, f"no days/cost ranges: {exc}"
    low_factor = pd.Series([1 / b.tokens_high_factor for b in bands], index=out.index, dtype=float)
    high_factor = pd.Series([1 / b.tokens_low_factor for b in bands], index=out.index, dtype=float)
    out["band_group"] = [b.group + ("" if b.measured else " (unmeasured)") for b in bands]
    for column, low, high in (("train_days", "days_low", "days_high"), ("gpu_hours", "gpu_hours_low", "gpu_hours_high"),
                              ("cost_usd", "cost_low_usd", "cost_high_usd")):
        out[low], out[high] = out[column] * low_factor, out[column] * high_factor
    return out, ""
