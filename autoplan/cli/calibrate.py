"""`autoplan calibrate` (measured runs -> a calibrated profile; training logs -> measured rows)
and `autoplan validate` (accuracy of the shipped profiles against published measurements)."""

from __future__ import annotations

import json
import math
import os
import time

import click

from autoplan.calibration.log_import import LOG_FORMATS
from autoplan.cli.layout_options import LAYOUT_KEYS, layout_options
from autoplan.cli.options import SEED, LayoutText, output_format_option, training_options
from autoplan.cli.render import emit_records
from autoplan.calibration import REFIT_SECTIONS, SECTIONS
from autoplan.errors import AutoplanError, escape

LOSSES = ("soft_l1", "cauchy", "trimmed")


class ParamList(click.ParamType):
    """'gemm_efficiency_max,dp_overlap' -> a tuple of names (checked by the library)."""

    name = "NAME[,NAME...]"

    def convert(self, value, param, ctx):
        if isinstance(value, tuple):
            return value
        names = tuple(p.strip() for p in str(value).split(",") if p.strip())
        if not names:
            self.fail("expected at least one parameter name", param, ctx)
        return names


def _layout_defaults(ctx: click.Context, kw: dict, model_seq_len: int | None) -> dict:
    """Layout fields from --layout, overridden by layout options given on the command line;
    option defaults (tp 1, zero 1, ...) fill what neither gives."""
    from click.core import ParameterSource

    values = dict(kw["layout_text"] or {})
    for key in LAYOUT_KEYS + ("gpus", "seq_len", "gbs_seqs"):
        given = ctx.get_parameter_source(key) == ParameterSource.COMMANDLINE
        if kw.get(key) is not None and (given or key not in values):
            values[key] = kw[key]
    if kw["gbs_tokens"] is not None:
        seq = int(values.get("seq_len") or model_seq_len or 0)
        if not seq:
            raise AutoplanError("--gbs-tokens needs the sequence length: give --seq-len or --model")
        from autoplan.specs.training import resolve_batch

        values["gbs_seqs"] = resolve_batch(seq, None, kw["gbs_tokens"], seq)[1]
    return values


def _context(kw: dict):
    from autoplan.calibration.measured import MeasuredContext
    from autoplan.profiles import load_profile
    from autoplan.specs.hardware import load_gpu
    from autoplan.units import parse_bandwidth

    return MeasuredContext(load_gpu(kw["hardware"]), load_profile(kw["trainer"]),
                           gpus_per_node=kw["gpus_per_node"],
                           nic_bytes_per_s=parse_bandwidth(kw["nic"]) if kw["nic"] else None,
                           flops_convention=kw["flops_convention"])


def _pct(value: float) -> str:
    return "-" if value is None or math.isnan(value) else f"{value:.1f}%"


def _print_calibration(cal, measured, out_path, kw) -> None:
    r = cal.report
    click.echo(f"calibrated {r.trainer} on {r.hardware} from {len(measured.rows)} of {measured.num_lines} rows "
               f"({r.num_time_rows} with tokens/s, {r.num_memory_rows} with memory); seed {r.seed}, "
               f"{kw['loss']} loss, {cal.folds}-fold cross-validation")
    if measured.skipped:
        click.echo(f"  left out: {measured.skipped_summary()}")
    emit_records([{"errors of": "shipped profile (never fitted on these rows)", **cal.errors_base},
                  {"errors of": f"calibrated, held out ({cal.folds}-fold CV)", **cal.errors_held_out},
                  {"errors of": "calibrated, on the rows it was fitted on", **cal.errors_fit_rows}],
                 "table", columns=["errors of", "tokens_mape_pct", "memory_median_ape_pct"],
                 headers={"tokens_mape_pct": "tokens/s MAPE", "memory_median_ape_pct": "memory median |error|"},
                 formatters={"tokens_mape_pct": _pct, "memory_median_ape_pct": _pct})
    if cal.cv_note:
        click.echo(f"  note: {cal.cv_note}", err=True)
    for warning in r.warnings:
        click.echo(f"  warning: {warning}", err=True)
    from autoplan.profiles import PARAMETERS
    from autoplan.profiles.efficiency import shown

    flags = {f.name: f.reason for f in cal.flags}
    emit_records([{"parameter": p, "kind": PARAMETERS[p].kind, "before": shown(p, cal.base.value(p)),
                   "after": shown(p, v),
                   "plausible": "[{}, {}]".format(*(shown(p, x) for x in PARAMETERS[p].plausible)),
                   "flag": flags.get(p, "")} for p, v in r.params.items()],
                 "table", columns=["parameter", "kind", "before", "after", "plausible", "flag"])
    if flags:
        click.echo(f"  flagged: {len(flags)} fitted value(s) on a bound or outside the plausible range: "
                   "they stand in for something the model misses; check them before trusting the profile",
                   err=True)
    if cal.cv_note and flags:  # no held-out check of values that already look wrong
        click.echo(f"  warning: UNGUARDED: {', '.join(sorted(flags))} written outside their plausible range from "
                   f"{len(measured.rows)} rows, with no cross-validation to show they predict anything; measure "
                   "more runs, or fit fewer parameters (--params)", err=True)
    click.echo(f"wrote {escape(out_path)}; use it with: --trainer {r.trainer} --hardware {r.hardware} "
               f"--profile {escape(out_path)}")


