"""Fit a few named parameters (physical efficiencies and corrections) to measured runs, and say
how well they predict.

The model is the cost model itself; only the named parameters move. The objective is robust
least squares on log error: the mean of the soft-L1 loss ``2δ²(√(1 + (r/δ)²) − 1)`` of
``r = log(predicted / measured)`` over the tokens/s rows plus the same over the memory rows
(δ = 0.1, so a row off by more than ~10% counts linearly, not quadratically: one broken run
cannot drag the fit), or the Cauchy loss ``δ²·log(1 + (r/δ)²)`` for data with gross outliers.
Parameters are searched inside their ``bounds`` (``autoplan.profiles.PARAMETERS``) through a
sigmoid map (log-scaled for FLOP counts), so no fitted value can leave its physical range; the
search is a Nelder–Mead simplex (Gao & Han 2012 adaptive coefficients) from the current values plus
seeded random starts, so a fit is deterministic for a seed. No scipy needed. A fitted value on a
bound or outside its plausible range is flagged in the report (``FitReport.flags``), never hidden.

Few rows cannot pin many parameters: the starting values act as a shrinkage prior (ridge on
the box position, worth ``PRIOR_ROWS`` rows, so it fades as rows are added), and a parameter
the rows cannot see is left where it was, with a warning (``FitReport.warnings``).
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from autoplan.calibration.identifiability import STEP, screen
from autoplan.calibration.processes import map_in_processes
from autoplan.calibration.rows import Row, row_context
from autoplan.calibration.simplex import Space, multistart
from autoplan.cost.context import CostContext
from autoplan.cost.evaluate import evaluate
from autoplan.errors import AutoplanError
from autoplan.layout import LayoutBatch
from autoplan.layout_records import layout_from_record
from autoplan.profiles import PARAMETERS, CalibratedParameters, Flag, flag_values

# The parameters that move predicted memory, judged by the memory rows (fit prior, screen, guard);
# the others act on time alone (tests/unit/calibration/test_fit.py checks it on the cost model).
MEMORY_PARAMS = ("memory_reserve_bytes", "allocator_overhead", "pp_extra_layers_per_microbatch")
DEFAULT_PARAMS = ("gemm_efficiency_max", "gemm_half_flops", "scale_out_efficiency", "dp_overlap",
                  "memory_reserve_bytes", "allocator_overhead")
LOSS_SCALE = 0.1
# Shrinkage toward the starting (shipped) values: they weigh as much as PRIOR_ROWS measured rows,
# and a move of PRIOR_WIDTH of a parameter's box costs like a row off by LOSS_SCALE (≈10%).
PRIOR_ROWS = 2.0
PRIOR_WIDTH = 0.1
ContextFactory = Callable[[Row], CostContext]


class CalibrationError(AutoplanError):
    """Calibration input that cannot support a fit (too few rows, unknown parameter ...)."""


# --- batched prediction --------------------------------------------------------------------

@dataclass
class Prepared:
    """Rows grouped by cost context, with their layouts as batches (built once, costed often)."""

    rows: list[Row]
    groups: list[tuple[CostContext, LayoutBatch, np.ndarray, bool]]
    measured_tokens: np.ndarray
    measured_memory: np.ndarray


def _measured(rows: Sequence[Row]) -> Prepared:
    """The rows and their measured figures (NaN where not measured), not yet grouped."""
    return Prepared(rows=list(rows), groups=[],
                    measured_tokens=np.array([r.tokens_per_s_per_gpu for r in rows], dtype=float),
                    measured_memory=np.array([r.peak_memory_bytes for r in rows], dtype=float))


def prepare(rows: Sequence[Row], ctx_factory: ContextFactory = row_context) -> Prepared:
    """Group ``rows`` by (model, hardware, trainer, training setup) and resolve their layouts."""
    rows = list(rows)
    by_key: dict[tuple, list[int]] = {}
    for i, row in enumerate(rows):
        by_key.setdefault(row.context_key + (row.allow_uneven,), []).append(i)
    groups = []
    for key, index in by_key.items():
        ctx = ctx_factory(rows[index[0]])
        layouts = [layout_from_record(rows[i].layout, ctx.training) for i in index]
        groups.append((ctx, LayoutBatch.from_layouts(layouts), np.asarray(index), bool(key[-1])))
    measured = _measured(rows)
    return replace(measured, groups=groups)


PREDICTED = ("tokens_per_s_per_gpu", "peak_memory_bytes", "fits", "mfu")


def predict(prepared: Prepared, parameters: CalibratedParameters | None = None) -> dict[str, np.ndarray]:
    """Predicted tokens/s per GPU, memory, fits and MFU of every row (row order).

    ``peak_memory_bytes`` is the memory of the GPU the row measured (``Row.memory_stage``: the
    heaviest stage, or the first stage's), reserved or allocated as the row measured it
    (``Row.memory_kind``); ``peak_memory_all_stages_bytes`` the heaviest stage's,
    which ``fits`` compares with the GPU; ``firm_peak_memory_bytes`` and ``fits_with_retries``
    the same without the allocator's cache (cost.stage_memory.memory_table). ``parameters``
    replace each context's own (the shipped profile's) when given.
    """
    n = len(prepared.rows)
    over_stages = ("peak_memory_all_stages_bytes", "firm_peak_memory_bytes", "fits_with_retries")
    out = {name: np.full(n, np.nan) for name in (*PREDICTED, *over_stages)}
    for ctx, batch, index, uneven in prepared.groups:
        if parameters is not None:
            ctx = replace(ctx, parameters=parameters)
        table = evaluate(ctx, batch, allow_uneven=uneven)
        for name in PREDICTED:
            out[name][index] = table[name]
        out["peak_memory_all_stages_bytes"][index] = table["peak_memory_bytes"]
        out["firm_peak_memory_bytes"][index] = table["firm_peak_memory_bytes"]
        out["fits_with_retries"][index] = table["fits_with_retries"]
        first = np.array([prepared.rows[i].memory_stage == "first" for i in index])
        allocated = np.array([prepared.rows[i].memory_kind == "allocated" for i in index])
        reserved = np.where(first, table["mem_first_total_bytes"], table["peak_memory_bytes"])
        tensors = np.where(first, table["mem_first_total_bytes"] - table["mem_first_reserve_bytes"],
                           table["peak_allocated_memory_bytes"])
        out["peak_memory_bytes"][index] = np.where(allocated, tensors, reserved)
    out["fits"] = out["fits"] > 0.5
    out["fits_with_retries"] = out["fits_with_retries"] > 0.5
    return out


def predict_rows(rows: Sequence[Row], ctx_factory: ContextFactory = row_context,
                 parameters: CalibratedParameters | None = None) -> dict[str, np.ndarray]:
    """``predict`` for a list of rows in one call."""
    return predict(prepare(rows, ctx_factory), parameters)


def log_errors(predicted: np.ndarray, measured: np.ndarray) -> np.ndarray:
    """log(predicted / measured) where both are finite and positive, NaN elsewhere."""
    with np.errstate(divide="ignore", invalid="ignore"):
        ok = np.isfinite(measured) & (measured > 0)
        return np.where(ok, np.log(np.where(predicted > 0, predicted, np.nan) / measured), np.nan)


def soft_l1(r: np.ndarray, scale: float = LOSS_SCALE) -> float:
    """Mean robust loss 2δ²(√(1 + (r/δ)²) − 1); a non-finite prediction costs as r = 10."""
    r = np.where(np.isfinite(r), r, 10.0)
    return float(np.mean(2.0 * scale**2 * (np.sqrt(1.0 + (r / scale) ** 2) - 1.0)))


def cauchy(r: np.ndarray, scale: float = LOSS_SCALE) -> float:
    """Mean Cauchy loss δ²·log(1 + (r/δ)²): a gross outlier adds only log-many units."""
    r = np.where(np.isfinite(r), r, 10.0)
    return float(np.mean(scale**2 * np.log1p((r / scale) ** 2)))


def trimmed(r: np.ndarray, keep: float = 0.5) -> float:
    """Least trimmed squares (Rousseeuw 1984, JASA 79, "Least median of squares regression"):
    the mean of the smallest ``keep`` share of r², so the fit follows the best-explained
    half of the rows and ignores the rest however far off (a 50% breakdown point: the fit that
    lowers the median error). Non-finite predictions cost as r = 10."""
    r = np.where(np.isfinite(r), r, 10.0)
    squares = np.sort(r**2)
    return float(np.mean(squares[:max(1, int(np.ceil(keep * len(squares))))]))


LOSSES = {"soft_l1": soft_l1, "cauchy": cauchy, "trimmed": trimmed}


# --- the fit ----------------------------------------------------------------------------------

@dataclass
class FitReport:
    """What a fit did: fitted values, the rows used, loss and errors before and after, and the
    fitted values that sit on a bound or outside their plausible range (``flags``)."""

    trainer: str
    hardware: str
    params: dict[str, float]
    row_ids: list[str]
    num_time_rows: int
    num_memory_rows: int
    loss_before: float
    loss_after: float
    errors_before: dict[str, float]
    errors_after: dict[str, float]
    evaluations: int
    seed: int
    loss: str
    flags: list[Flag]
    warnings: list[str] = field(default_factory=list)


def error_summary(predicted: dict[str, np.ndarray], prepared: Prepared) -> dict[str, float]:
    """Mean absolute % error of tokens/s and median absolute % error of memory (NaN if none)."""
    t = np.abs(predicted["tokens_per_s_per_gpu"] / prepared.measured_tokens - 1.0)
    m = np.abs(predicted["peak_memory_bytes"] / prepared.measured_memory - 1.0)
    t, m = t[np.isfinite(prepared.measured_tokens)], m[np.isfinite(prepared.measured_memory)]
    return {"tokens_mape_pct": 100 * float(np.mean(t)) if len(t) else math.nan,
            "memory_median_ape_pct": 100 * float(np.median(m)) if len(m) else math.nan}


def _check_fit_input(rows: Sequence[Row], params: Sequence[str]) -> tuple[int, int]:
    """Raise CalibrationError unless ``rows`` can support fitting ``params``; (#time, #memory)."""
    unknown = [p for p in params if p not in PARAMETERS]
    if unknown or not params:
        raise CalibrationError(f"unknown or no parameter(s) {unknown or list(params)}; "
                               f"fittable: {', '.join(PARAMETERS)}")
    pairs = sorted({(r.trainer, r.hardware) for r in rows})
    if len(pairs) > 1:
        raise CalibrationError(f"rows must share one (trainer, hardware) pair, got {pairs}")
    n_mem_params = sum(p in MEMORY_PARAMS for p in params)
    n_time_params = len(params) - n_mem_params
    n_time = sum(r.has_time for r in rows)
    n_mem = sum(r.has_memory for r in rows)
    for kind, n_rows, n_params in (("tokens/s", n_time, n_time_params), ("memory", n_mem, n_mem_params)):
        need = max(3, n_params + 1) if n_params else 0
        if n_rows < need:
            raise CalibrationError(
                f"too few usable rows to fit {n_params} {kind} parameter(s): need >= {need} rows "
                f"with a measured {kind} figure, got {n_rows} (of {len(rows)} rows)")
    return n_time, n_mem


def _objective(prepared: Prepared, base: CalibratedParameters, space: Space, loss: Callable[[np.ndarray], float],
               prior_rows: float) -> Callable[[np.ndarray], float]:
    """Mean robust loss of the tokens/s rows plus that of the memory rows (for the kinds with a
    fitted parameter), plus the shrinkage prior: each parameter's move from its starting box
    position u₀, ``LOSS_SCALE² · ((u − u₀) / PRIOR_WIDTH)²``, weighted as ``prior_rows`` rows of
    its kind (so it fades as rows are added; a Gaussian prior on u, i.e. ridge regression)."""
    kinds = {kind: [i for i, p in enumerate(space.names) if (p in MEMORY_PARAMS) == (kind == "memory")]
             for kind in ("tokens", "memory")}
    counts = {"tokens": int(np.isfinite(prepared.measured_tokens).sum()),
              "memory": int(np.isfinite(prepared.measured_memory).sum())}
    u0 = space.unit(space.point(base))

    def f(z: np.ndarray) -> float:
        pred = predict(prepared, base.with_values(space.values(z)))
        u, total = space.unit(z), 0.0
        for kind, column, measured in (("tokens", "tokens_per_s_per_gpu", prepared.measured_tokens),
                                       ("memory", "peak_memory_bytes", prepared.measured_memory)):
            if not kinds[kind]:
                continue
            r = log_errors(pred[column], measured)
            total += loss(r[np.isfinite(measured)])
            moved = (u[kinds[kind]] - u0[kinds[kind]]) / PRIOR_WIDTH
            total += prior_rows / max(1, counts[kind]) * LOSS_SCALE**2 * float(np.sum(moved**2))
        return total
    return f


def sensitivities(prepared: Prepared, base: CalibratedParameters, space: Space) -> dict[str, np.ndarray]:
    """Per parameter: Δ log prediction of its figure (tokens/s, or memory for the memory
    parameters) on the rows that measure it, for a move of ``STEP`` of its box from the start
    (inward), the others held (:mod:`autoplan.calibration.identifiability`)."""
    z0 = space.point(base)
    u0 = space.unit(z0)
    ref = predict(prepared, base)
    out = {}
    for i, name in enumerate(space.names):
        u = u0.copy()
        u[i] = u0[i] + STEP if u0[i] + STEP < 0.99 else u0[i] - STEP
        pred = predict(prepared, base.with_values({name: space.values(np.log(u / (1.0 - u)))[name]}))
        column, measured = (("peak_memory_bytes", prepared.measured_memory) if name in MEMORY_PARAMS
                            else ("tokens_per_s_per_gpu", prepared.measured_tokens))
        ok = np.isfinite(measured)
        with np.errstate(divide="ignore", invalid="ignore"):
            out[name] = np.log(pred[column][ok] / ref[column][ok])
    return out


def _identifiable(prepared: Prepared, base: CalibratedParameters, params: tuple[str, ...]) -> tuple[tuple[str, ...], list[str]]:
    """The parameters the rows can identify and the warnings (CalibrationError when none)."""
    kept, warnings = screen(sensitivities(prepared, base, Space(params, tuple(PARAMETERS[p].bounds for p in params))))
    if not kept:
        raise CalibrationError("the rows cannot identify any of the parameters asked for: " + "; ".join(warnings))
    return kept, warnings


def fit_efficiency(rows: Sequence[Row], base_ctx_factory: ContextFactory = row_context,
                   params: Sequence[str] = DEFAULT_PARAMS, seed: int = 0, *, starts: int = 3,
                   max_evals: int = 300, loss: str = "soft_l1",
                   prior_rows: float = PRIOR_ROWS) -> tuple[CalibratedParameters, FitReport]:
    """Fit ``params`` (physical efficiencies or corrections, by name) of the rows' (trainer,
    hardware) pair to their measurements.

    Starts from the parameters ``base_ctx_factory`` gives the first row, plus ``starts - 1``
    seeded random starts, then polishes the best once; the starting values also act as a
    shrinkage prior worth ``prior_rows`` rows (0: none). Parameters the rows cannot see are left
    at their starting values, with a warning in ``FitReport.warnings``
    (:mod:`autoplan.calibration.identifiability`). Raises ``CalibrationError`` when the rows
    mix (trainer, hardware) pairs, identify none of the parameters, or are too few: each kind
    (tokens/s, memory) with a fitted parameter needs max(3, parameters of that kind + 1) rows
    with that figure.
    """
    rows = list(rows)
    if not rows:
        raise CalibrationError("too few usable rows: got none")
    if loss not in LOSSES:
        raise CalibrationError(f"unknown loss '{loss}'; known: {', '.join(LOSSES)}")
    params = tuple(dict.fromkeys(params))
    n_time, n_mem = _check_fit_input(rows, params)
    prepared = prepare(rows, base_ctx_factory)
    base = prepared.groups[0][0].parameters
    params, warnings = _identifiable(prepared, base, params)
    space = Space(params, tuple(PARAMETERS[p].bounds for p in params))
    f = _objective(prepared, base, space, LOSSES[loss], prior_rows)
    z0 = space.point(base)
    loss_before = f(z0)
    best_z, best_f, evals = multistart(f, z0, starts, seed, max_evals)
    values = space.values(best_z)
    fitted = base.with_values(values)
    report = FitReport(
        trainer=rows[0].trainer, hardware=rows[0].hardware, params=values,
        row_ids=[r.row_id for r in rows], num_time_rows=n_time, num_memory_rows=n_mem,
        loss_before=loss_before, loss_after=best_f,
        errors_before=error_summary(predict(prepared, base), prepared),
        errors_after=error_summary(predict(prepared, fitted), prepared), evaluations=evals, seed=seed,
        loss=loss, flags=flag_values(values), warnings=warnings)
    return fitted, report


# --- splits and cross-validation ---------------------------------------------------------------

def split_rows(rows: Sequence[Row], fraction: float = 0.3, seed: int = 0) -> tuple[list[Row], list[Row]]:
    """(fit, held-out): a seeded ``fraction`` of each source's rows (at least one) to fit on.

    Each source is shuffled with its own generator (seed and a CRC of its name), so adding a
    source never changes another's split.
    """
    if not 0.0 < fraction < 1.0:
        raise CalibrationError(f"0 < fraction < 1 must hold, got fraction={fraction}")
    by_source: dict[str, list[Row]] = {}
    for row in rows:
        by_source.setdefault(row.source, []).append(row)
    chosen: set[str] = set()
    for name, members in by_source.items():
        rng = np.random.default_rng([seed, zlib.crc32(name.encode())])
        take = max(1, int(round(fraction * len(members))))
        chosen.update(members[i].row_id for i in rng.permutation(len(members))[:take])
    return ([r for r in rows if r.row_id in chosen], [r for r in rows if r.row_id not in chosen])


@dataclass
class CrossValidation:
    """Held-out predictions of every row (each predicted by the fold that did not see it)."""

    rows: list[Row]
    folds: np.ndarray
    predicted: dict[str, np.ndarray]
    fitted: list[CalibratedParameters]

    def errors(self) -> dict[str, float]:
        """Held-out tokens/s MAPE and memory median absolute % error over all rows."""
        return error_summary(self.predicted, _measured(self.rows))


def fold_assignment(num_rows: int, k: int, seed: int) -> np.ndarray:
    """The fold of each of ``num_rows`` rows: a seeded permutation dealt round-robin into
    ``min(k, num_rows)`` folds. Raises ``CalibrationError`` below 2 folds."""
    k = min(k, num_rows)
    if k < 2:
        raise CalibrationError(f"cross-validation needs at least 2 rows, got {num_rows}")
    folds = np.empty(num_rows, dtype=int)
    folds[np.random.default_rng(seed).permutation(num_rows)] = np.arange(num_rows) % k
    return folds


def training_fold_mask(folds: np.ndarray, fold: int, train_on: str) -> np.ndarray:
    """Rows that fit the model predicting ``fold``: every other fold (``train_on="others"``, the
    classic k-fold), or only the fold before it, cyclically (``"one"``: each fit sees 1/k of the
    rows, as the shipped profiles see the 30% fit split of ``benchmarks/accuracy.py``, so the
    held-out errors are those of a fit on that many rows, not of one on (k-1)/k of them)."""
    if train_on == "others":
        return folds != fold
    if train_on == "one":
        return folds == (fold - 1) % (int(folds.max()) + 1)
    raise CalibrationError(f"train_on must be 'others' or 'one', got {train_on!r}")


def cross_validate(rows: Sequence[Row], base_ctx_factory: ContextFactory = row_context,
                   params: Sequence[str] = DEFAULT_PARAMS, seed: int = 0, k: int = 5,
                   train_on: str = "others", jobs: int = 1, **fit_options) -> CrossValidation:
    """k-fold cross-validation: fit on k-1 folds (``train_on="others"``) or on the one fold
    before (``"one"``, :func:`training_fold_mask`), predict the held-out fold, for every fold.

    Folds are a seeded permutation of the rows (k is capped at the number of rows: k = n is
    leave-one-out). ``jobs`` > 1 fits the folds in that many processes (the same numbers; the
    context factory must pickle). Raises ``CalibrationError`` when a training fold has too few rows.
    """
    rows = list(rows)
    folds = fold_assignment(len(rows), k, seed)
    tasks = [([r for r, t in zip(rows, training_fold_mask(folds, fold, train_on)) if t],
              [rows[i] for i in np.flatnonzero(folds == fold)], base_ctx_factory, tuple(params), seed, fit_options)
             for fold in range(int(folds.max()) + 1)]
    done = map_in_processes(fit_and_predict, tasks, jobs)
    predicted = {name: np.full(len(rows), np.nan) for name in PREDICTED}
    for fold, (_, pred) in enumerate(done):
        for name in PREDICTED:
            predicted[name][folds == fold] = pred[name]
    return CrossValidation(rows=rows, folds=folds, predicted=predicted, fitted=[eff for eff, _ in done])


def fit_and_predict(task: tuple) -> tuple[CalibratedParameters, dict[str, np.ndarray]]:
    """One fold: fit on its training rows, predict its test rows; ``task`` is (train, test,
    context factory, params, seed, fit options)."""
    train, test, ctx_factory, params, seed, fit_options = task
    eff, _ = fit_efficiency(train, ctx_factory, params, seed, **fit_options)
    return eff, predict_rows(test, ctx_factory, eff)
