"""`autoplan estimate`, `autoplan explain` (one layout) and `autoplan compare` (a CSV of layouts)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from autoplan.cli.layout_options import LAYOUT_KEYS, layout_options, layout_values
from autoplan.cli.plan_file import given_on_command_line, plan_options, read_plan, resolve_trainer_version
from autoplan.cli.options import (
    LayoutText,
    allow_uneven_option,
    context_from_options,
    profile_band_note,
    output_format_option,
    setup_settings,
    trainer_options,
    training_options,
)
from autoplan.cli.render import emit_records
from autoplan.errors import AutoplanError, LayoutError, NoFeasiblePlanError, escape


def _evaluate_one(kwargs):
    """(context, batch of one, its evaluation) of the layout options, or of the plan of --plan."""
    from autoplan.cost.evaluate import evaluate
    from autoplan.layout import LayoutBatch, resolve_layout

    if kwargs["plan_path"]:
        ctx, layout = _plan_context(kwargs)
    else:
        if not kwargs["model_name"] or kwargs["gpus"] is None:
            missing = " and ".join(flag for flag, name in (("--model (-m)", "model_name"), ("--gpus (-g)", "gpus"))
                                   if kwargs[name] in (None, ""))
            raise AutoplanError(f"give {missing}, or a plans.json with --plan")
        ctx = context_from_options(kwargs)
        layout = resolve_layout(layout_values(kwargs), ctx.training)
    batch = LayoutBatch.from_layouts([layout])
    return ctx, batch, evaluate(ctx, batch, allow_uneven=kwargs["allow_uneven_pp"])


def _plan_context(kwargs):
    """(context, layout) of the plan of --plan and --rank: the trainer it was searched for unless
    --trainer is given, with that search's profile file and trainer version (plan_file)."""
    from autoplan.api import build_context

    click_ctx = click.get_current_context()
    plan = kwargs["plan_path"]
    trainer = kwargs["trainer"] if given_on_command_line(click_ctx, "trainer") else None
    chosen = read_plan(click_ctx, plan, kwargs["plan_rank"], trainer, kwargs, spelled="--plan")
    ctx = build_context(chosen.model, chosen.training, trainer=chosen.trainer,
                        profile_path=kwargs["profile_path"] or chosen.profile_path,
                        trainer_version=resolve_trainer_version(kwargs.get("trainer_version"), chosen.trainer_version, plan))
    return ctx, chosen.layout


@click.command("estimate")
@training_options(model_required=False, gpus_required=False)
@trainer_options
@plan_options
@layout_options
@allow_uneven_option
@output_format_option()
def estimate_command(output_format, **kwargs) -> None:
    """Predict memory, step time, tokens/s and MFU of one layout (exit code 1 when it does not fit)."""
    from autoplan.report.near_ties import context_band
    from autoplan.report.whynot import why_not

    ctx, batch, table = _evaluate_one(kwargs)
    reason = why_not(ctx, batch, table, allow_uneven=kwargs["allow_uneven_pp"])
    if int(table["reason_code"][0]):  # a rule is broken: the layout cannot run at all
        raise LayoutError(f"layout breaks a rule: {reason}")
    record = table.record(0)
    record["infeasible_reason"] = reason
    record.update(model=ctx.model.name, hardware=ctx.cluster.gpu.name, trainer=ctx.profile.name)
    band = context_band(ctx)
    record.update(_band_figures(band, record))
    record["error_band"] = band.group
    record["error_band_measured"] = band.measured
    if output_format != "table":
        emit_records([record], output_format, columns=list(record))
    else:
        _print_estimate(ctx, batch, record)
        _print_band(band, record)
        if kwargs.get("profile_path"):
            click.echo(f"           ({profile_band_note(ctx)})")
        _print_transfer(ctx)
    if not record["fits"]:  # evaluated, does not fit: exit code 1 with the reason, as search
        raise NoFeasiblePlanError(f"the layout does not fit: {reason}")