def _calibrate_csv(ctx: click.Context, kw: dict) -> None:
    from autoplan.calibration.fit import CalibrationError
    from autoplan.calibration.measured import (
        calibrate_measured,
        check_params,
        default_params,
        profile_mapping,
        read_measured,
        write_profile,
    )

    context = _context(kw)
    model_seq = None
    if kw["model_name"]:
        from autoplan.specs.models import load_model

        model_seq = load_model(kw["model_name"]).seq_len
    defaults = _layout_defaults(ctx, kw, model_seq)
    measured = read_measured(kw["measured_csv"], context, model=kw["model_name"], defaults=defaults)
    params = check_params(list(kw["params"])) if kw["params"] else default_params(measured.rows)
    if not measured.rows or not params:
        raise AutoplanError(f"{kw['measured_csv']}: too few usable rows: 0 of {measured.num_lines} "
                            f"({measured.skipped_summary()})")
    click.echo(f"[calibrate] fitting {len(params)} parameter(s) on {len(measured.rows)} rows, then "
               f"{min(kw['folds'], len(measured.rows))}-fold cross-validation ...", err=True)
    try:
        cal = calibrate_measured(measured.rows, context, params, seed=kw["seed"], folds=kw["folds"], jobs=kw["jobs"],
                                 loss=kw["loss"], starts=kw["starts"], max_evals=kw["max_evals"],
                                 prior_rows=kw["prior_rows"])
    except CalibrationError as exc:
        left = f" (left out: {measured.skipped_summary()})" if measured.skipped else ""
        raise CalibrationError(f"{kw['measured_csv']}: {exc}; {len(measured.rows)} of {measured.num_lines} "
                               f"CSV rows usable{left}") from None
    out = kw["output_path"] or f"results/calibrated-{context.profile.name}-{context.gpu.name}.yaml"
    mapping = profile_mapping(cal, measured, loss=kw["loss"])
    path = write_profile(out, mapping)
    if kw["output_format"] == "json":
        click.echo(json.dumps({"profile_path": str(path), "skipped": measured.skipped, **mapping}, indent=2))
    else:
        _print_calibration(cal, measured, path, kw)


