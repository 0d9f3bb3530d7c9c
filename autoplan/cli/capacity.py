"""``autoplan capacity``: which GPUs, how many, how long and at what cost, for a token budget."""

from __future__ import annotations

import sys

import click

from autoplan.cli.options import (
    SeqLen,
    SETUP_SETTING_OPTIONS,
    TokenCount,
    allow_uneven_option,
    output_format_option,
    setup_settings,
    trainer_options,
)
from autoplan.errors import AutoplanError, NoFeasiblePlanError, escape, shown
from autoplan.specs.training import DEFAULT_FLOPS_CONVENTION, DEFAULT_GBS_TOLERANCE, FLOPS_CONVENTIONS

DEFAULT_HARDWARE = "h100-sxm,h200,b200,gb200-nvl72"


def capacity_options(func):
    """The model, GPU types and range, the run (tokens, batch or batch schedule, sequence length)
    and the limits (deadline, budget, prices)."""
    options = [
        click.option("--model", "-m", "model_name", required=True,
                     help="Model preset or alias (see `autoplan models`), or a config.json / YAML path."),
        click.option("--hardware", default=DEFAULT_HARDWARE, show_default=True, metavar="GPU[,GPU...]",
                     help="GPU types to compare (see `autoplan hardware`)."),
        click.option("--gpus", "-g", "gpu_range", default="256..8192", show_default=True, metavar="LOW..HIGH",
                     help="Rented GPU counts to search: whole nodes (whole racks on NVL72) in this range."),
        click.option("--train-tokens", type=TokenCount(binary=False), required=True,
                     help="Tokens of the whole run (decimal: 15T = 15e12)."),
        click.option("--gbs-tokens", type=TokenCount(), default=None,
                     help="Global batch in tokens, e.g. 4M (= 4·2^20, binary suffixes)."),
        click.option("--gbs-schedule", default=None, metavar="GBS:UNTIL,...,GBS",
                     help="Batch ramp, e.g. 2M:100B,4M:1T,16M: each phase's global batch (binary) until "
                          "that many run tokens (decimal); each phase gets its own best layout."),
        click.option("--seq-len", type=SeqLen(), default=None,
                     help="Sequence length, e.g. 8192 or 8k (binary: 8·1024) [default: the model's]."),
        click.option("--gbs-tolerance", type=click.FloatRange(0.0, 1.0, max_open=True), default=DEFAULT_GBS_TOLERANCE,
                     show_default=True, help="Accept a global batch within this fraction of the target (as every "
                                             "command; the counts that reach it exactly are searched too, so a "
                                             "looser tolerance never gives a dearer answer)."),
        click.option("--flops-convention", type=click.Choice(FLOPS_CONVENTIONS),
                     default=DEFAULT_FLOPS_CONVENTION, show_default=True, help="How model FLOPs (for MFU) are counted."),
        click.option("--deadline", default=None, metavar="DURATION",
                     help="Wall-clock limit, e.g. 90d, 12w, 2160h."),
        click.option("--budget", default=None, metavar="USD", help="Cost limit in US dollars, e.g. 20M."),
        click.option("--gpu-hour-price", default=None, metavar="GPU=USD,...",
                     help="Prices per GPU-hour replacing hardware_db/prices.yaml, e.g. h100-sxm=2.5,b200=4.0 "
                          "(a bare 2.5 prices every GPU)."),
        click.option("--prices", "price_file", default=None, type=click.Path(dir_okay=False),
                     help="A price file like hardware_db/prices.yaml [default: that file]."),
        click.option("--prefer", type=click.Choice(["cost", "time"]), default="cost", show_default=True,
                     help="Which point to choose among those within the deadline and budget: the cheapest "
                          "(cost) or the fastest (time, e.g. the fastest run a budget buys)."),
        click.option("--pessimistic", is_flag=True,
                     help="Check --deadline and --budget against the slow end of the cost model's error band "
                          "(days_high, cost_high) instead of the point prediction."),
        click.option("--space", "space_name", default=None,
                     help="Layout search space name or YAML path [default: moe for MoE models, else default]."),
    ]
    for option in reversed([*options, *SETUP_SETTING_OPTIONS]):
        func = option(func)
    return func