def _print_estimate(ctx, batch, record) -> None:
    lay = batch.layout(0)
    click.echo(f"{ctx.model.name} on {ctx.training.gpus} × {ctx.cluster.gpu.name} ({ctx.profile.name}): "
               f"{lay.describe()}")
    # Only the host's share failing (offload): the GPU line still says the GPU's peak fits.
    gpu_fits = record["fits"] or (not record["host_memory_fits"]
                                  and record["peak_memory_bytes"] <= ctx.cluster.gpu.usable_memory_bytes)
    status = ("fits" if gpu_fits else "DOES NOT FIT; may run in the allocator's retry regime, see why not"
              if record["fits_with_retries"] else "DOES NOT FIT")
    click.echo(f"  memory   peak {record['peak_memory_gib']:.1f} GiB reserved "
               f"({record['peak_allocated_memory_bytes'] / 2**30:.1f} allocated) of "
               f"{ctx.cluster.gpu.usable_memory_bytes / 2**30:.1f} GiB usable ({status})")
    if lay.offload != "none":
        click.echo(f"  host     {record['host_memory_bytes'] / 2**30:.1f} GiB of offloaded model states of "
                   f"{ctx.cluster.gpu.host_memory_bytes / 2**30:.1f} GiB host memory per GPU "
                   f"({'fits' if record['host_memory_fits'] else 'DOES NOT FIT'})")
    click.echo(f"  time     step {record['step_time_s']:.3f} s, {record['tokens_per_s_per_gpu']:.0f} tokens/s/GPU, "
               f"MFU {record['mfu']:.1%} ({ctx.training.flops_convention} count), HFU {record['hfu']:.1%}, "
               f"bubble {record['bubble_fraction']:.1%}")
    if record["hfu"] < record["mfu"]:  # the convention counts FLOPs the kernels do not run
        click.echo("           (HFU counts the FLOPs the kernels run: causal attention halved; MFU follows "
                   "--flops-convention, docs/conventions.md)")
    _print_pressure(ctx, record)
    if record["infeasible_reason"]:
        click.echo(f"  why not  {record['infeasible_reason']}")


# The one measurement of the allocator's retry regime: nanotron on AWS p5 (profiles/nanotron.yaml).
MEASURED_REGIME = ("nanotron", "h100-sxm-efa")


def _print_pressure(ctx, record) -> None:
    """A line when the peak is near the card: the retry regime's cost where the profile measures it
    (cost.evaluate.memory_pressure_s), else the measured regime as a risk the figures leave out."""
    peak_share = record["peak_memory_bytes"] / ctx.cluster.gpu.usable_memory_bytes
    if record["time_memory_pressure_s"] > 0.0:
        share = record["time_memory_pressure_s"] / record["step_time_s"]
        click.echo(f"  pressure the peak is {peak_share:.0%} of the card: PyTorch's allocator flushes its cache and "
                   f"retries every micro-batch, {share:.0%} of the step (cost.evaluate.memory_pressure_s); a smaller "
                   "micro-batch or more sharding leaves headroom")
        return
    from autoplan.profiles import load_profile

    trainer, gpu = MEASURED_REGIME
    measured = load_profile(trainer).parameters[gpu].corrections
    uncosted = ctx.corrections.memory_pressure_slowdown == 0.0
    if record["fits"] and uncosted and peak_share >= measured.memory_pressure_threshold:
        click.echo(f"  pressure the peak is {peak_share:.0%} of the card: near the ceiling PyTorch's allocator can "
                   f"flush and retry every micro-batch (measured for {trainer} on {gpu}: a step "
                   f"{1 + measured.memory_pressure_slowdown:.1f}x as long from {measured.memory_pressure_threshold:.0%} of "
                   f"the card on); not costed for {ctx.profile.name} on {ctx.cluster.gpu.name} (not measured)")


def _band_figures(band, record) -> dict:
    """The record's figures' low/high ends of the error band (plain floats)."""
    from autoplan.calibration.uncertainty import BAND_FIGURES, intervals

    figures = {k: record[k] for k in BAND_FIGURES if isinstance(record.get(k), float)}
    return {k: float(v) for k, v in intervals(band, figures).items()}