def _import_log(ctx: click.Context, kw: dict) -> None:
    from autoplan.calibration.log_import import parse_log
    from autoplan.calibration.measured import append_records, measured_record
    from autoplan.errors import LayoutError

    spec = None
    if kw["model_name"]:
        from autoplan.specs.models import load_model

        spec = load_model(kw["model_name"])
    values = _layout_defaults(ctx, kw, spec.seq_len if spec else None)
    if "seq_len" not in values and spec is not None:
        values["seq_len"] = spec.seq_len
    try:
        layout = _context(kw).record_layout(values)
    except LayoutError as exc:
        raise LayoutError(f"layout of {kw['from_log']}: {exc} (give it with --layout 'gpus=64,tp=2,...' "
                          "or --gpus, --tp, ...)") from None
    summary = parse_log(kw["from_log"], kw["log_format"], gpus=layout["gpus"], seq_len=layout["seq_len"],
                        gbs_seqs=layout["gbs_seqs"], skip_steps=kw["skip_steps"])
    record = measured_record(layout, summary.tokens_per_s_per_gpu, summary.peak_memory_bytes,
                             model=spec.name if spec else None,
                             source=f"{kw['log_format']} log {kw['from_log']}")
    memory = "no memory report" if math.isnan(summary.peak_memory_bytes) else f"peak {summary.peak_memory_gib:.2f} GiB"
    click.echo(f"{escape(kw['from_log'])}: {len(summary.used)} step line(s) used, warm-up steps skipped: "
               f"{', '.join(map(str, summary.skipped_steps)) or 'none'}; median "
               f"{summary.tokens_per_s_per_gpu:,.0f} tokens/s/GPU, {memory}", err=True)
    for note in summary.notes:
        click.echo(f"  note: {note}", err=True)
    if kw["append_to"]:
        total = append_records(kw["append_to"], [record])
        click.echo(f"appended 1 row to {escape(kw['append_to'])} ({total} rows)", err=True)
    else:
        emit_records([record], "csv", columns=list(record))


def _plan_logs(kw: dict) -> bool:
    """Whether --from-log names the runs of plans (a refit) rather than one log to a CSV row."""
    from pathlib import Path

    logs = kw["from_log"]
    return bool(kw["plans_path"]) or len(logs) > 1 or Path(logs[0]).is_dir() or Path(logs[0]).name == "manifest.json"


def fit_options(kw: dict) -> dict:
    """The fit settings of `calibrate` (shared by `rerank`)."""
    return {"seed": kw["seed"], "folds": kw["folds"], "jobs": kw["jobs"], "loss": kw["loss"], "starts": kw["starts"],
            "max_evals": kw["max_evals"], "prior_rows": kw["prior_rows"]}


def calibrate_logs(ctx: click.Context, kw: dict):
    """The trial runs of --from-log measured and refitted (a LogCalibration); one line per log."""
    from click.core import ParameterSource

    from autoplan.calibration.measured import check_params
    from autoplan.calibration.trial_runs import calibrate_from_logs

    if kw["append_to"]:
        raise click.UsageError("--append-to takes one log and its --layout, not the runs of plans")
    trainer = kw["trainer"] if ctx.get_parameter_source("trainer") == ParameterSource.COMMANDLINE else None
    click.echo(f"[calibrate] reading {len(kw['from_log'])} log argument(s) ...", err=True)
    result = calibrate_from_logs(list(kw["from_log"]), kw["plans_path"], fmt=kw["log_format"], trainer=trainer,
                                 skip_steps=kw["skip_steps"], params=check_params(list(kw["params"])) if kw["params"]
                                 else None, **fit_options(kw))
    for note in result.notes:
        click.echo(f"note: {note}", err=True)
    for m in result.measured:
        low, high = m.summary.tokens_range
        click.echo(f"  rank {m.run.rank}: {escape(str(m.run.log_path))}: {len(m.summary.used)} steps, median "
                   f"{m.summary.tokens_per_s_per_gpu:,.0f} tokens/s/GPU ({low:,.0f}-{high:,.0f})"
                   + "".join(f"; {note}" for note in m.summary.notes), err=True)
    return result


def _calibrate_logs(ctx: click.Context, kw: dict) -> None:
    from autoplan.calibration.measured import Measured, write_profile
    from autoplan.calibration.trial_runs import log_profile_mapping

    result = calibrate_logs(ctx, kw)
    context = result.context
    out = kw["output_path"] or f"results/calibrated-{context.profile.name}-{context.gpu.name}.yaml"
    mapping = log_profile_mapping(result, kw["loss"])
    path = write_profile(out, mapping)
    rows = [m.row for m in result.measured]
    if kw["output_format"] == "json":
        click.echo(json.dumps({"profile_path": str(path), **mapping}, indent=2))
    else:
        _print_calibration(result.calibration, Measured(result.plans_path, rows, [], len(rows)), path, kw)


@click.command("calibrate")
@click.argument("measured_csv", required=False, type=click.Path(dir_okay=False))
@training_options(model_required=False, gpus_required=False, settings=False)
@click.option("--trainer", default="megatron", show_default=True, help="Trainer profile.")
@click.option("-o", "--output", "output_path", type=click.Path(dir_okay=False), default=None,
              help="Profile YAML to write [default: results/calibrated-<trainer>-<hardware>.yaml].")