@click.command("capacity")
@capacity_options
@trainer_options
@allow_uneven_option
@click.option("--no-plots", "no_plots", is_flag=True,
              help="Skip the two PNG plots (they take a few seconds to draw).")
@click.option("--top", "top_k", type=click.IntRange(min=1), default=12, show_default=True, help="Points to show.")
@output_format_option()
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default=None,
              help="Result folder [default: results/<timestamp>-<model>-capacity/].")
def capacity_command(**kw) -> None:
    """Which GPUs, how many, how long and at what cost: the Pareto front of days vs cost.

    \b
    For each GPU type and rented GPU count, every batch phase is searched for its best layout
    (the recipe of `autoplan search`); days and GPU-hours follow from the predicted throughput,
    cost from the GPU-hour prices (hardware_db/prices.yaml, or --gpu-hour-price).
      autoplan capacity --model 70b --train-tokens 15T --gbs-tokens 4M --deadline 90d
      autoplan capacity -m 70b --train-tokens 15T --gbs-schedule 2M:100B,4M:1T,16M --budget 20M
    Writes capacity.csv, plans.json (the chosen point, for `autoplan export`), manifest.json and
    the plots capacity_pareto.png and capacity_scaling.png into the result folder.
    """
    from autoplan.capacity import run_capacity
    from autoplan.capacity.files import inputs_key, write_capacity
    from autoplan.report.capacity_plots import write_capacity_plots
    from autoplan.report.destination import check_out_dir
    from autoplan.report.results import default_out_dir, record_files

    setup, query, inputs = _inputs(kw)
    kw["out_dir"] = kw["out_dir"] or str(default_out_dir(kw["model_name"], "capacity"))
    key = inputs_key(inputs)
    folder = check_out_dir(kw["out_dir"], key)  # before the work; locked until the command ends
    click.get_current_context().call_on_close(folder.release)
    try:
        result = run_capacity(setup, query)
    except BaseException:
        folder.abandon()
        raise
    folder.start_writing(key)
    written = write_capacity(result, kw["out_dir"], inputs=inputs, command_line=sys.argv)
    if not kw["no_plots"]:
        plots = write_capacity_plots(result.points, list(query.hardware), kw["out_dir"],
                                     deadline_days=query.deadline_days, budget_usd=query.budget_usd)
        written += [p.name for p in plots.values()]
    record_files(kw["out_dir"])
    folder.finish()
    _emit(result, kw["output_format"], kw["top_k"])
    if result.note:
        click.echo(f"Note: {result.note}", err=True)
    click.echo(f"Wrote {escape(kw['out_dir'])}/ ({', '.join(written)})", err=True)
    _finish(result, kw["out_dir"], inputs["hardware_refs"])


def _finish(result, out_dir: str, hardware_refs: dict[str, str]) -> None:
    """How to export the chosen point (its GPU as --hardware named it: a YAML path stays a path),
    or exit 1 saying what is missed."""
    import shlex

    chosen = result.chosen
    if chosen is not None:
        hardware = hardware_refs.get(chosen["hardware"], chosen["hardware"])
        click.echo(f"Export the chosen layout: autoplan export {escape(shlex.quote(f'{out_dir}/plans.json'))} "
                   f"--to megatron --hardware {escape(shlex.quote(hardware))}"
                   + (" --rank PHASE" if len(result.query.phases) > 1 else ""),
                   err=True)
        return
    points = result.points
    if not points["feasible"].any():
        reasons = points["constraint_reason"].iloc[0]
        raise NoFeasiblePlanError(f"no GPU count of any type has a feasible layout ({reasons})")
    raise NoFeasiblePlanError("no point meets " + " and ".join(
        part for part, limit in (("the deadline", result.query.deadline_days), ("the budget", result.query.budget_usd))
        if limit is not None) + f"; the closest: {points['constraint_reason'].iloc[0]} "
        f"({int(points['gpus'].iloc[0])} x {points['hardware'].iloc[0]}); see capacity.csv")


