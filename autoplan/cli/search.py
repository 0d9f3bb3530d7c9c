"""``autoplan search``: the layouts that fit, reach the global batch and train fastest."""

from __future__ import annotations

import sys

import click

from autoplan.cli.options import (
    SEED,
    ChoiceList,
    IntList,
    TokenCount,
    allow_uneven_option,
    context_from_options,
    fail,
    launch_options,
    profile_band_note,
    output_format_option,
    trainer_options,
    training_options,
)
from autoplan.cli.plan_table import COST_COLUMNS, print_table
from autoplan.errors import NoFeasiblePlanError, escape
from autoplan.export.registry import TRAINERS as EXPORT_TRAINERS
from autoplan.knobs import SEARCHED

SAMPLER_CHOICES = ("auto", "exhaustive", "tpe", "nsga2", "random")  # = autoplan.search.SAMPLERS


def _list_option(knob):
    """The search option of ``knob`` (autoplan.knobs): a list of its values, None = the space's."""
    if knob.kind == "modules":
        return click.option(knob.flag, multiple=True, metavar="M1,M2", help=knob.list_help)
    if knob.kind == "choice":
        return click.option(knob.flag, type=ChoiceList(knob.choices), default=None, help=knob.list_help)
    bounds = {"minimum": knob.minimum} | ({"maximum": 3} if knob.kind == "stage" else {})
    return click.option(knob.flag, type=IntList(**bounds), default=None, help=knob.list_help)


def knob_options(func):
    """One option per searched knob of autoplan.knobs (--tp, --pp, ..., --offload), each a list."""
    for option in reversed([_list_option(k) for k in SEARCHED]):
        func = option(func)
    return func


@click.command("search")
@training_options
@trainer_options
@knob_options
@click.option("--space", "space_name", default=None,
              help="Search space name (default, moe, long-context) or YAML path "
                   "[default: moe for MoE models, else default].")
@allow_uneven_option
@click.option("--sampler", type=click.Choice(SAMPLER_CHOICES), default="auto", show_default=True,
              help="auto = exhaustive when the space has at most 1e8 layouts (streamed, bounded memory), else tpe.")
@click.option("--trials", type=click.IntRange(min=1), default=1000, show_default=True,
              help="Optuna samplers: finished trials in the study (resumed ones count).")
@click.option("--timeout", "timeout_s", type=click.FloatRange(min=0.0, min_open=True), default=None,
              help="Stop searching after this many seconds.")
@click.option("--seed", type=SEED, default=0, show_default=True, help="Sampler seed.")
@click.option("--storage", default=None,
              help="Optuna storage (resumable, shared by --workers): an RDB URL such as "
                   "sqlite:///results/study.db or postgresql://user@host/db, or a journal file path.")
@click.option("--study-name", default=None, help="Study name in --storage [default: from the inputs].")
@click.option("--workers", type=click.IntRange(min=1), default=1, show_default=True,
              help="Processes sharing the study through --storage (exhaustive: they split the "
                   "layouts; plans.csv is the same).")
@click.option("--allow-idle-gpus", is_flag=True,
              help="Also consider plans on fewer GPUs than --gpus (the largest count each tp·pp·cp "
                   "fills in whole nodes), ranked per GPU of the job; the idle_gpus column says how many.")
@click.option("--top", "top_k", type=click.IntRange(min=1), default=10, show_default=True,
              help="Plans to show.")
@click.option("--export", "export_to", default=None, metavar="TRAINER[,TRAINER...]",
              help=f"Also write configs into <out>/configs/ for {', '.join(EXPORT_TRAINERS)}: "
                   "for each, the best plan that trainer can run (searched again with its own profile "
                   "and rules), labelled with its predicted figures.")
@launch_options
@click.option("--report", is_flag=True, help="Write plots and report.html into the result folder.")
@click.option("--gpu-hour-price", type=click.FloatRange(min=0.0, min_open=True), default=None,
              metavar="USD", help="Price of one GPU-hour; adds the dollars to train (needs --train-tokens).")
@click.option("--train-tokens", type=TokenCount(binary=False), default=None,
              help="Tokens of the whole training run (decimal: 15T = 15e12); adds days and GPU-hours.")
@output_format_option()
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default=None,
              help="Result folder [default: results/<timestamp>-<model>-<gpus>/].")