@click.option("--params", type=ParamList(), default=None,
              help="Parameters to fit, physical efficiencies or corrections [default: the time "
                   "parameters gemm_efficiency_max, "
                   "gemm_half_flops, scale_out_efficiency, dp_overlap if any row has tokens/s; "
                   "memory_reserve_bytes, allocator_overhead if any row has memory].")
@click.option("--seed", type=SEED, default=0, show_default=True, help="Seed of the random starts and the folds.")
@click.option("--folds", type=click.IntRange(2, 100), default=5, show_default=True,
              help="Cross-validation folds (held-out error).")
@click.option("--jobs", type=click.IntRange(min=1), default=1, show_default=True,
              help="Processes that fit the cross-validation folds (the same result for any count).")
@click.option("--loss", type=click.Choice(LOSSES), default="soft_l1", show_default=True,
              help="Robust loss on log error; cauchy for data with gross outliers; trimmed fits the "
                   "best-explained half of the rows (least trimmed squares).")
@click.option("--starts", type=click.IntRange(1, 20), default=3, show_default=True,
              help="Nelder-Mead starts (the current values plus seeded random points).")
@click.option("--prior-rows", type=click.FloatRange(min=0.0), default=2.0, show_default=True,
              help="Shrinkage toward the starting values, weighted as this many rows (0 = none).")
@click.option("--max-evals", type=click.IntRange(20, 100000), default=300, show_default=True,
              help="Simplex evaluations per start (each costs one prediction of every row).")
@click.option("--from-log", "from_log", multiple=True, type=click.Path(),
              help="Read training logs instead (repeatable). One log with --layout: print (or --append-to) "
                   "its MEASURED.csv row. Logs of plans (with --plans; each path naming its plan's rank, "
                   "rank-<N>/train.log) or a trial folder (its manifest.json): refit and write a profile.")
@click.option("--plans", "plans_path", type=click.Path(dir_okay=False), default=None,
              help="plans.json the --from-log runs are plans of (default: the one the trial manifest names).")
@click.option("--log-format", type=click.Choice(LOG_FORMATS), default=None, help="Trainer that wrote --from-log.")
@click.option("--skip-steps", type=click.IntRange(0, 10**6), default=2, show_default=True,
              help="Warm-up: logged steps dropped before the median (the first N step numbers).")
@click.option("--append-to", type=click.Path(dir_okay=False), default=None,
              help="Append the row read from --from-log to this MEASURED.csv (created if missing).")
@click.option("--layout", "layout_text", type=LayoutText(), default=None,
              help="Layout of --from-log (or defaults for missing CSV columns): 'gpus=64,tp=8,pp=2,gbs_seqs=512'.")
@layout_options
@click.option("--format", "output_format", type=click.Choice(["table", "json"]), default="table",
              show_default=True, help="Output format of the calibration summary.")
@click.pass_context
def calibrate_command(ctx: click.Context, **kw) -> None:
    """Fit efficiencies and corrections to measured runs and write a calibrated profile.

    \b
    autoplan calibrate MEASURED.csv --model 8b --hardware h100-sxm --trainer nanotron
    autoplan calibrate --from-log train.log --log-format megatron --model 8b \\
        --layout "gpus=64,tp=2,pp=2,mbs=1,gbs_seqs=512" --append-to MEASURED.csv
    autoplan calibrate --from-log trial/ -o fitted.yaml      (the folder `autoplan trial` wrote)
    autoplan calibrate --from-log rank-1/train.log --from-log rank-3/train.log --plans plans.json

    MEASURED.csv has the layout columns of `autoplan compare` plus tokens_per_s_per_gpu and/or
    peak_memory_gib (either may be empty). The errors printed for the calibrated profile are
    held-out errors from k-fold cross-validation.
    """
    if kw["output_path"]:
        from autoplan.calibration.measured import check_profile_path

        check_profile_path(kw["output_path"])  # before the fit
    if kw["from_log"]:
        if kw["measured_csv"]:
            raise click.UsageError("give either MEASURED.csv or --from-log, not both")
        if _plan_logs(kw):
            _calibrate_logs(ctx, kw)
            return
        kw["from_log"] = kw["from_log"][0]
        if not kw["log_format"]:
            raise click.UsageError(f"--from-log needs --log-format {'|'.join(LOG_FORMATS)}")
        _import_log(ctx, kw)
        return
    if kw["append_to"] or kw["log_format"] or kw["plans_path"]:
        raise click.UsageError("--append-to, --log-format and --plans go with --from-log")
    if not kw["measured_csv"]:
        raise click.UsageError("give MEASURED.csv (or --from-log FILE --log-format ...)")
    _calibrate_csv(ctx, kw)