def _print_band(band, record) -> None:
    """The error band of the figures above and where it comes from."""
    from autoplan.calibration.uncertainty import band_text

    if "tokens_per_s_per_gpu_low" not in record:
        return
    source = (f"leave-one-source-out error of {band.num_heldout_rows} measured runs" if band.measured
              else "unmeasured pair: widened from other groups' errors")
    click.echo(f"  band     tokens/s/GPU {record['tokens_per_s_per_gpu_low']:,.0f}-"
               f"{record['tokens_per_s_per_gpu_high']:,.0f} "
               f"({band_text(band.tokens_low_factor, band.tokens_high_factor)}), step "
               f"{record['step_time_s_low']:.3f}-{record['step_time_s_high']:.3f} s, peak "
               f"{record['peak_memory_gib_low']:.1f}-{record['peak_memory_gib_high']:.1f} GiB "
               f"({band_text(band.memory_low_factor, band.memory_high_factor)}); "
               f"{band.group}, {source}")


def _print_transfer(ctx) -> None:
    """Where the trainer was never calibrated on this GPU: that its efficiencies came from another
    (profiles/transfer.py) and its corrections are at their neutral defaults."""
    from autoplan.profiles.transfer import transferred_note

    if note := transferred_note(ctx.parameters):
        click.echo(f"  params   {note}")


@click.command("explain")
@training_options(model_required=False, gpus_required=False)
@trainer_options
@plan_options
@layout_options
@allow_uneven_option
@click.option("--full", is_flag=True, help="Every term with its formula, parameter values and source (a wide "
                                           "table); the default is a compact one of values and shares.")
@click.option("--vs", "vs_layout", type=LayoutText(), default=None, metavar="KEY=VALUE[,...]",
              help="Compare with another layout, e.g. 'tp=8,pp=8': the knobs given, the others as this "
                   "layout's (dp, grad_acc and sp derived again); shows the terms that differ, largest first.")
@output_format_option()
def explain_command(output_format, full, vs_layout, **kwargs) -> None:
    """Every memory and time term of one layout: values and shares (``--full``: with each term's
    formula, parameter values and source), or what differs from another layout (``--vs``)."""
    from autoplan.report.explain import bottleneck, compact_lines, explain_terms, full_lines
    from autoplan.report.whynot import why_not

    ctx, batch, table = _evaluate_one(kwargs)
    title = f"{ctx.model.name}: {batch.layout(0).describe()} on {ctx.training.gpus} x {ctx.cluster.gpu.name} " \
            f"({ctx.profile.name})"
    if vs_layout is not None:
        _explain_vs(ctx, batch, table, vs_layout, kwargs, output_format, title)
        return
    if output_format == "table" and full:
        click.echo(title)
        click.echo("\n".join(full_lines(ctx, table, 0)))
    elif output_format != "table":
        emit_records(explain_terms(ctx, table, 0), output_format,
                     columns=["kind", "stage", "term", "value", "unit", "formula", "parameters", "source"],
                     title=title, formatters={"value": "{:.4g}".format}, json_key="terms")
    else:
        click.echo(title)
        click.echo("\n".join(compact_lines(ctx, table, 0)))
    if output_format == "table":
        click.echo(f"Bottleneck: {bottleneck(table, 0)}")
        reason = why_not(ctx, batch, table, allow_uneven=kwargs["allow_uneven_pp"])
        if reason:
            click.echo(f"Why not: {reason}")
        if not full:
            click.echo("Formulas, parameter values and sources: --full (and docs/cost-model.md)")


VS_ROWS = 25  # the terms `explain --vs` shows on a terminal (csv and json: all of them)


