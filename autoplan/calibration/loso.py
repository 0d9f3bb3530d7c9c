"""Leave-one-source-out (LOSO) accuracy: for every source, the profiles fitted on all the other
sources, then that source predicted.

The shipped profiles are fitted on a seeded 30% of each source, so their held-out rows share
the software, cluster and recipe of rows fitted on: an in-source figure, interpolation. Here a
source's rows are predicted by parameters that never saw any row of it, the way a user's new
run is: for each (trainer, GPU) pair of ``FIT_PLAN`` the same parameters are refitted on every
fittable row of the other sources (the shipped fit's loss, stragglers' speeds left out, no
shrinkage toward the shipped values); a pair with too few rows left is not fitted, and its rows
take the efficiencies transferred from the fold's other fits (``profiles.transfer``: the
trainer's nearest fitted GPU, else another trainer's), as an unmeasured pair does.

Caveats, stated: a fit starts from the shipped values (a starting point of a multistart, not a
prior); sources that are never fitted on (``HELD_OUT_SOURCES``, ``NOT_FITTED``) are predicted
by folds that leave them out, as before, so their figures are the in-source ones.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import yaml

from autoplan.calibration.accuracy import (
    FIT_LOSS,
    FIT_PLAN,
    HELD_OUT_SOURCES,
    NOT_FITTED,
    TIME_SOURCES,
    straggler_ids,
    without_straggler_speeds,
)
from autoplan.calibration.fit import CalibrationError, fit_efficiency, predict_rows
from autoplan.calibration.rows import Row, Source, row_context
from autoplan.calibration.uncertainty import error_band
from autoplan.profiles import CalibratedParameters, load_profile
from autoplan.profiles.transfer import transfer_parameters

Pair = tuple[str, str]


def fold_fits(sources: Mapping[str, Source], held: str, seed: int = 0,
              cache: dict | None = None, plan: Mapping[Pair, tuple[str, ...]] = FIT_PLAN,
              start: Callable = row_context) -> dict[Pair, CalibratedParameters]:
    """Each pair of ``FIT_PLAN`` fitted on the fittable rows of every source but ``held``; a pair
    whose rows are too few without it is left out (``plan``: another fit plan, e.g. one parameter
    fewer, and ``start`` the row -> context factory whose parameters the fit starts from and holds
    the unfitted ones at: ``benchmarks/parameter_benefit.py``). ``cache`` (shared between folds) keeps each fit
    by its pair and the sources its rows came from: a fold refits only the pairs ``held`` has rows
    of, the others are the fit on every source (the same rows, the same numbers)."""
    cache = {} if cache is None else cache
    fitted_sources = [name for name in sources if name not in (held, *NOT_FITTED, *HELD_OUT_SOURCES)]
    masked = straggler_ids([r for s in sources.values() for r in s.rows])
    out = {}
    for pair, params in plan.items():
        rows = without_straggler_speeds([r for name in fitted_sources for r in sources[name].rows
                                         if (r.has_time or r.has_memory) and (r.trainer, r.hardware) == pair], masked)
        key = (pair, tuple(params), frozenset(r.source for r in rows), seed, start)
        if key not in cache:
            try:
                cache[key], _ = fit_efficiency(rows, start, params, seed, loss=FIT_LOSS.get(pair, "soft_l1"),
                                               prior_rows=0.0)
            except CalibrationError:
                cache[key] = None
        if cache[key] is not None:
            out[pair] = cache[key]
    return out


def fold_parameters(fits: Mapping[Pair, CalibratedParameters], trainer: str, hardware: str) -> CalibratedParameters:
    """The parameters a fold gives a (trainer, GPU) pair: its own fit, else those transferred from
    the trainer's fitted GPUs, else (a trainer fitted nowhere in the fold) from the other trainers'."""
    if (trainer, hardware) in fits:
        return fits[(trainer, hardware)]
    profile = load_profile(trainer)
    own = {gpu: p for (t, gpu), p in fits.items() if t == trainer}
    borrowed = None if own else {(t, gpu): p for (t, gpu), p in fits.items() if t != trainer}
    return transfer_parameters(own, hardware, profile.parameters["default"], borrowed=borrowed)


def fold_factory(fits: Mapping[Pair, CalibratedParameters]) -> Callable:
    """A row -> CostContext factory with the fold's parameters for every row."""
    def factory(row: Row):
        return replace(row_context(row), parameters=fold_parameters(fits, row.trainer, row.hardware))
    return factory


@dataclass(frozen=True)
class SourceFigures:
    """One source's LOSO figures (NaN where it has no such measurement)."""

    source: str
    time_rows: int
    tokens_mape: float  # mean |predicted/measured − 1|, %
    tokens_median_signed: float  # median predicted/measured − 1, %
    memory_rows: int
    memory_median_abs: float  # %
    band_coverage: float  # share of time rows whose measurement lies in the shipped band, %
    pairs_fitted: int  # of FIT_PLAN's, in this source's fold