@click.command("validate")
@output_format_option()
@click.option("--full", is_flag=True,
              help="Also the two sections that refit parameters (memory-unit, sweep-refit) and the "
                   "leave-one-source-out folds refitted instead of read from their stored fits "
                   "(about 20 minutes on 2 cores; the default takes well under 3).")
@click.option("--quick", is_flag=True, hidden=True)  # the default since --full; kept for old scripts
@click.option("--section", "sections", multiple=True, type=click.Choice(SECTIONS),
              help="Only these sections (repeatable), e.g. --section loso.")
@click.option("--seed", type=SEED, default=0, show_default=True,
              help="Seed of the sweep refit check (its 20% split and random starts).")
@click.option("--jobs", type=click.IntRange(min=1), default=None,
              help="Processes for the sweep refit check's cross-validation folds (default: every core; "
                   "the same figures as 1).")
def validate_command(output_format, full, quick, sections, seed, jobs) -> None:
    """Accuracy of the shipped profiles against the published measurements in validation/.

    The figures of benchmarks/accuracy.py: each source predicted by the profiles fitted on all
    the others (leave one source out: the headline), memory and tokens/s errors on the rows the
    shipped profiles were fitted on and on the held-out rest, ranking of the playbook sweep and
    a golden ZeRO case; with --full also the refit checks.
    """
    from autoplan.calibration.accuracy_report import accuracy_report

    if full and quick:
        raise click.UsageError("--full and --quick contradict each other (the default is the quick run)")
    start = time.time()
    chosen = [s for s in (sections or SECTIONS) if full or sections or s not in REFIT_SECTIONS]
    steps = iter(range(1, len(chosen) + 2))  # (+1: loading the reference data)
    total = len(chosen) + 1

    def progress(message: str) -> None:
        step = next(steps, total) if not message.startswith("fitting the fold") else None
        counter = f"{step}/{total} " if step else "    "
        click.echo(f"[validate {time.time() - start:5.0f} s] {counter}{message} ...", err=True)

    figures = accuracy_report(chosen, seed=seed, jobs=jobs or os.cpu_count() or 1, progress=progress,
                              refit_folds=full)
    records = [f.record() for f in figures]
    click.echo(f"[validate] done in {time.time() - start:.0f} s", err=True)
    if output_format != "table":
        emit_records(records, output_format, columns=list(records[0]), json_key="figures")
        return
    for section in dict.fromkeys(r["section"] for r in records):
        rows = [r for r in records if r["section"] == section]
        if section == "rows":  # one line per source: rows, fitted on, held out, left out
            pivot = {}
            for r in rows:
                pivot.setdefault(r["figure"], {"source": r["figure"]})[r["subset"]] = r["n"]
            emit_records(list(pivot.values()), "table", title="rows (the shipped profiles' fit split)",
                         columns=["source", "rows", "fit", "held-out", "left out"])
            continue
        rows = [{**r, "value": _value_text(r["value"], r["unit"]), "met": _MET.get(r["met"], "")} for r in rows]
        emit_records(rows, "table", title=section, columns=["figure", "subset", "n", "value", "target", "met"])
    missed = sum(r["met"] is False for r in records)
    click.echo(f"{sum(r['met'] is True for r in records)} targets met, {missed} missed")


_MET = {True: "ok", False: "MISS"}


def _value_text(value: float, unit: str) -> str:
    if value is None or math.isnan(value):
        return "-"
    if unit in ("rows", "runs"):
        return f"{value:.0f}"
    if unit == "pt":
        return f"{value:+.1f} pt"
    return f"{value:.2f}" if unit in ("", "GB") else f"{value:.1f}%"
