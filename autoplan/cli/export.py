"""`autoplan export`: a plan (from plans.json or the layout options) as a trainer's launch files."""

from __future__ import annotations

import os
from pathlib import Path

import click

from autoplan.cli.layout_options import layout_options, layout_values
from autoplan.cli.options import (
    allow_uneven_option,
    launch_options,
    training_from_options,
    training_options,
)
from autoplan.cli.plan_file import read_plan, resolve_trainer_version
from autoplan.errors import AutoplanError, escape
from autoplan.export.registry import TRAINERS as TRAINER_CHOICES


@click.command("export")
@click.argument("plan", required=False, type=click.Path(exists=True, dir_okay=False))
@click.option("--to", "trainer", required=True, type=click.Choice(TRAINER_CHOICES),
              help="Trainer whose config to write.")
@click.option("-o", "--output", default=None, type=click.Path(),
              help="File or folder to write (a folder if it exists, ends with '/', or the trainer "
                   "writes several files). Default: standard output.")
@click.option("--rank", type=click.IntRange(1), default=1, show_default=True,
              help="Which plan of PLAN to export (1 = best).")
@click.option("--profile", "profile_path", default=None, type=click.Path(dir_okay=False),
              help="Calibrated profile YAML (`autoplan calibrate`) the plan was priced with: the overlap "
                   "flags follow it [default: the one PLAN records for this trainer, else the built-in].")
@training_options(model_required=False, gpus_required=False)
@layout_options
@click.option("--trainer-version", default=None,
              help="Trainer version to write for, as its profile's capabilities name it (megatron: core_v0.15.3, "
                   "core_v0.16.0, core_v0.17.0) [default: the pinned one]; a plan needing a later version is refused "
                   "with the version that has it.")
@click.option("--train-steps", type=click.IntRange(1), default=1000, show_default=True, help="Training steps.")
@click.option("--tokenizer", default=None, help="Hugging Face tokenizer name or path (default: the launch script "
                                                 "requires TOKENIZER; a placeholder only with --mock-data).")
@click.option("--data-path", default=None, help="Training data location, in the trainer's own form (default: the "
                                                 "launch script requires DATA_PATH).")
@click.option("--mock-data", is_flag=True, help="Train on the trainer's synthetic or demo data where no --data-path "
                                                "is given (never without this flag).")
@launch_options
@allow_uneven_option
@click.pass_context
def export_command(ctx: click.Context, plan, trainer, output, rank, profile_path, trainer_version, train_steps,
                   tokenizer, data_path, mock_data, launcher, checkpoint_dir, allow_uneven_pp, **kwargs) -> None:
    """Write the config that TRAINER launches from, for one plan.

    \b
    PLAN is a plans.json (from `autoplan search`); --rank picks the plan. Unequal pipeline
    stages are exported wherever the trainer can run them (--even-stages-only refuses them). Without PLAN, give the layout with the estimate
    options (--model, --gpus, --tp, ...). The launch line starts the hardware's GPUs per node
    (--gpus-per-node overrides it). Plans a trainer would
    refuse are refused with the rule and the values; knobs the trainer cannot express are
    reported here and in the file's header comment.
    """
    from autoplan.export import LaunchOptions, render

    if output is not None and not (Path(output).is_dir() or output.endswith(("/", os.sep))):
        from autoplan.report.destination import check_out_file

        check_out_file(output)  # before the work (a folder is made and checked as it is written)
    prediction = None
    if plan:
        chosen = read_plan(ctx, plan, rank, trainer, kwargs)
        model, layout, training, prediction = chosen.model, chosen.layout, chosen.training, chosen.prediction
        profile_path = profile_path or chosen.profile_path
        trainer_version = resolve_trainer_version(trainer_version, chosen.trainer_version, plan)
    else:
        model, layout, training = _from_options(kwargs)
    launch = LaunchOptions(train_steps=train_steps, tokenizer=tokenizer, data_path=data_path,
                           prediction=prediction, launcher=launcher, mock_data=mock_data,
                           checkpoint_dir=checkpoint_dir)
    if prediction is not None:
        click.echo(f"predicted for this plan: {prediction.describe()}", err=True)
    result = render(trainer, model, layout, training, launch, allow_uneven_pp=allow_uneven_pp,
                    profile=_profile(trainer, training, profile_path), trainer_version=trainer_version)
    for warning in result.warnings:
        click.echo(f"warning: {warning}", err=True)
    _emit(result.files, output, trainer)


def _profile(trainer: str, training, profile_path: str | None):
    """The trainer's profile with a calibrated profile file applied (None: the built-in)."""
    if not profile_path:
        return None
    from autoplan.calibration.profile_file import apply_profile_file
    from autoplan.profiles import load_profile

    return apply_profile_file(load_profile(trainer), training.cluster.gpu.name, profile_path)


def _from_options(kwargs: dict):
    from autoplan.layout import resolve_layout
    from autoplan.specs.models import load_model

    if not kwargs["model_name"] or kwargs.get("gpus") is None:
        raise AutoplanError("give a PLAN file, or the layout with --model, --gpus and the batch "
                            "(--gbs-tokens or --gbs-seqs)")
    model = load_model(kwargs["model_name"])
    from autoplan.export import plan_training

    training = training_from_options(kwargs, model.seq_len)
    layout = resolve_layout(layout_values(kwargs), training)
    return model, layout, plan_training(layout, training)


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
    else:  # one file, written under the name the user chose, in the format its extension names
        (name, text), = files.items()
        if path.suffix and path.suffix.lower() != Path(name).suffix.lower():
            raise AutoplanError(f"{trainer} writes {name} (a {Path(name).suffix} file), but -o {output} names a "
                                f"{path.suffix} file: give a name ending in {Path(name).suffix}, or a folder")
        written = write_files({path.name: text}, path.parent)
    for target in written:
        click.echo(f"wrote {escape(str(target))}", err=True)