def source_figures(name: str, source: Source, fits: Mapping[Pair, CalibratedParameters] | None) -> SourceFigures:
    """``name``'s figures with the fold's ``fits`` (None: the shipped profiles, fitted on 30% of
    every source: the in-source figure beside it)."""
    rows = [r for r in source.rows if r.status == "ok" and (r.has_time or r.has_memory)]
    pairs = len(fits) if fits is not None else len(FIT_PLAN)
    if not rows:
        return SourceFigures(name, 0, math.nan, math.nan, 0, math.nan, math.nan, pairs)
    predicted = predict_rows(rows, fold_factory(fits) if fits is not None else row_context)
    tokens = np.array([r.tokens_per_s_per_gpu for r in rows])
    memory = np.array([r.peak_memory_bytes for r in rows])
    has_t, has_m = np.isfinite(tokens), np.isfinite(memory)
    ratio_t = predicted["tokens_per_s_per_gpu"][has_t] / tokens[has_t] - 1.0
    ratio_m = predicted["peak_memory_bytes"][has_m] / memory[has_m] - 1.0
    inside = []
    for r, p in zip([r for r, ok in zip(rows, has_t) if ok], predicted["tokens_per_s_per_gpu"][has_t]):
        band = error_band(r.trainer, r.hardware, r.model.is_moe, gpus=r.num_gpus)
        inside.append(p * band.tokens_low_factor <= r.tokens_per_s_per_gpu <= p * band.tokens_high_factor)
    pct = lambda x, f: float(100 * f(x)) if len(x) else math.nan  # noqa: E731
    return SourceFigures(name, int(has_t.sum()), pct(np.abs(ratio_t), np.nanmean), pct(ratio_t, np.nanmedian),
                         int(has_m.sum()), pct(np.abs(ratio_m), np.nanmedian),
                         pct(np.array(inside, dtype=float), np.mean), pairs)


def loso_figures(sources: Mapping[str, Source], seed: int = 0,
                 progress: Callable[[str], None] | None = None) -> list[SourceFigures]:
    """Every source's figures from its own fold (fits without it)."""
    out = []
    for name, source in sources.items():
        if progress:
            progress(name)
        out.append(source_figures(name, source, fold_fits(sources, name, seed)))
    return out


def pooled_mape(figures: list[SourceFigures]) -> float:
    """Row-weighted tokens/s MAPE over the time rows of the sources whose tokens/s the accuracy
    report judges (``TIME_SOURCES``: the playbook sweep's speeds include stalled runs at scale,
    ``accuracy.straggler_ids``, and are judged by ranking, not by MAPE), %."""
    timed = [f for f in figures if f.time_rows and f.source in TIME_SOURCES]
    rows = sum(f.time_rows for f in timed)
    return sum(f.tokens_mape * f.time_rows for f in timed) / rows if rows else math.nan



# --- the folds' fits, stored --------------------------------------------------------------------
# Fitting every fold takes minutes; predicting with the fits takes seconds. `benchmarks/accuracy.py
# --write-bands` stores each source's fold fits beside the bands (one fingerprint for both), and
# `autoplan validate` predicts with them; `validate --full` refits them.

FOLDS_FILE = Path(__file__).resolve().parent / "loso_folds.yaml"
Folds = Mapping[str, Mapping[Pair, CalibratedParameters]]


def all_fold_fits(sources: Mapping[str, Source], seed: int = 0, cache: dict | None = None,
                  progress: Callable[[str], None] | None = None) -> dict[str, dict[Pair, CalibratedParameters]]:
    """Every source's fold fits (``fold_fits``), by source."""
    cache = {} if cache is None else cache
    out = {}
    for name in sources:
        if progress:
            progress(name)
        out[name] = fold_fits(sources, name, seed, cache)
    return out


def folds_document(folds: Folds, fingerprint: str, seed: int) -> dict:
    """The stored form: per source, per pair, every parameter's value and the fitted names."""
    return {"fingerprint": fingerprint, "seed": seed,
            "folds": {name: {f"{t}/{h}": {"fitted_on": p.fitted_on, "fitted": list(p.fitted),
                                               "values": p.values()}
                             for (t, h), p in sorted(fits.items())} for name, fits in folds.items()}}


def write_folds(document: Mapping, path: Path = FOLDS_FILE) -> None:
    """Write the folds file (temp file, then rename: never half written)."""
    text = ("# Generated by `python benchmarks/accuracy.py --write-bands` with error_bands.yaml; "
            "do not edit by hand.\n# Each source's leave-one-source-out fits (autoplan/calibration/loso.py).\n"
            + yaml.safe_dump(dict(document), sort_keys=False, width=100))
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    tmp.replace(path)


def stored_folds(fingerprint: str, path: Path = FOLDS_FILE) -> dict[str, dict[Pair, CalibratedParameters]] | None:
    """The stored fold fits, or None when the file is missing or was written for other inputs
    (another ``fingerprint``: rows, profiles, fit plan or band settings changed since)."""
    if not path.is_file():
        return None
    from autoplan.specs.yaml_io import read_mapping

    document = read_mapping(path)  # the one YAML 1.2 loader (autoplan.specs.yaml_parse)
    if not isinstance(document, dict) or document.get("fingerprint") != fingerprint:
        return None
    out = {}
    for name, fits in document["folds"].items():
        out[name] = {}
        for key, entry in fits.items():
            trainer, hardware = key.split("/", 1)
            base = load_profile(trainer).parameters["default"].with_values(entry["values"], fitted=False)
            out[name][(trainer, hardware)] = replace(base, fitted_on=entry["fitted_on"], fitted=tuple(entry["fitted"]))
    return out