def _inputs(kw: dict):
    """(CapacitySetup, CapacityQuery, inputs for the manifest) from the options; every bad value
    is refused here, before any search."""
    from autoplan.capacity import CapacityQuery, CapacitySetup
    from autoplan.capacity.grid import parse_gpu_range
    from autoplan.capacity.prices import (
        load_prices,
        parse_price_overrides,
        resolve_prices,
    )
    from autoplan.capacity.query import parse_budget_usd, parse_duration_days
    from autoplan.profiles import load_profile
    from autoplan.search import SearchOptions
    from autoplan.space import load_space
    from autoplan.specs.hardware import load_gpu
    from autoplan.specs.models import load_model

    model = load_model(kw["model_name"])
    load_profile(kw["trainer"])
    given = {}  # GPU name -> how --hardware named it (a preset, or a YAML path such as a probed GPU's)
    for ref in (part.strip() for part in kw["hardware"].split(",")):
        if ref:
            given.setdefault(load_gpu(ref).name, ref)
    gpu_types = tuple(load_gpu(ref) for ref in given.values())
    hardware = tuple(gpu.name for gpu in gpu_types)
    if not hardware:
        raise AutoplanError(f"--hardware: expected GPU names like 'h100-sxm,b200', got {shown(kw['hardware'])}")
    low, high = parse_gpu_range(kw["gpu_range"])
    phases = _phases(kw)
    overrides = parse_price_overrides(kw["gpu_hour_price"]) if kw["gpu_hour_price"] else {}
    prices = resolve_prices(list(hardware), overrides, load_prices(kw["price_file"]))
    space = load_space(kw["space_name"] or ("moe" if model.is_moe else "default"))
    setup = CapacitySetup(model=model, space=space, trainer=kw["trainer"], profile_path=kw["profile_path"],
                          seq_len=kw["seq_len"], gbs_tolerance=kw["gbs_tolerance"],
                          flops_convention=kw["flops_convention"], settings=setup_settings(kw),
                          options=SearchOptions(sampler="auto", allow_uneven_pp=kw["allow_uneven_pp"]))
    for phase in phases:
        setup.gbs_seqs(phase)  # a batch that is not a whole number of sequences: refused now
    query = CapacityQuery(gpu_types=gpu_types, gpus_low=low, gpus_high=high, phases=phases, prices=prices,
                          deadline_days=parse_duration_days(kw["deadline"]) if kw["deadline"] else None,
                          budget_usd=parse_budget_usd(kw["budget"]) if kw["budget"] else None, prefer=kw["prefer"],
                          pessimistic=kw["pessimistic"])
    inputs = {k: v for k, v in kw.items() if k not in ("out_dir", "output_format", "top_k", "no_plots")}
    inputs.update(model=model.name, hardware=list(hardware), hardware_refs=given, seq_len=setup.train_seq_len,
                  phases=[vars(p) for p in phases], prices_usd=query.price_usd())
    return setup, query, inputs


def _phases(kw: dict):
    """The run's batch phases from --gbs-schedule, or its one phase from --gbs-tokens."""
    from autoplan.capacity.schedule import parse_gbs_schedule, single_phase

    if kw["gbs_schedule"] and kw["gbs_tokens"] is not None:
        raise AutoplanError("give --gbs-tokens or --gbs-schedule, not both (the schedule's last phase is the "
                            "final batch)")
    if kw["gbs_schedule"]:
        return parse_gbs_schedule(kw["gbs_schedule"], kw["train_tokens"])
    if kw["gbs_tokens"] is None:
        raise AutoplanError("the global batch is missing: give --gbs-tokens (e.g. 4M) or --gbs-schedule")
    return single_phase(kw["gbs_tokens"], kw["train_tokens"])


# tokens/s and MFU per rented GPU: a rack-rented job that uses 64 of 72 GPUs pays for the 72
STATUS_HEADERS = ("rank", "GPUs", "days", "cost", "GPU-hours", "tokens/s\n/rented GPU", "MFU\n(rented)", "layout",
                  "status")