def search_command(**kw) -> None:
    """Search the layouts that fit in memory, reach the global batch and train fastest.

    \b
    The recipe: (1) fit in memory, (2) reach the global batch, (3) rank by tokens/s/GPU.
      autoplan search --model 70b --gpus 512 --gbs-tokens 4M
      autoplan search -m 8b -g 64 --gbs-seqs 512 --tp 1,2 --recompute selective,full
      autoplan search -m deepseek-v3 -g 2048 --hardware h800 --gbs-tokens 16M --export megatron
    """
    if kw["gpu_hour_price"] is not None and kw["train_tokens"] is None:
        fail("--gpu-hour-price needs --train-tokens (e.g. --train-tokens 15T) to price a training run")
    if kw["export_to"]:
        from autoplan.export import parse_trainers

        parse_trainers(kw["export_to"])  # refuse an unknown trainer before searching
    from autoplan.report.destination import check_out_dir
    from autoplan.report.results import MAX_CSV_ROWS, default_out_dir, record_files
    from autoplan.search import SearchOptions, search
    from autoplan.search.study import study_meta
    from autoplan.space import KNOBS, load_space

    if kw["allow_idle_gpus"]:
        _whole_nodes(kw)
    ctx = context_from_options(kw)
    space = load_space(kw["space_name"] or ("moe" if ctx.model.is_moe else "default"))
    _suggest_long_context(kw["space_name"], space.name, ctx.training.seq_len)
    space = space.with_overrides(**{k: kw[k] or None for k in KNOBS})
    options = SearchOptions(sampler=kw["sampler"], trials=kw["trials"], timeout_s=kw["timeout_s"],
                            seed=kw["seed"], storage=kw["storage"], study_name=kw["study_name"],
                            allow_uneven_pp=kw["allow_uneven_pp"], workers=kw["workers"],
                            allow_idle_gpus=kw["allow_idle_gpus"])
    _warn_workers(kw["workers"], space.size if kw["sampler"] in ("auto", "exhaustive") else None)
    kw["out_dir"] = kw["out_dir"] or str(default_out_dir(kw["model_name"], kw["gpus"]))
    key = study_meta(ctx, space)["key"]
    folder = check_out_dir(kw["out_dir"], key)  # before the work; locked until the command ends
    click.get_current_context().call_on_close(folder.release)
    try:
        with _progress_bar() as progress:
            result = search(ctx, space, options, progress=progress)
    except BaseException:
        folder.abandon()
        raise
    folder.start_writing(key)
    if result.store is not None and result.store.resumed:
        click.echo(f"Note: {result.store.resumed}", err=True)
    out = _write(result, kw)
    if not result.feasible.any():
        try:
            result.check_feasible()
        except NoFeasiblePlanError as exc:  # one line: the reasons, then where the candidates are
            record_files(out)
            folder.finish()
            raise NoFeasiblePlanError(f"{exc} (every candidate with its reason: {out}/plans.csv)") from None
    costs = _costs(result, kw)
    _emit(result, kw["output_format"], kw["top_k"], costs, references=kw)
    written = ["plans.csv", "plans.json", "columns.md", "manifest.json"]
    if kw["export_to"]:
        written += _export(result, kw, out)
    if kw["report"]:
        from autoplan.report.results import write_search_report

        written.append(write_search_report(result, out, top=kw["top_k"], train_tokens=kw["train_tokens"],
                                           gpu_hour_price_usd=kw["gpu_hour_price"]).name)
    record_files(out)
    folder.finish()
    click.echo(f"Wrote {escape(out)}/ ({', '.join(written)})", err=True)
    _uneven_note(result)
    _caps_note(result)
    _architecture_note(result)
    _transfer_note(result)
    if kw["profile_path"]:
        click.echo(f"Note: {profile_band_note(result.ctx)}", err=True)
    if result.num_ranked > MAX_CSV_ROWS:
        click.echo(f"plans.csv holds the best {MAX_CSV_ROWS} of {result.num_ranked} ranked layouts", err=True)


