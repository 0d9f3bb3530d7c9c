"""`autoplan export`: a plan (from plans.json or the layout options) as a trainer's launch files."""

from __future__ import annotations

import os
from pathlib import Path

import click
from click.core import ParameterSource

from autoplan.cli.layout_options import LAYOUT_KEYS, layout_options, layout_values, resolve_batch
from autoplan.cli.options import TokenCount, allow_uneven_option
from autoplan.errors import AutoplanError

TRAINER_CHOICES = ("megatron", "torchtitan", "nanotron", "deepspeed")


@click.command("export")
@click.argument("plan", required=False, type=click.Path(exists=True, dir_okay=False))
@click.option("--to", "trainer", required=True, type=click.Choice(TRAINER_CHOICES),
              help="Trainer whose config to write.")
@click.option("-o", "--output", default=None, type=click.Path(),
              help="File or folder to write (a folder if it exists, ends with '/', or the trainer "
                   "writes several files). Default: standard output.")
@click.option("--rank", type=click.IntRange(1), default=1, show_default=True,
              help="Which plan of PLAN to export (1 = best).")
@click.option("--model", "-m", "model_name", default=None,
              help="Model preset or config path (required without PLAN, or when PLAN has no model).")
@click.option("--gpus", "-n", type=click.IntRange(1, 10**7), default=None, help="Number of GPUs (without PLAN).")
@click.option("--seq-len", type=click.IntRange(1, 10**8), default=None,
              help="Training sequence length (default: the model's).")
@click.option("--gbs-seqs", type=click.IntRange(1, 10**9), default=None, help="Global batch size in sequences.")
@click.option("--gbs-tokens", type=TokenCount(), default=None,
              help="Global batch size in tokens; 4M = 4·2^20 (binary suffixes).")
@layout_options
@click.option("--gpus-per-node", type=click.IntRange(1, 1024), default=8, show_default=True,
              help="Processes per node in the launch line.")
@click.option("--train-steps", type=click.IntRange(1), default=1000, show_default=True, help="Training steps.")
@click.option("--tokenizer", default=None, help="Hugging Face tokenizer name or path (default: a placeholder).")
@click.option("--data-path", default=None, help="Training data location, in the trainer's own form.")
@allow_uneven_option
@click.pass_context
def export_command(ctx: click.Context, plan, trainer, output, rank, model_name, gpus_per_node, train_steps,
                   tokenizer, data_path, allow_uneven_pp, **kwargs) -> None:
    """Write the config that TRAINER launches from, for one plan.

    \b
    PLAN is a plans.json (from `autoplan search`); --rank picks the plan, and a search run with
    --allow-uneven-pp exports with it too. Without PLAN, give
    the layout with the estimate options (--model, --gpus, --tp, ...). Plans a trainer would
    refuse are refused with the rule and the values; knobs the trainer cannot express are
    reported here and in the file's header comment.
    """
    from autoplan.export import TrainingSetup, render
    from autoplan.specs.models import load_model

    if plan:
        model_ref, layout, searched_uneven = _from_plan(ctx, plan, rank, model_name, trainer)
        model = load_model(model_ref)
        allow_uneven_pp = allow_uneven_pp or searched_uneven  # as the search that ranked it
    else:
        model, layout = _from_options(model_name, kwargs)
    training = TrainingSetup(train_steps=train_steps, gpus_per_node=gpus_per_node, tokenizer=tokenizer,
                             data_path=data_path)
    result = render(trainer, model, layout, training, allow_uneven_pp=allow_uneven_pp)
    for warning in result.warnings:
        click.echo(f"warning: {warning}", err=True)
    _emit(result.files, output, trainer)


def _from_plan(ctx: click.Context, plan: str, rank: int, model_name: str | None, trainer: str):
    from autoplan.export import layout_from_record, read_plans, select_plan

    given = [name for name in (*LAYOUT_KEYS, "gpus", "seq_len", "gbs_seqs", "gbs_tokens")
             if ctx.get_parameter_source(name) == ParameterSource.COMMANDLINE]
    if given:
        flags = ", ".join("--" + name.replace("_", "-") for name in given)
        raise AutoplanError(f"give either PLAN or the layout options, not both (got {plan} and {flags})")
    data = read_plans(plan)
    model_ref = model_name or data.get("model")
    if not model_ref:
        raise AutoplanError(f"{plan} names no model at top level; give it with --model")
    if model_name and data.get("model") and str(data["model"]) != model_name:
        click.echo(f"note: using --model {model_name} instead of the plan's model {data['model']}", err=True)
    if data.get("trainer") and str(data["trainer"]) != trainer:
        click.echo(f"note: the plan was searched for trainer '{data['trainer']}'; its predictions assume "
                   f"that trainer's implementation, not {trainer}'s", err=True)
    record = select_plan(data["plans"], rank, where=plan)
    return str(model_ref), layout_from_record(record), bool(data.get("allow_uneven_pp", False))


def _from_options(model_name: str | None, kwargs: dict):
    from autoplan.layout import resolve_layout
    from autoplan.specs.models import load_model

    if not model_name or kwargs.get("gpus") is None:
        raise AutoplanError("give a PLAN file, or the layout with --model, --gpus and the batch "
                            "(--gbs-tokens or --gbs-seqs)")
    model = load_model(model_name)
    seq, gbs = resolve_batch(kwargs["seq_len"], kwargs["gbs_seqs"], kwargs["gbs_tokens"], model.seq_len)
    return model, resolve_layout(layout_values(kwargs, kwargs["gpus"], seq, gbs))


def _emit(files: dict[str, str], output: str | None, trainer: str) -> None:
    from autoplan.export import write_files

    if output is None:
        for name, text in files.items():
            if len(files) > 1:
                click.echo(f"==> {name} <==")
            click.echo(text, nl=False)
        return
    path = Path(output)
    is_folder = path.is_dir() or output.endswith(("/", os.sep))
    if not is_folder and len(files) > 1:
        if path.suffix:
            raise AutoplanError(f"{trainer} writes {len(files)} files ({', '.join(files)}); give a folder "
                                f"with -o, not the file {output!r}")
        is_folder = True
    if is_folder:
        written = write_files(files, path)
    else:  # one file, written under the name the user chose
        written = write_files({path.name: next(iter(files.values()))}, path.parent)
    for target in written:
        click.echo(f"wrote {target}", err=True)