def _explain_vs(ctx, batch, table, vs_layout: dict, kwargs: dict, output_format: str, title: str) -> None:
    """The terms that differ between this layout and ``vs_layout`` (the knobs it gives, the
    others as this layout's), largest first."""
    from autoplan.cost.evaluate import evaluate
    from autoplan.layout import LayoutBatch, resolve_layout
    from autoplan.report.explain import VS_FORMULAS, differences, vs_formula_lines

    unknown = [k for k in vs_layout if k not in LAYOUT_KEYS]
    if unknown:
        raise AutoplanError(f"--vs takes layout knobs ({', '.join(LAYOUT_KEYS)}), got {', '.join(unknown)}")
    mine = {k: v for k, v in batch.layout(0).to_dict().items() if k not in ("dp", "grad_acc", "sp")}
    other = resolve_layout({**mine, **vs_layout}, ctx.training)
    other_batch = LayoutBatch.from_layouts([other])
    other_table = evaluate(ctx, other_batch, allow_uneven=kwargs["allow_uneven_pp"])
    rows = [{"where": where, "term": name, "this": a, "other": b, "difference": b - a}
            for where, name, a, b in differences(table, other_table)]
    if output_format != "table":
        emit_records(rows, output_format, columns=["where", "term", "this", "other", "difference"], json_key="terms")
        return
    click.echo(title)
    click.echo(f"  vs {other.describe()}")
    if not rows:
        click.echo("the two layouts are predicted the same in every term")
        return
    section, shown = None, 0
    for row in rows[:VS_ROWS]:
        if row["where"] != section:
            section, shown = row["where"], 0
            click.echo(f"{section:<44}{'this':>12}{'other':>12}{'other - this':>14}")
        click.echo(f"  {row['term']:<42}{row['this']:>12.4g}{row['other']:>12.4g}{row['difference']:>+14.4g}")
        formulas = vs_formula_lines(ctx, table, other_table, row["where"], row["term"]) if shown < VS_FORMULAS else []
        shown += bool(formulas)
        for line in formulas:
            click.echo(line)
    if len(rows) > VS_ROWS:
        click.echo(f"... {len(rows) - VS_ROWS} more (--format csv for all)")
    fast, slow = float(table["tokens_per_s_per_gpu"][0]), float(other_table["tokens_per_s_per_gpu"][0])
    click.echo(f"tokens/s/GPU: this {fast:,.0f}, other {slow:,.0f} ({slow / fast - 1:+.1%}); peak GiB: this "
               f"{float(table['peak_memory_gib'][0]):.1f}, other {float(other_table['peak_memory_gib'][0]):.1f}")


@click.command("compare")
@click.argument("layouts_csv", type=click.Path(exists=True, dir_okay=False))
@training_options(gpus_required=False)
@trainer_options
@click.option("--precision", type=click.Choice(["bf16", "fp8"]), default=None, help="When not a column.")
@click.option("-o", "--output", "output_path", type=click.Path(dir_okay=False), default=None,
              help="Write the output (csv or json) here instead of standard output.")
@click.option("--format", "output_format", type=click.Choice(["table", "csv", "json"]), default=None,
              help="Output format [default: table on a terminal, else csv (every column)].")
