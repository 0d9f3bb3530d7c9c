"""The error band of a user's own calibration (``autoplan calibrate`` → ``--profile``).

A profile fitted on a user's runs is judged by its k-fold cross-validation: each row predicted by
the fit that did not see it. Its band is the prediction interval of one more run's log ratio
log(measured / predicted), at the shipped bands' coverage (``band_fit.COVERAGE``), from those
held-out ratios under a normal model: mean ± t(q, n − 1)·s·√(1 + 1/n), the prediction interval
for a new observation of a normal sample (NIST/SEMATECH e-Handbook of Statistical Methods,
Sec. 7.2.2.2 "prediction intervals"; Student's t with n − 1 degrees of freedom). With a few rows
t is large and the band wide, as it should be. Below ``band_fit.MIN_ROWS`` held-out rows (or
without cross-validation) no band is written and the shipped band stays.

The file's ``band:`` block: ``tokens_per_s: [low, high]``, ``peak_memory: [low, high]`` (the
shipped group's memory band where the calibration has fewer memory rows), ``rows``,
``memory_rows`` and ``rule``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

RULE = "prediction interval of the calibration's cross-validated errors (normal, Student's t)"


def student_t_cdf(x: float, df: float) -> float:
    """P(T <= x) for Student's t with ``df`` degrees of freedom: the regularised incomplete beta
    I_{df/(df+x²)}(df/2, 1/2) (Abramowitz and Stegun 26.7.1), by a continued fraction
    (Numerical Recipes, 3rd ed., Sec. 6.4, ``betacf``)."""
    if x == 0.0:
        return 0.5
    tail = 0.5 * _incomplete_beta(df / (df + x * x), df / 2.0, 0.5)
    return 1.0 - tail if x > 0 else tail


def _incomplete_beta(z: float, a: float, b: float) -> float:
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(z) + b * math.log1p(-z))
    if z > (a + 1.0) / (a + b + 2.0):
        return 1.0 - _incomplete_beta(1.0 - z, b, a)
    c, d = 1.0, 1.0 - (a + b) * z / (a + 1.0)
    d = 1.0 / d
    f = d
    for m in range(1, 300):
        for num in (m * (b - m) * z / ((a + 2 * m - 1) * (a + 2 * m)),
                    -(a + m) * (a + b + m) * z / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1.0 / (1.0 + num * d)
            c = 1.0 + num / c
            f *= c * d
        if abs(c * d - 1.0) < 1e-14:
            break
    return front * f / a


def student_t_quantile(p: float, df: float) -> float:
    """x with P(T <= x) = p (bisection on :func:`student_t_cdf`; 0 < p < 1)."""
    low, high = -1e3, 1e3
    for _ in range(200):
        mid = 0.5 * (low + high)
        low, high = (mid, high) if student_t_cdf(mid, df) < p else (low, mid)
    return 0.5 * (low + high)


def prediction_band(log_ratios: np.ndarray, coverage: float) -> list[float] | None:
    """[low, high] factors on a prediction (low <= 1 <= high) holding one more run's measurement
    with probability ``coverage``; None below two finite ratios."""
    r = np.asarray(log_ratios, dtype=float)
    r = r[np.isfinite(r)]
    n = len(r)
    if n < 2:
        return None
    half = student_t_quantile((1.0 + coverage) / 2.0, n - 1) * float(np.std(r, ddof=1)) * math.sqrt(1.0 + 1.0 / n)
    mean = float(np.mean(r))
    return [round(math.exp(min(0.0, mean - half)), 4), round(math.exp(max(0.0, mean + half)), 4)]


def own_band(measured: Mapping[str, np.ndarray], predicted: Mapping[str, np.ndarray]) -> dict[str, Any] | None:
    """The ``band:`` block of a calibrated profile from its cross-validated ``predicted`` figures
    and the ``measured`` ones (``tokens_per_s_per_gpu``, ``peak_memory_bytes``; NaN where a row
    has none), or None with fewer than ``band_fit.MIN_ROWS`` tokens/s rows."""
    from autoplan.calibration.band_fit import COVERAGE, MIN_ROWS

    with np.errstate(divide="ignore", invalid="ignore"):
        tokens = np.log(measured["tokens_per_s_per_gpu"] / predicted["tokens_per_s_per_gpu"])
        memory = np.log(measured["peak_memory_bytes"] / predicted["peak_memory_bytes"])
    rows, memory_rows = int(np.isfinite(tokens).sum()), int(np.isfinite(memory).sum())
    if rows < MIN_ROWS:
        return None
    block: dict[str, Any] = {"tokens_per_s": prediction_band(tokens, COVERAGE), "rows": rows,
                             "memory_rows": memory_rows, "rule": RULE}
    if memory_rows >= MIN_ROWS:
        block["peak_memory"] = prediction_band(memory, COVERAGE)
    return block