def _emit(result, output_format: str, top_k: int) -> None:
    """The ranked points: a table on stdout, or the CSV / JSON of every point."""
    import json

    from autoplan.capacity.files import capacity_csv, capacity_frame
    from autoplan.report.results import clean_json

    if output_format == "csv":
        click.echo(capacity_csv(result), nl=False)
    elif output_format == "json":
        records = capacity_frame(result).to_dict(orient="records")
        click.echo(json.dumps(clean_json({"points": records}), indent=2, default=str))
    else:
        _print_table(result, top_k)


def _status(row) -> str:
    if row["chosen"]:
        return "chosen"
    if row["constraint_reason"]:
        return row["constraint_reason"]
    if row["on_front"]:
        return "Pareto front"
    return f"front of {row['hardware']}" if row["on_type_front"] else "dominated"


def _phase_lines(layout: str) -> str:
    """One line per batch phase ('1: tp=2 ...'), or the one layout as it is."""
    parts = layout.split(" | ")
    return parts[0] if len(parts) == 1 else "\n".join(f"{i}: {p}" for i, p in enumerate(parts, start=1))


def _print_table(result, top_k: int) -> None:
    from rich.table import Table

    from autoplan.cli.render import stdout_console

    console = stdout_console(highlight=False)
    if not console.is_terminal:
        console = stdout_console(highlight=False, width=180)
    q, points = result.query, result.points
    feasible = int(points["feasible"].sum())
    console.print(f"Capacity: {result.setup.model.name}, {q.train_tokens / 1e12:g}T tokens in {len(q.phases)} "
                  f"batch phase(s); {len(q.hardware)} GPU types x {q.gpus_low}..{q.gpus_high} GPUs: "
                  f"{len(points)} points ({feasible} feasible), {int(points['on_front'].sum())} on the front "
                  f"({result.elapsed_s:.1f} s)")
    console.print("Prices (USD per GPU-hour): " + "; ".join(
        f"{p.gpu} {p.usd_per_gpu_hour:g} ({p.kind}{', ' + p.date if p.date else ''})" for p in q.prices.values()))
    table = Table(title="Days vs cost, ranked (rank 1 = chosen when it meets the limits)")
    for name in STATUS_HEADERS:
        table.add_column(name, justify="left" if name in ("layout", "status", "GPUs") else "right",
                         no_wrap=name not in ("layout", "status"))
    has_band = "days_low" in points.columns
    for _, row in points.head(top_k).iterrows():
        if not row["feasible"]:
            table.add_row(str(row["rank"]), f"{int(row['gpus']):,} x {row['hardware']}", "-", "-", "-", "-", "-",
                          "", row["constraint_reason"][:160])
            continue
        days = f"{row['train_days']:,.1f}" + (f"\n({row['days_low']:,.1f}-{row['days_high']:,.1f})" if has_band else "")
        cost = f"${row['cost_usd'] / 1e6:,.2f}M" + (
            f"\n({row['cost_low_usd'] / 1e6:,.2f}-{row['cost_high_usd'] / 1e6:,.2f})" if has_band else "")
        used = "" if str(row["job_gpus"]) == str(int(row["gpus"])) else f"\n(uses {row['job_gpus']})"
        table.add_row(str(row["rank"]), f"{int(row['gpus']):,} x {row['hardware']}{used}", days, cost,
                      f"{row['gpu_hours'] / 1e6:,.2f}M", f"{row['tokens_per_s_per_gpu']:,.0f}",
                      f"{100 * row['mfu']:.1f}%", _phase_lines(row["layout"]), _status(row))
    console.print(table)
    if has_band:
        console.print("Days and cost ranges: the cost model's held-out tokens/s error band of each GPU type "
                      "and scale (trainer/generation/dense|moe, at its GPU count where the group is split "
                      "by scale): " + "; ".join(
                          f"{name} {', '.join(dict.fromkeys(groups))}" for name, groups in
                          points.groupby("hardware", sort=False)["band_group"]))