def _whole_nodes(kw: dict) -> None:
    """With --allow-idle-gpus, a GPU count that is not whole nodes (509 of 8 per node) is planned
    on its largest whole-node count (504), with a note: a cluster spans whole nodes."""
    from autoplan.search.idle import whole_node_gpus
    from autoplan.specs.hardware import load_gpu

    per_node = kw["gpus_per_node"] or load_gpu(kw["hardware"]).gpus_per_node
    whole = whole_node_gpus(kw["gpus"], per_node)
    if whole != kw["gpus"]:
        click.echo(f"note: --allow-idle-gpus: {kw['gpus']} GPUs are not whole nodes of {per_node}; planning on "
                   f"{whole}, the largest whole-node count ({kw['gpus'] - whole} GPUs idle besides those the "
                   f"idle_gpus column counts; per-GPU figures are per GPU of the {whole})", err=True)
        kw["gpus"] = whole


def _uneven_note(result) -> None:
    """One line on the layouts dropped for unequal stages: by --even-stages-only, or because the
    trainer cannot run them."""
    layers, trainer = result.ctx.model.num_layers, result.ctx.profile.name
    opted_out = result.counts.reasons.get("pp_uneven", 0)
    if opted_out:
        click.echo(f"Note: {opted_out} layouts were dropped because {layers} layers do not divide into "
                   "pp·vpp stages; without --even-stages-only they are considered", err=True)
    unable = result.counts.reasons.get("trainer_uneven_pp", 0)
    if unable:
        click.echo(f"Note: {unable} layouts were dropped because {layers} layers do not divide into "
                   f"pp·vpp stages and {trainer} cannot run unequal stages there", err=True)
def _architecture_note(result) -> None:
    """One line when the trainer's own model code cannot build the model: the plans are costed as
    if it could (the exporter refuses them)."""
    from autoplan.export import architecture_problem

    trainer = result.ctx.profile.name
    problem = architecture_problem(trainer, result.ctx.model, result.ctx.training)
    if problem:
        click.echo(f"Note: {problem}. The plans are costed as if {trainer} could build it; "
                   f"--export {trainer} refuses them.", err=True)


def _transfer_note(result) -> None:
    """One line when the trainer was never calibrated on this GPU (profiles/transfer.py)."""
    from autoplan.profiles.transfer import transferred_note

    if note := transferred_note(result.ctx.parameters):
        click.echo(f"Note: parameters {note}", err=True)


def _caps_note(result) -> None:
    """One line per knob of the space capped by the GPU count or a rule (exhaustive only)."""
    from autoplan.report.results import cap_notes

    for note in cap_notes(result):
        click.echo(f"Note: {note}", err=True)


# An exhaustive space this small searches in about a second in one process (about 1.5 M layouts/s,
# benchmarks/speed.py), less than a worker process takes to start and open the study.
SMALL_FOR_WORKERS = 2_000_000


def _warn_workers(workers: int, exhaustive_size: int | None = None) -> None:
    """One line when --workers exceeds the CPUs this process may use (each worker then waits
    for a core, and holds its own copy of the study: slower, not faster), and one when the
    exhaustive space is too small for workers to pay (``exhaustive_size``: its layouts)."""
    import os

    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    if workers > cpus:
        click.echo(f"warning: --workers {workers} is more than the {cpus} CPUs available; "
                   f"the search will not run faster than with --workers {cpus}", err=True)
    if workers > 1 and exhaustive_size is not None and exhaustive_size <= SMALL_FOR_WORKERS:
        click.echo(f"note: --workers {workers}: this space of {exhaustive_size:,} layouts searches in about a second "
                   "in one process; each worker's start-up and study traffic cost seconds more (drop --workers)",
                   err=True)


def _costs(result, kw: dict):
    """Days, GPU-hours and dollars to train for the top plans (None without --train-tokens)."""
    if kw["train_tokens"] is None:
        return None
    from autoplan.report.html import add_cost_columns

    frame = result.plans_frame(kw["top_k"])
    return add_cost_columns(frame, gpu_hour_price_usd=kw["gpu_hour_price"],
                            train_tokens=kw["train_tokens"])


