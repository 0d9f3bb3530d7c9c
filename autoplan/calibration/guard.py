"""Keep a calibration only where it predicts better than the values it started from.

A fit on a few runs of a new setting (a new model size, say) can lower the error on those runs
and raise it on the next ones. The rule, per kind of figure (tokens/s, peak memory): the fitted
values of that kind's parameters are kept only if, on rows the fit did not see, their median
absolute error is below that of the starting values on the same rows *and* they are closer to
the measurement on significantly more rows than not (one-sided sign test at ``SIGNIFICANCE``,
ties dropped; Dixon & Mood 1946, "The statistical sign test", JASA 41): a small median gain
on a few rows is noise. Otherwise the starting values stay, with a warning. The unseen rows are the k-fold
cross-validation's (:func:`cross_validated_fit`, what ``autoplan calibrate`` and the accuracy
benchmark's calibrate check run). This is model selection by
validation error (Hastie, Tibshirani & Friedman, *The Elements of Statistical Learning*, 2nd
ed., Sec. 7.10): the starting profile is the simpler model, kept unless the data show better.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace

import numpy as np

from autoplan.calibration.fit import (
    MEMORY_PARAMS,
    CalibrationError,
    ContextFactory,
    CrossValidation,
    FitReport,
    Prepared,
    cross_validate,
    fit_efficiency,
    predict,
    prepare,
)
from autoplan.calibration.rows import Row
from autoplan.profiles import CalibratedParameters, flag_values

SIGNIFICANCE = 0.05
KINDS = {"tokens/s": "tokens_per_s_per_gpu", "memory": "peak_memory_bytes"}


def _kind_figures(predicted: Mapping[str, np.ndarray], prepared: Prepared, kind: str) -> tuple[np.ndarray, np.ndarray]:
    """(predicted, measured) of one kind's measured rows (finite, positive measurements)."""
    measured = prepared.measured_tokens if kind == "tokens/s" else prepared.measured_memory
    ok = np.isfinite(measured) & (measured > 0)
    return predicted[KINDS[kind]][ok], measured[ok]


def median_abs_pct(predicted: Mapping[str, np.ndarray], prepared: Prepared, kind: str) -> float:
    """Median |predicted / measured − 1| in percent of one kind's measured rows (NaN if none);
    a row predicted as not runnable (NaN) counts as infinitely wrong."""
    pred, measured = _kind_figures(predicted, prepared, kind)
    if not len(measured):
        return float("nan")
    errors = np.abs(pred / measured - 1.0)
    return 100.0 * float(np.median(np.where(np.isfinite(errors), errors, np.inf)))


def abs_log_errors(predicted: Mapping[str, np.ndarray], prepared: Prepared, kind: str) -> np.ndarray:
    """|log(predicted / measured)| of one kind's measured rows; inf where not predicted."""
    pred, measured = _kind_figures(predicted, prepared, kind)
    with np.errstate(divide="ignore", invalid="ignore"):
        errors = np.abs(np.log(pred / measured))
    return np.where(np.isfinite(errors), errors, np.inf)


def sign_test_p(mine: np.ndarray, theirs: np.ndarray) -> float:
    """One-sided sign-test p-value that ``mine`` is smaller than ``theirs`` row by row more
    often than chance: P(X >= wins) for X ~ Binomial(rows without a tie, 1/2)."""
    wins, losses = int(np.sum(mine < theirs)), int(np.sum(mine > theirs))
    n = wins + losses
    return sum(math.comb(n, j) for j in range(wins, n + 1)) / 2.0**n if n else 1.0


def guard(fitted: CalibratedParameters, report: FitReport, base: CalibratedParameters,
          held_out: Mapping[str, np.ndarray], prepared: Prepared) -> tuple[CalibratedParameters, FitReport]:
    """``fitted`` with each kind's parameters reset to ``base`` where ``held_out`` predictions
    (of ``prepared``'s rows, by fits that did not see them) are not better than ``base``'s."""
    base_pred = predict(prepared, base)
    values, warnings = dict(report.params), list(report.warnings)
    for kind in KINDS:
        names = [p for p in report.params if (p in MEMORY_PARAMS) == (kind == "memory")]
        mine, theirs = median_abs_pct(held_out, prepared, kind), median_abs_pct(base_pred, prepared, kind)
        if not names or np.isnan(theirs):
            continue
        p_value = sign_test_p(abs_log_errors(held_out, prepared, kind), abs_log_errors(base_pred, prepared, kind))
        if mine < theirs and p_value <= SIGNIFICANCE:
            continue
        values.update({p: base.value(p) for p in names})
        warnings.append(f"the fitted {kind} parameters ({', '.join(names)}) were not kept: on rows the fit "
                        f"did not see their median error is {mine:.1f}% against the starting values' "
                        f"{theirs:.1f}% (sign test p = {p_value:.2f}, needs < {theirs:.1f}% and p <= {SIGNIFICANCE}); "
                        "the starting values stay")
    kept = fitted.with_values(values)
    return kept, replace(report, params=values, flags=flag_values(values), warnings=warnings)


def cross_validated_fit(rows: Sequence[Row], ctx_factory: ContextFactory, params: Sequence[str],
                        base: CalibratedParameters, seed: int = 0, folds: int = 5, jobs: int = 1,
                        **fit_options) -> tuple[CalibratedParameters, FitReport, CrossValidation | None, str]:
    """What ``autoplan calibrate`` does (:func:`autoplan.calibration.measured.calibrate_measured`):
    :func:`fit_efficiency` on every row, the same fit ``folds``-fold cross-validated, and each
    kind's fitted values kept only where the held-out predictions beat ``base`` (:func:`guard`).
    Returns the parameters, the report, the cross-validation (None where a training fold has too
    few rows: then the fit stands unguarded) and a note saying so."""
    rows = list(rows)
    fitted, report = fit_efficiency(rows, ctx_factory, params, seed, **fit_options)
    try:
        cv = cross_validate(rows, ctx_factory, params, seed, folds, jobs=jobs, **fit_options)
    except CalibrationError as exc:
        return fitted, report, None, f"cross-validation skipped: a training fold has too few rows ({exc})"
    fitted, report = guard(fitted, report, base, cv.predicted, prepare(rows, ctx_factory))
    return fitted, report, cv, ""