@allow_uneven_option
def compare_command(layouts_csv, precision, output_path, output_format, **kw) -> None:
    """Evaluate every row of a CSV of layouts; rows that break a rule get fits=false and a reason.

    Columns gpus, seq_len and gbs_seqs give each row its own setup; the options fill them where
    a column is missing or blank. The table view shows the main predictions; csv and json hold
    every column.
    """
    from autoplan.report.compare import compare_layouts, read_layouts_csv
    from autoplan.report.destination import check_out_file
    from autoplan.specs.training import resolve_batch

    by_suffix = {".csv": "csv", ".json": "json"}.get(Path(output_path).suffix.lower()) if output_path else None
    if output_format and by_suffix and output_format != by_suffix:
        raise AutoplanError(f"-o {output_path} names a .{by_suffix} file but --format is {output_format}: "
                            "give one that agrees, or another file name")
    output_format = output_format or by_suffix or ("csv" if output_path or not _stdout_is_terminal() else "table")
    if output_path and output_format == "table":
        raise AutoplanError("--format table is for the terminal: with -o use --format csv or json")
    if output_path:
        check_out_file(output_path)  # before the work

    if kw["gpus"] is not None:  # one count for every row: refuse it up front if no cluster has it
        from autoplan.specs.hardware import load_gpu, make_cluster

        make_cluster(load_gpu(kw["hardware"]), kw["gpus"], gpus_per_node=kw["gpus_per_node"])
    frame = read_layouts_csv(layouts_csv)  # (refuses a knob column spelled otherwise, with the name to use)
    seq_len, gbs_seqs = kw["seq_len"], kw["gbs_seqs"]
    if kw["gbs_tokens"] is not None:
        from autoplan.specs.models import load_model

        seq_len, gbs_seqs = resolve_batch(seq_len, None, kw["gbs_tokens"], load_model(kw["model_name"]).seq_len)
    defaults = {"gpus": kw["gpus"], "seq_len": seq_len, "gbs_seqs": gbs_seqs, "precision": precision}
    out = compare_layouts(frame, kw["model_name"], trainer=kw["trainer"], profile_path=kw["profile_path"],
                          hardware=kw["hardware"], gpus_per_node=kw["gpus_per_node"], nic=kw["nic"],
                          flops_convention=kw["flops_convention"], defaults=defaults,
                          allow_uneven=kw["allow_uneven_pp"], settings=setup_settings(kw))
    if output_format == "table":
        _print_compare_table(out)
        return
    from autoplan.report.csv_text import safe_frame

    text = _compare_json(out) if output_format == "json" else safe_frame(out).to_csv(index=False, lineterminator="\n")
    if output_path:
        from autoplan.report.destination import write_text

        write_text(output_path, text)
        click.echo(f"wrote {len(out)} rows to {escape(output_path)}", err=True)
    else:
        click.echo(text, nl=False)


COMPARE_TABLE_COLUMNS = {"fits": "fits", "peak_memory_gib": "mem GiB", "step_time_s": "step s",
                         "tokens_per_s_per_gpu": "tok/s/GPU", "mfu": "MFU",
                         "infeasible_reason": "why not"}


def _stdout_is_terminal() -> bool:
    return sys.stdout.isatty()


def _with_band(out, fmt):
    """A formatter that appends the band ('1,183 ±9%') when the frame has one band."""
    from autoplan.calibration.uncertainty import band_text

    low, high = out.attrs.get("tokens_band", (None, None))
    if low is None:
        return fmt
    suffix = band_text(low, high)

    def formatted(value) -> str:
        text = fmt(value)
        return f"{text} {suffix}" if text else ""
    return formatted


def _compare_json(out) -> str:
    import json

    from autoplan.cli.render import _plain

    records = [{k: _plain(v) for k, v in row.items()} for row in out.to_dict(orient="records")]
    return json.dumps(records, indent=2) + "\n"


def _print_compare_table(out) -> None:
    """The input columns as one ``layout`` cell and the main predictions, one row per layout."""
    import pandas as pd

    names = out.attrs["predictions"]  # a prediction named like an input column is predicted_<name>
    inputs = list(out.columns[:list(out.columns).index(names["fits"])])
    records = []
    for row in out.to_dict(orient="records"):
        cells = [f"{k}={row[k]}" for k in inputs if not pd.isna(row[k]) and str(row[k]) != ""]
        record = {"layout": ",".join(cells), **{k: row[names[k]] for k in COMPARE_TABLE_COLUMNS}}
        if not row[names["fits"]] and row[names["fits_with_retries"]]:  # beyond the card only by the allocator's cache
            record["fits"] = "with retries"
        records.append(record)
    number = {"peak_memory_gib": "{:.1f}", "step_time_s": "{:.3g}", "tokens_per_s_per_gpu": "{:,.0f}",
              "mfu": "{:.1%}"}
    formatters = {k: (lambda v, f=f: "" if pd.isna(v) else f.format(v)) for k, f in number.items()}
    formatters["tokens_per_s_per_gpu"] = _with_band(out, formatters["tokens_per_s_per_gpu"])
    formatters["infeasible_reason"] = lambda v: "" if pd.isna(v) else str(v)
    emit_records(records, "table", columns=["layout", *COMPARE_TABLE_COLUMNS],
                 headers={"layout": "layout", **COMPARE_TABLE_COLUMNS}, formatters=formatters)