def _export(result, kw: dict, out: str) -> list[str]:
    """Each trainer's best plan that it can run, as its configs under <out>/configs/ (launched by
    --launcher, saving in --checkpoint-dir); one line per trainer on stderr (its plan and
    predicted figures, or why it has none)."""
    from pathlib import Path

    from autoplan.export import LaunchOptions, parse_trainers, write_files
    from autoplan.export.per_trainer import best_plans
    from autoplan.report.html import EXPORT_FOLDER

    if len(result.plan_rows(1)) == 0:
        return []
    written = []
    launch = LaunchOptions(launcher=kw["launcher"], checkpoint_dir=kw["checkpoint_dir"])
    for plan in best_plans(result, parse_trainers(kw["export_to"]), launch):
        click.echo(f"export {plan.summary()}", err=True)
        for warning in plan.result.warnings if plan.result else []:
            click.echo(f"  warning: {warning}", err=True)
        if plan.result is not None:
            written += write_files(plan.result.files, Path(out) / EXPORT_FOLDER)
    return [str(Path(p).relative_to(out)) for p in written]


class _progress_bar:
    """A rich progress bar on stderr (only on a terminal); yields the callback for search()."""

    def __enter__(self):
        self.bar = None
        from autoplan.cli.text_table import may_be_terminal

        if not may_be_terminal(sys.stderr):
            return None  # no bar to draw: rich is not even imported (~50 ms)
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

        console = Console(stderr=True)
        self.bar = Progress(TextColumn("searching"), BarColumn(), MofNCompleteColumn(),
                            TimeElapsedColumn(), console=console, transient=True,
                            disable=not console.is_terminal)
        self.bar.start()
        self.task = self.bar.add_task("search", total=None)
        return lambda done, total: self.bar.update(self.task, completed=done, total=total)

    def __exit__(self, *exc):
        if self.bar is not None:
            self.bar.stop()
        return False


def _write(result, kw: dict) -> str:
    from autoplan.report.results import write_results

    inputs = {k: (list(v) if isinstance(v, tuple) else v) for k, v in kw.items()}
    inputs.update(seq_len=result.training.seq_len, gbs_seqs=result.training.gbs_seqs, model=result.ctx.model.name)
    out = kw["out_dir"]
    return str(write_results(result, out, top=kw["top_k"], inputs=inputs, command_line=sys.argv))


def _emit(result, output_format: str, top_k: int, costs=None, references: dict | None = None) -> None:
    import json

    from autoplan.report.columns import plain_dictionary
    from autoplan.report.results import (
        CSV_FLOAT_FORMAT,
        add_band_columns,
        clean_json,
        recipe_line,
        references_of,
        summary,
    )

    if output_format == "json":
        doc = summary(result, top_k, references_of(references or {}))
        if costs is not None:
            for plan, (_, row) in zip(doc["plans"], costs.iterrows()):
                plan.update({c: float(row[c]) for c in COST_COLUMNS if c in costs})
            doc["columns"].update(plain_dictionary(c for c in COST_COLUMNS if c in costs))
        click.echo(json.dumps(clean_json(doc), indent=2))
    elif output_format == "csv":
        frame = costs if costs is not None else result.plans_frame(top_k)
        frame = add_band_columns(result, frame.copy())
        from autoplan.report.csv_text import safe_frame

        click.echo(safe_frame(frame).to_csv(index=False, float_format=CSV_FLOAT_FORMAT, lineterminator="\n"), nl=False)
    else:
        print_table(result, top_k, costs)
    if output_format != "table":
        click.echo(recipe_line(result), err=True)
    _ties_note(result, output_format)


def _ties_note(result, output_format: str) -> None:
    """One line on the plans the model cannot tell apart from the best, and one per strategy
    knob compared (the best plan of each value; stdout under the table, stderr beside csv/json)."""
    from autoplan.report.near_ties import near_ties

    from autoplan.report.per_choice import per_choice_lines

    for line in [near_ties(result).line(), *per_choice_lines(result)]:
        if line:
            click.echo(line, err=output_format != "table")


LONG_CONTEXT_SEQ_LEN = 32 * 1024


def _suggest_long_context(space_option, space_name: str, seq_len: int) -> None:
    """One line on stderr: a sequence of 32K or more searched in the default space, whose
    context-parallel degrees stop short of what such sequences need."""
    if space_option is None and space_name == "default" and seq_len >= LONG_CONTEXT_SEQ_LEN:
        click.echo(f"sequence length {seq_len} >= {LONG_CONTEXT_SEQ_LEN}: consider --space long-context "
                   "(larger context-parallel degrees)", err=True)
