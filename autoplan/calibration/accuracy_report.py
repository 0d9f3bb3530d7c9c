"""The accuracy report as data: every figure of ``benchmarks/accuracy.py`` as a :class:`Figure`.

``autoplan validate`` formats these (table, JSON, CSV); the arithmetic is here once, on top of
:mod:`autoplan.calibration.accuracy` (splits, fits, statistics). Sections:

* ``rows``: rows per source, fitted on / held out / left out (the seeded split of the shipped
  profiles, :func:`autoplan.calibration.accuracy.fit_split`).
* ``loso``: every source predicted by the profiles fitted on all the others
  (:mod:`autoplan.calibration.loso`, the fold fits stored with the bands): per source and pooled
  tokens/s MAPE, median signed error, memory error, and the share of rows in the band built from
  the other sources' errors (the headline figures).
* ``memory`` (:mod:`autoplan.calibration.memory_report`): median and p90 absolute % error of peak
  memory over the playbook sweep's ``ok`` runs, ``fits`` agreement with ok / crashed_or_oom, ``ok``
  runs predicted > 3% over capacity and not to fit even with the allocator's retries, the runs
  that fit only with them, torchtitan's median error.
* ``memory-unit`` (fits, ``memory_report``): the playbook's "GB" read as GB and as GiB, memory
  parameters refitted.
* ``time``: tokens/s MAPE per source and overall (the six sources with a MAPE target).
* ``intervals``: per source, the share of held-out rows inside their error band (70-95%).
* ``ranking``: Spearman, top-1 and best-of-top-3 regret within each (model, nodes) cell of the
  sweep on measured tokens/s, judged without the runs their ZeRO twin shows to be failed or
  straggling (:mod:`autoplan.calibration.zero_twins`), and printed with them too; the regret
  again on the sweep's MFU column, which within a cell is not proportional to its tokens/s; the
  share of runs per node count that stalled at scale, found without the model
  (:mod:`autoplan.calibration.scale_stalls`), and the figures without those runs (no target).
* ``sweep-refit`` (fits): calibrate on a seeded 20% of the 8B sweep's ``ok`` runs as ``autoplan
  calibrate`` does (:func:`autoplan.calibration.guard.cross_validated_fit`); the held-out errors
  must not be worse than the uncalibrated default's and the shipped profile's (issue 14).
* ``golden``: ZeRO paper Fig. 1 model-state GB per GPU.

Every "fit" / "held-out" subset refers to the shipped profiles' split; targets are judged on
held-out rows.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from autoplan.calibration.accuracy import (
    FIT_FRACTION,
    FIT_LOSS,
    FIT_PLAN,
    TIME_SOURCES,
    TOP_K,
    Pair,
    abs_pct_errors,
    cell_rankings,
    fit_split,
    predictions,
    zero_figure1_gb,
)
from autoplan.calibration.fit import (
    predict_rows,
    split_rows,
)
from autoplan.calibration import REFIT_SECTIONS, SECTIONS  # noqa: F401 (REFIT_SECTIONS: re-exported)
from autoplan.calibration.band_fit import COVERAGE
from autoplan.calibration.guard import cross_validated_fit
from autoplan.calibration.memory_report import memory_figures, unit_figures
from autoplan.calibration.report_figures import Figure, split_figures, statistic
from autoplan.calibration.rows import Row, Source, row_context
from autoplan.calibration import scale_stalls as stalls
from autoplan.calibration.sources import load_sources
from autoplan.calibration.uncertainty import error_band
from autoplan.calibration.validation import PLAYBOOK_HARDWARE, load_playbook_sweep
from autoplan.calibration.zero_twins import TWIN_FACTOR, max_predicted_twin_ratio, twin_groups, zero_twin_anomalies
from autoplan.errors import AutoplanError
from autoplan.profiles import CalibratedParameters, load_profile

ISSUE8_FRACTION = 0.2
Progress = Callable[[str], None]


def rows_figures(sources: Mapping[str, Source], fit_ids: set[str]) -> list[Figure]:
    out = []
    for name, src in sources.items():
        measured = [r for r in src.rows if r.has_time or r.has_memory]
        n_fit = sum(r.row_id in fit_ids for r in measured)
        for subset, n in (("rows", len(src.rows)), ("fit", n_fit), ("held-out", len(measured) - n_fit),
                          ("left out", len(src.excluded))):
            out.append(Figure("rows", name, subset, n, float(n), unit="rows"))
    return out


def time_figures(sources: Mapping[str, Source], fit_ids: set[str],
                 eff: Mapping[Pair, CalibratedParameters] | None = None) -> list[Figure]:
    out, held_all, fit_all = [], [], []
    for name in TIME_SOURCES + ("playbook_sweep",):
        rows = [r for r in sources[name].rows if r.has_time]
        pred = predictions(rows, eff)["tokens_per_s_per_gpu"]
        measured = np.array([r.tokens_per_s_per_gpu for r in rows])
        targeted = name in TIME_SOURCES
        out += split_figures("time", f"{name} tokens/s MAPE" + ("" if targeted else " (ranked, no MAPE target)"),
                              rows, pred, measured, fit_ids, "mean", 10.0 if targeted else None)
        if targeted:
            fitted = np.array([r.row_id in fit_ids for r in rows], dtype=bool)
            held_all += list(abs_pct_errors(pred[~fitted], measured[~fitted]))
            fit_all += list(abs_pct_errors(pred[fitted], measured[fitted]))
    overall = statistic(np.array(held_all), "mean")
    out.append(Figure("time", f"overall ({len(TIME_SOURCES)} sources) tokens/s MAPE", "fit", len(fit_all), statistic(np.array(fit_all), "mean")))
    out.append(Figure("time", f"overall ({len(TIME_SOURCES)} sources) tokens/s MAPE", "held-out", len(held_all), overall,
                      target="<= 7", met=overall <= 7.0))
    return out


def _ranking_summary(cells, label: str, n: int, targets: bool) -> list[Figure]:
    """Mean Spearman, top-1 and best-of-top-k regret over ``cells`` (on measured tokens/s, and on
    the source's MFU column, which the sweep does not keep proportional to it); targets only where
    ``targets``, judged on tokens/s: the figure the planner ranks by and Spearman uses."""
    spearman = float(np.nanmean([c.spearman for c in cells]))
    regret = 100.0 * float(np.mean([c.regret for c in cells]))
    regret_top = 100.0 * float(np.mean([c.regret_top3 for c in cells]))
    regret_top_mfu = 100.0 * float(np.mean([c.regret_top3_mfu for c in cells]))
    return [Figure("ranking", f"spearman, mean over cells{label}", "all", n, spearman, unit="",
                   target=">= 0.8" if targets else "", met=spearman >= 0.8 if targets else None),
            Figure("ranking", f"top-1 regret, mean over cells{label}", "all", n, regret),
            Figure("ranking", f"best-of-top-{TOP_K} regret, mean over cells{label}", "all", n, regret_top,
                   target="<= 5" if targets else "", met=regret_top <= 5.0 if targets else None),
            Figure("ranking", f"best-of-top-{TOP_K} regret on the published MFU column, mean over cells{label}",
                   "all", n, regret_top_mfu)]


def ranking_figures(sources: Mapping[str, Source],
                    eff: Mapping[Pair, CalibratedParameters] | None = None) -> list[Figure]:
    """Per cell and over cells, with every ``ok`` run and without the runs their ZeRO twin shows to
    be failed or straggling (:mod:`autoplan.calibration.zero_twins`; the targets are judged
    without them, and both are printed)."""
    rows = [r for r in sources["playbook_sweep"].rows if r.status == "ok"]
    pred = predictions(rows, eff)["tokens_per_s_per_gpu"]
    groups = twin_groups(rows)
    anomalous = zero_twin_anomalies(rows, groups=groups)
    clean = [r for r, a in zip(rows, anomalous) if not a]
    cells = cell_rankings(clean, pred[~anomalous])
    pairs: dict[str, list[bool]] = {}
    for group in groups:
        pairs.setdefault(rows[group[0]].cell, []).append(bool(anomalous[group].any()))
    out = []
    for c in cells:
        apart = pairs.get(c.cell, [])
        out += [Figure("ranking", f"ZeRO twin pairs > {TWIN_FACTOR:g}x apart", c.cell, len(apart),
                       100.0 * float(np.mean(apart)) if apart else math.nan),
                Figure("ranking", "spearman", c.cell, c.num_layouts, c.spearman, unit=""),
                Figure("ranking", f"top-1 regret (picked {c.picked}, best {c.best})", c.cell, c.num_layouts,
                       100.0 * c.regret),
                Figure("ranking", f"best-of-top-{TOP_K} regret", c.cell, c.num_layouts, 100.0 * c.regret_top3),
                Figure("ranking", f"best-of-top-{TOP_K} regret on the published MFU column", c.cell,
                       c.num_layouts, 100.0 * c.regret_top3_mfu)]
    twins = (f" (without the {int(anomalous.sum())} runs > {TWIN_FACTOR:g}x slower than their ZeRO twin; "
             f"largest predicted twin ratio {max_predicted_twin_ratio(rows, pred, groups):.2f}x)")
    out += _ranking_summary(cells, twins, len(clean), targets=True)
    out += _ranking_summary(cell_rankings(rows, pred), ", every ok run", len(rows), targets=False)
    # Sensitivity, not a target: without the runs measured at < 1/3 of the prediction (failed or
    # straggling jobs without a twin, TP x PP in nanotron).
    measured = np.array([r.tokens_per_s_per_gpu for r in rows])
    keep = measured >= pred / 3.0
    kept = cell_rankings([r for r, k in zip(rows, keep) if k], pred[keep])
    label = f", without the {int(np.sum(~keep))} runs measured at < 1/3 of the prediction"
    out += _ranking_summary(kept, label, int(keep.sum()), targets=False)
    return out + _stall_figures(rows, pred, anomalous)


def _stall_figures(rows: Sequence[Row], pred: np.ndarray, anomalous: np.ndarray) -> list[Figure]:
    """Per node count, the share of judged runs that stalled at scale (model-free, ``scale_stalls``);
    then the ranking without them and the ZeRO-twin anomalies (a sensitivity, no target)."""
    excess = stalls.stall_excess_s(rows)
    stalled = stalls.scale_stalls(rows, excess=excess)
    what = (f"runs > {stalls.STALL_S:g} s per micro-batch slower than the same per-GPU work on <= "
            f"{stalls.REFERENCE_MAX_NODES} nodes (stalled; model-free)")
    out = [Figure("ranking", what, f"{n} nodes", k, share) for n, k, share in stalls.stalled_share_by_nodes(rows, excess)]
    keep = ~(stalled | anomalous)
    label = (f", without the {int(stalled.sum())} stalled runs and the {int(anomalous.sum())} ZeRO-twin "
             f"anomalies ({int((~keep).sum())} in all)")
    return out + _ranking_summary(cell_rankings([r for r, k in zip(rows, keep) if k], pred[keep]), label,
                                  int(keep.sum()), targets=False)


def sweep_refit_figures(seed: int = 0, shipped_fit_ids: set[str] | None = None, jobs: int = 1) -> list[Figure]:
    """Calibrate nanotron on a seeded 20% of the 8B sweep's ``ok`` runs as ``autoplan calibrate``
    does (guard.cross_validated_fit: 5-fold, folds fitted in ``jobs`` processes); held-out errors of
    the uncalibrated default, the shipped and the calibrated profile, also on the held-out rows
    the shipped profile (fitted on a split of this sweep) was not fitted on (``shipped_fit_ids``)."""
    rows = [r for r in load_playbook_sweep().rows if r.status == "ok" and r.model.name == "usp-8b"]
    fit, held = split_rows(rows, ISSUE8_FRACTION, seed)
    pair, shipped = ("nanotron", PLAYBOOK_HARDWARE), row_context(rows[0]).parameters
    calibrated, *_ = cross_validated_fit(fit, row_context, FIT_PLAN[pair], shipped, seed, jobs=jobs,
                                         loss=FIT_LOSS.get(pair, "soft_l1"))
    profiles = {"uncalibrated default": load_profile("nanotron").parameters["default"],
                "shipped": shipped, f"calibrated on {len(fit)} runs": calibrated}
    subsets = {"held-out 80%": held}
    if shipped_fit_ids is not None:
        subsets["held-out 80%, not in the shipped fit"] = [r for r in held if r.row_id not in shipped_fit_ids]
    out = []
    for subset, members in subsets.items():
        tokens = np.array([r.tokens_per_s_per_gpu for r in members])
        memory = np.array([r.peak_memory_bytes for r in members])
        values: dict[tuple[str, str], float] = {}
        for label, eff in profiles.items():
            pred = predict_rows(members, row_context, eff)
            et = abs_pct_errors(pred["tokens_per_s_per_gpu"], tokens)
            em = abs_pct_errors(pred["peak_memory_bytes"], memory)
            for metric, value in (("tokens/s MAPE", statistic(et, "mean")), ("tokens/s median |error|", statistic(et, "median")),
                                  ("memory median |error|", statistic(em, "median"))):
                values[label, metric] = value
                out.append(Figure("sweep-refit", f"{metric}: {label}", subset, len(members), value))
        cal = list(profiles)[-1]
        for metric in ("tokens/s MAPE", "tokens/s median |error|", "memory median |error|"):
            for ref in ("uncalibrated default", "shipped"):
                mine, theirs = values[cal, metric], values[ref, metric]
                out.append(Figure("sweep-refit", f"{metric}: calibrated {mine:.1f} <= {ref} {theirs:.1f}", subset,
                                  len(members), mine - theirs, unit="pt", target="<= 0", met=bool(mine <= theirs)))
    return out


def binomial_range(n: int, p: float, mass: float = 0.9) -> tuple[int, int]:
    """The counts k of n rows inside their band that a band of true coverage ``p`` gives with
    probability ``mass`` (two-sided, equal tails of the Binomial(n, p) distribution): a share
    outside [lo/n, hi/n] says the band is mis-sized; inside it, the rows cannot tell."""
    pmf = [math.comb(n, k) * p**k * (1.0 - p) ** (n - k) for k in range(n + 1)]
    tail = (1.0 - mass) / 2.0
    cdf = np.cumsum(pmf)
    lo = int(np.searchsorted(cdf, tail, side="right"))
    hi = int(np.searchsorted(cdf, 1.0 - tail, side="left"))
    return lo, min(hi, n)


def window_probability(n: int, p: float, low_pct: float, high_pct: float) -> float:
    """The probability that n independent rows, each inside its band with probability ``p``, put
    a share k/n of low_pct-high_pct % inside (both ends included): the chance a well-sized band
    meets a coverage target on a source of n rows. Rows of one source share its software and
    cluster, so their errors are not independent and the real chance is lower still."""
    return float(sum(math.comb(n, k) * p**k * (1.0 - p) ** (n - k) for k in range(n + 1)
                     if low_pct <= 100.0 * k / n <= high_pct))


def interval_figures(sources: Mapping[str, Source], fit_ids: set[str],
                     eff: Mapping[Pair, CalibratedParameters] | None = None) -> list[Figure]:
    """Per source: the share of held-out rows whose measured tokens/s (and peak memory, where
    measured) lies inside the prediction's error band (:mod:`autoplan.calibration.uncertainty`);
    the bands aim at 85%, the target is 70-95%."""
    out = []
    for name in TIME_SOURCES + ("playbook_sweep",):
        rows = [r for r in sources[name].rows if (r.has_time or r.has_memory) and r.row_id not in fit_ids]
        if not rows:
            continue
        pred = predictions(rows, eff)
        bands = [error_band(r.trainer, r.hardware, r.model.is_moe, gpus=r.layout["gpus"]) for r in rows]
        for figure, column, low, high in (
                ("tokens/s", "tokens_per_s_per_gpu", "tokens_low_factor", "tokens_high_factor"),
                ("peak memory", "peak_memory_bytes", "memory_low_factor", "memory_high_factor")):
            measured = np.array([getattr(r, column) for r in rows])
            ok = np.isfinite(measured)
            if not ok.any():
                continue
            lo = pred[column] * np.array([getattr(b, low) for b in bands])
            hi = pred[column] * np.array([getattr(b, high) for b in bands])
            inside = int(np.sum((measured[ok] >= lo[ok]) & (measured[ok] <= hi[ok])))
            share = 100.0 * inside / int(ok.sum())
            groups = ", ".join(sorted({b.group + ("" if b.measured else " (unmeasured)") for b in bands}))
            k_lo, k_hi = binomial_range(int(ok.sum()), COVERAGE)
            chance = "within" if k_lo <= inside <= k_hi else "OUTSIDE"
            out.append(Figure("intervals", f"{name} {figure}: held-out rows inside their band ({groups}); "
                              f"{inside}/{int(ok.sum())}, {chance} the 90% range {k_lo}-{k_hi} of an "
                              f"{COVERAGE:.0%} band",
                              "held-out", int(ok.sum()), share, target="70-95", met=70.0 <= share <= 95.0))
    return out


def golden_figures() -> list[Figure]:
    expected = (120.0, 31.4, 16.6, 1.9)
    return [Figure("golden", f"ZeRO Fig. 1 stage {stage}: model-state GB per GPU (paper {e:g})", "7.5B, Nd=64",
                   1, g, unit="GB", target=f"within 5% of {e:g}", met=abs(g - e) <= 0.05 * e)
            for stage, (e, g) in enumerate(zip(expected, zero_figure1_gb()))]


def loso_section(sources: Mapping[str, Source], seed: int = 0, refit: bool = False,
                 progress: Progress | None = None) -> list[Figure]:
    """Per source and pooled: tokens/s MAPE and median signed error, memory median |error| and
    the band coverage a new source sees (bands built from the other sources' LOSO errors,
    ``band_fit.nested_band_coverage``), every source predicted by the fold fitted without it:
    the stored fits (``loso.stored_folds``, written with the bands) unless ``refit``."""
    from autoplan.calibration.band_fit import fingerprint, fold_ratios, nested_band_coverage
    from autoplan.calibration.loso import all_fold_fits, pooled_mape, source_figures, stored_folds

    folds = None if refit else stored_folds(fingerprint(sources))
    if folds is None and not refit:
        return [Figure("loso", "stored fold fits are stale (profiles, rows or settings changed since "
                       "`python benchmarks/accuracy.py --write-bands`): `autoplan validate --full` refits them",
                       "all", 0, math.nan, target="current", met=False)]
    if folds is None:
        note = None if progress is None else (lambda name: progress(f"fitting the fold without {name}"))
        folds = all_fold_fits(sources, seed, progress=note)
    figures = [source_figures(name, source, folds[name]) for name, source in sources.items()]
    ratios = fold_ratios(sources, seed, folds=folds)
    nested = nested_band_coverage({name: (rows, r["tokens_per_s"]) for name, (rows, r) in ratios.items()})
    out = []
    for f in figures:
        if not f.time_rows and not f.memory_rows:
            continue
        judged = f.time_rows >= 8 and f.source in TIME_SOURCES
        out += [Figure("loso", f"{f.source} tokens/s MAPE", "LOSO", f.time_rows, f.tokens_mape,
                       target="<= 20" if judged else "", met=f.tokens_mape <= 20.0 if judged else None),
                Figure("loso", f"{f.source} tokens/s median signed error", "LOSO", f.time_rows,
                       f.tokens_median_signed, unit="pt"),
                Figure("loso", f"{f.source} peak memory median |error|", "LOSO", f.memory_rows, f.memory_median_abs)]
        if f.source in nested and not math.isnan(nested[f.source]):
            coverage = nested[f.source]
            chance = window_probability(f.time_rows, COVERAGE, 75.0, 90.0)  # (a coverage implies time rows)
            out.append(Figure("loso", f"{f.source} in the band a new source sees (an {COVERAGE:.0%} band on "
                              f"{f.time_rows} independent rows meets 75-90 with probability {chance:.0%})", "LOSO",
                              f.time_rows, coverage, target="75-90", met=75.0 <= coverage <= 90.0))
    pooled = pooled_mape(figures)
    timed = [f for f in figures if f.time_rows and f.source in TIME_SOURCES and f.source in nested]
    rows = sum(f.time_rows for f in timed)
    covered = sum(nested[f.source] * f.time_rows for f in timed) / rows if rows else math.nan
    out += [Figure("loso", "pooled tokens/s MAPE (time sources)", "LOSO",
                   sum(f.time_rows for f in figures if f.source in TIME_SOURCES), pooled,
                   target="<= 10", met=pooled <= 10.0),
            Figure("loso", "pooled share in the band a new source sees", "LOSO", rows, covered,
                   target="75-90", met=75.0 <= covered <= 90.0)]
    return out




def accuracy_report(sections: Sequence[str] = SECTIONS, *, seed: int = 0, split_seed: int = 0,
                    fraction: float = FIT_FRACTION, eff: Mapping[Pair, CalibratedParameters] | None = None,
                    progress: Progress | None = None, jobs: int = 1, refit_folds: bool = False) -> list[Figure]:
    """The figures of ``sections``: with the shipped profiles, or ``eff`` where given (e.g.
    profiles refitted by ``benchmarks/accuracy.py --fit``). ``split_seed`` and ``fraction`` give
    the fit / held-out split (the shipped profiles were fitted on seed 0, 30%); ``seed`` is the
    sweep refit check's. ``memory-unit`` and ``sweep-refit`` fit parameters (~95% of the run time);
    ``loso`` predicts with the stored fold fits, or refits them (minutes) where ``refit_folds``."""
    unknown = [s for s in sections if s not in SECTIONS]
    if unknown:
        raise AutoplanError(f"unknown section(s) {unknown}; known: {', '.join(SECTIONS)}")
    note = progress or (lambda message: None)
    note("loading the reference data")
    sources = load_sources()
    fit_ids = fit_split(sources, fraction, split_seed)
    steps: dict[str, tuple[str, Callable[[], list[Figure]]]] = {
        "rows": ("", lambda: rows_figures(sources, fit_ids)),
        "loso": ("predicting every source with the profiles fitted without it (leave one source out)",
                 lambda: loso_section(sources, seed, refit_folds, note)),
        "memory": ("predicting peak memory", lambda: memory_figures(sources, fit_ids, eff)),
        "memory-unit": ("refitting the memory parameters with the playbook memory read as GB and as GiB",
                        lambda: unit_figures(fit_ids, eff)),
        "time": ("predicting tokens/s", lambda: time_figures(sources, fit_ids, eff)),
        "intervals": ("checking the error bands on held-out rows", lambda: interval_figures(sources, fit_ids, eff)),
        "ranking": ("ranking the playbook sweep", lambda: ranking_figures(sources, eff)),
        "sweep-refit": ("refit on 20% of the 8B sweep's ok runs, judged on the other 80%", lambda: sweep_refit_figures(seed, fit_ids, jobs)),
        "golden": ("", golden_figures),
    }
    figures = []
    for name in SECTIONS:
        if name in sections:
            message, compute = steps[name]
            if message:
                note(message)
            figures += compute()
    return figures
