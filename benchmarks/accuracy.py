"""Accuracy of autoplan against the published measurements (issues 3, 4 and 8).

    python benchmarks/accuracy.py            # the shipped (calibrated) profiles
    python benchmarks/accuracy.py --fit      # refit on the seeded split, print YAML, report
    python benchmarks/accuracy.py --fit --cv # plus k-fold cross-validation per profile
    python benchmarks/accuracy.py --rows     # list the row ids fitted on / held out
    python benchmarks/accuracy.py --write-bands  # regenerate autoplan/calibration/error_bands.yaml (minutes)

Every figure is given for the rows the profiles were fitted on ("fit") and for the rest
("held-out"); targets are judged on held-out rows. A benchmark, not a timed test.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from collections import Counter

from autoplan.calibration.accuracy import (
    FIT_FRACTION,
    FIT_LOSS,
    FIT_PLAN,
    NOT_FITTED,
    TIME_SOURCES,
    calibrate_all,
    fit_split,
    predictions,
    shipped_flags,
)
from autoplan.calibration.accuracy_report import SECTIONS, accuracy_report
from autoplan.calibration.fit import CalibrationError, cross_validate
from autoplan.calibration.rows import row_context
from autoplan.calibration.sources import load_sources
from autoplan.profiles import PARAMETERS


def mark(ok: bool) -> str:
    return "ok  " if ok else "MISS"


def print_rows_used(sources, fit_ids, list_ids: bool) -> None:
    print("\n== Rows: fitted on (seeded split) / held out / left out ==")
    print(f"{'source':<20}{'rows':>6}{'fit':>6}{'held':>6}{'left out':>10}  notes")
    for name, src in sources.items():
        measured = [r for r in src.rows if r.has_time or r.has_memory]
        n_fit = sum(r.row_id in fit_ids for r in measured)
        print(f"{name:<20}{len(src.rows):>6}{n_fit:>6}{len(measured) - n_fit:>6}{len(src.excluded):>10}  {src.notes}")
        for reason, count in Counter(reason.split(" (")[0].split(" = ")[0] for _, reason in src.excluded).items():
            print(f"{'':<20}  left out x{count}: {reason}")
        if list_ids:
            print(f"    fit:  {' '.join(r.row_id for r in measured if r.row_id in fit_ids)}")
            print(f"    held: {' '.join(r.row_id for r in measured if r.row_id not in fit_ids)}")


def print_figures(figures) -> None:
    """The figures of autoplan.calibration.accuracy_report (the same as `autoplan validate`) as text."""
    for section in dict.fromkeys(f.section for f in figures):
        if section == "rows":
            continue  # print_rows_used says more (the reasons rows were left out)
        print(f"\n== {section} ==")
        for f in figures:
            if f.section == section:
                verdict = f"   target {f.target} {mark(f.met)}" if f.met is not None else ""
                print(f"  {f.figure:<70} {f.subset:<14}{f.n:>6}{value_text(f):>12}{verdict}")


def value_text(f) -> str:
    if math.isnan(f.value):
        return "-"
    if f.unit in ("rows", "runs"):
        return f"{f.value:.0f}"
    if f.unit == "pt":
        return f"{f.value:+.1f} pt"
    return f"{f.value:.2f}" if f.unit in ("", "GB") else f"{f.value:.1f}%"


def signed_errors(sources, eff, fit_ids) -> None:
    """Per-row signed error of predicted vs measured tokens/s (a detail only this script prints)."""
    print("\n== Tokens/s per GPU, signed error per row (* = fitted on) ==")
    for name in TIME_SOURCES:
        rows = [r for r in sources[name].rows if r.has_time]
        p = predictions(rows, eff)["tokens_per_s_per_gpu"]
        print(f"  {name}: " + "  ".join(f"{r.row_id.split(':', 1)[1]}{'*' if r.row_id in fit_ids else ''} "
                                        f"{100 * (pi / r.tokens_per_s_per_gpu - 1):+.0f}%" for r, pi in zip(rows, p)))


def fitted_on(report, sources, args) -> str:
    """The ``fitted_on:`` text of a profile: the split rule and the rows it picked."""
    by_source: dict[str, list[str]] = {}
    for row_id in report.row_ids:
        source, rest = row_id.split(":", 1)
        by_source.setdefault(source, []).append(rest)
    parts = []
    for source, ids in by_source.items():
        total = sum(1 for r in sources[source].rows if r.has_time or r.has_memory)
        listed = ",".join(ids) if len(ids) <= 12 else "listed by benchmarks/accuracy.py --rows"
        parts.append(f"{sources[source].file} {len(ids)} of {total} rows ({listed})")
    return (f"benchmarks/accuracy.py --fit, seed {args.seed}, {args.fraction:.0%} of each source, "
            f"{FIT_LOSS.get((report.trainer, report.hardware), 'soft_l1')} loss: " + "; ".join(parts))


def print_fits(fits, sources, args) -> None:
    print("\n== Fitted parameters (paste under `calibrated:` of each profile; FLAG: on a bound or "
          "outside the plausible range) ==")
    for (trainer, hardware), (_, report) in fits.items():
        print(f"# autoplan/profiles/{trainer}.yaml  ({report.num_time_rows} tokens/s rows, "
              f"{report.num_memory_rows} memory rows, {report.evaluations} evaluations; "
              f"loss {report.loss_before:.4f} -> {report.loss_after:.4f}; "
              f"fit-row errors {fmt(report.errors_before)} -> {fmt(report.errors_after)})")
        print(f"  {hardware}:")
        print(f'    fitted_on: "{fitted_on(report, sources, args)}"')
        flags = {f.name: f.reason for f in report.flags}
        for kind in ("physical_efficiency", "corrections"):
            names = [n for n in report.params if PARAMETERS[n].kind == kind]
            if names:
                print(f"    {kind}:")
            for name in names:
                flag = f"  # FLAG: {flags[name]}" if name in flags else ""
                print(f"      {name}: {yaml_number(name, report.params[name])}{flag}")


def yaml_number(name: str, value: float) -> str:
    """``value`` to 4 significant digits, as a YAML float (kept inside its bounds)."""
    low, high = PARAMETERS[name].bounds
    text = f"{value:.4g}" if low <= float(f"{value:.4g}") <= high else repr(value)
    return text if ('.' in text or 'e' not in text) else text.replace('e', '.0e')


def print_flags(flags) -> None:
    """Fitted values on a bound or outside their plausible range, per (trainer, GPU)."""
    print("\n== Flagged fitted values (on a bound or outside the plausible range; "
          "autoplan/profiles/efficiency.py states each range) ==")
    for (trainer, hardware), found in flags.items():
        print(f"  {trainer}/{hardware}: {len(found)} flagged" + ("" if found else " (none)"))
        for flag in found:
            print(f"    {PARAMETERS[flag.name].kind:<20} {flag.text()}")


def fmt(errors: dict) -> str:
    return "/".join(f"{v:.1f}%" for v in errors.values() if not math.isnan(v))


def cv_report(sources, fit_ids, seed: int, k: int = 5) -> None:
    print(f"\n== {k}-fold cross-validation on each profile's fit rows ==")
    for pair, params in FIT_PLAN.items():
        rows = [r for name, s in sources.items() if name not in NOT_FITTED for r in s.rows
                if r.row_id in fit_ids and (r.trainer, r.hardware) == pair]
        try:
            cv = cross_validate(rows, row_context, params, seed, k, loss=FIT_LOSS.get(pair, "soft_l1"))
        except CalibrationError as exc:
            print(f"  {pair[0]}/{pair[1]}: skipped ({exc})")
            continue
        e = {k: "-" if math.isnan(v) else f"{v:.1f}%" for k, v in cv.errors().items()}
        print(f"  {pair[0]}/{pair[1]}: held-out tokens/s MAPE {e['tokens_mape_pct']}, "
              f"memory median {e['memory_median_ape_pct']} ({len(rows)} rows)")


def write_error_bands(seed: int) -> int:
    """Regenerate the error-band file (autoplan.calibration.band_fit) and print its groups."""
    from autoplan.calibration.band_fit import bands_document, write_bands
    from autoplan.calibration.loso import FOLDS_FILE, all_fold_fits, folds_document, write_folds
    from autoplan.calibration.uncertainty import BANDS_FILE

    start = time.time()
    sources = load_sources()
    folds = all_fold_fits(sources, seed, progress=lambda name: print(f"  fitting the fold without {name}", flush=True))
    document = bands_document(sources, seed, folds)
    write_bands(document)
    write_folds(folds_document(folds, document["fingerprint"], seed))
    print(f"wrote {BANDS_FILE} and {FOLDS_FILE} ({time.time() - start:.0f} s); measured groups:")
    for name, g in document["groups"].items():
        if g["measured"] or g["memory_measured"]:
            print(f"  {name:<28} tokens/s {g['tokens_per_s']} ({g['num_heldout_rows']} rows)  "
                  f"memory {g['peak_memory']} ({g['num_heldout_memory_rows']} rows)")
    return 0


def print_loso(seed: int) -> int:
    """The leave-one-source-out table (autoplan/calibration/loso.py) beside the shipped profiles'
    in-source figures of the same rows."""
    from autoplan.calibration.band_fit import fold_ratios, nested_band_coverage
    from autoplan.calibration.loso import fold_fits, pooled_mape, source_figures

    start = time.time()
    sources = load_sources()
    print("leave-one-source-out: each source predicted by the FIT_PLAN pairs refitted on every other source "
          "(shipped: the profiles fitted on 30% of every source, this one included)")
    print("  in band: the shipped bands (error_bands.yaml); shipped: the shipped profiles' in-source figures")
    print(f"  {'source':<20}{'rows':>6}  {'tokens/s MAPE':>14}{'median':>8}  {'memory |err|':>13}  "
          f"{'in band':>8}  {'pairs':>5}   shipped: {'MAPE':>6}{'median':>8}{'in band':>9}")
    loso, shipped, cache = [], [], {}
    for name, source in sources.items():
        t0 = time.time()
        fold = source_figures(name, source, fold_fits(sources, name, seed, cache))
        base = source_figures(name, source, None)
        loso.append(fold)
        shipped.append(base)
        print(f"  {name:<20}{fold.time_rows:>6}  {fold.tokens_mape:>13.1f}%{fold.tokens_median_signed:>+7.1f}%  "
              f"{fold.memory_median_abs:>12.1f}%  {fold.band_coverage:>7.0f}%  {fold.pairs_fitted:>5}   "
              f"{'':>9}{base.tokens_mape:>5.1f}%{base.tokens_median_signed:>+7.1f}%{base.band_coverage:>8.0f}%"
              f"   ({time.time() - t0:.0f} s)", flush=True)
    print("  (the playbook sweep's tokens/s include runs stalled at scale: judged by ranking, not pooled)")
    print(f"  pooled tokens/s MAPE over the time sources' rows: LOSO {pooled_mape(loso):.1f}%, "
          f"shipped {pooled_mape(shipped):.1f}% (target: LOSO <= 10%, no source of >= 8 rows above 20%)")
    tokens = {name: (rows, r["tokens_per_s"]) for name, (rows, r) in fold_ratios(sources, seed, cache).items()}
    nested = nested_band_coverage(tokens)
    print("  band coverage a new source sees (bands built from the other sources' LOSO errors, "
          "target 75-90%): " + ", ".join(f"{name} {value:.0f}%" for name, value in nested.items()))
    timed = [f for f in loso if f.time_rows and f.source in nested and f.source in TIME_SOURCES]
    print(f"  rows in such bands, pooled over the time sources: "
          f"{sum(nested[f.source] * f.time_rows for f in timed) / sum(f.time_rows for f in timed):.0f}%")
    print(f"  took {time.time() - start:.0f} s")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--fit", action="store_true", help="refit the profiles on the split and report with them")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--fraction", type=float, default=FIT_FRACTION, help="share of each source to fit on")
    parser.add_argument("--cv", action="store_true", help="k-fold cross-validation of each profile's fit")
    parser.add_argument("--rows", action="store_true", help="list the row ids fitted on and held out")
    parser.add_argument("--write-bands", action="store_true",
                        help="regenerate the error bands (autoplan/calibration/error_bands.yaml) and stop")
    parser.add_argument("--loso", action="store_true",
                        help="leave-one-source-out: every source predicted by profiles fitted on the others "
                             "(refits each pair once per source: tens of minutes), beside the shipped in-source "
                             "figures, and stop")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                        help="worker processes for --write-bands and the calibrate check's folds "
                             "(default: every core; the same figures as 1)")
    args = parser.parse_args(argv)
    if args.write_bands:
        return write_error_bands(args.seed)
    if args.loso:
        return print_loso(args.seed)
    start = time.time()
    sources = load_sources()
    fit_ids = fit_split(sources, args.fraction, args.seed)
    print(f"autoplan accuracy: split seed {args.seed}, fit fraction {args.fraction}; profiles: "
          f"{'refitted now (--fit)' if args.fit else 'shipped YAML'}")
    print_rows_used(sources, fit_ids, args.rows)
    eff = None
    flags = shipped_flags()
    if args.fit:
        fits = calibrate_all(sources, fit_ids, args.seed)
        print_fits(fits, sources, args)
        eff = {pair: fitted for pair, (fitted, _) in fits.items()}
        flags = {pair: report.flags for pair, (_, report) in fits.items()}
    print_flags(flags)
    print_figures(accuracy_report(SECTIONS, seed=args.seed, split_seed=args.seed, fraction=args.fraction,
                                  eff=eff, jobs=args.jobs))
    signed_errors(sources, eff, fit_ids)
    if args.cv:
        cv_report(sources, fit_ids, args.seed)
    print(f"\n({time.time() - start:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
