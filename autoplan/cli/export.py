"""`autoplan export`: a plan (from plans.json or the layout options) as a trainer's launch files."""

from __future__ import annotations

import os
from pathlib import Path

import click
from click.core import ParameterSource

from autoplan.cli.layout_options import LAYOUT_KEYS, layout_options, layout_values
from autoplan.cli.options import (
    SETUP_SETTINGS,
    allow_uneven_option,
    launch_options,
    training_from_options,
    training_options,
)
from autoplan.errors import AutoplanError, escape, shown
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
        model, layout, training, prediction = _from_plan(ctx, plan, rank, trainer, kwargs)
        profile_path = profile_path or kwargs.pop("recorded_profile", None)
        trainer_version = _trainer_version(trainer_version, kwargs.pop("recorded_trainer_version", None), plan)
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


def _from_plan(ctx: click.Context, plan: str, rank: int, trainer: str, kwargs: dict):
    """(model, layout, training, prediction) of the plan of ``rank`` in a plans.json; the setup is
    the record's gpus, seq_len and gbs_seqs on the hardware options; the prediction is the
    record's, by the profile the plans were searched with."""
    from autoplan.export import read_plans, select_plan
    from autoplan.export.common import Prediction
    from autoplan.layout_records import layout_from_record, record_setup
    from autoplan.report.plan_inputs import recorded_inputs
    from autoplan.specs.models import load_model

    model_name = kwargs["model_name"]
    given = [name for name in (*LAYOUT_KEYS, "gpus", "seq_len", "gbs_seqs", "gbs_tokens")
             if ctx.get_parameter_source(name) == ParameterSource.COMMANDLINE]
    if given:
        flags = ", ".join("--" + name.replace("_", "-") for name in given)
        raise AutoplanError(f"give either PLAN or the layout options, not both (got {plan} and {flags})")
    data = read_plans(plan)
    recorded, notes = recorded_inputs(data)
    for note in notes:
        click.echo(f"note: {note}", err=True)
    model_ref = model_name or recorded.get("model")
    if not model_ref:
        raise AutoplanError(f"{plan} names no model at top level; give it with --model")
    if model_name and recorded.get("model") and model_name not in (recorded["model"], data.get("model")):
        from autoplan.specs.models import load_model as _load

        if _load(model_name).name != _load(str(recorded["model"])).name:  # (an alias of the same model is fine)
            raise AutoplanError(f"{plan} holds plans for {data.get('model') or recorded['model']}, not "
                                f"{model_name}: its layouts were searched (and fit) for that model; search for "
                                f"{model_name}, or drop --model")
    _recorded_cluster(ctx, recorded, kwargs, plan)
    if recorded.get("profile") and data.get("trainer") == trainer:
        kwargs["recorded_profile"] = recorded["profile"]  # the calibrated profile of the search
    if data.get("trainer_version") and data.get("trainer") == trainer:
        kwargs["recorded_trainer_version"] = str(data["trainer_version"])  # the capabilities it searched with
    if data.get("trainer") and str(data["trainer"]) != trainer:
        click.echo(f"note: the plan was searched for trainer {shown(str(data['trainer']))}; its predictions assume "
                   f"that trainer's implementation, not {trainer}'s", err=True)
    record = select_plan(data["plans"], rank, where=plan)
    model = load_model(str(model_ref))
    setup = record_setup(record)
    missing = [name for name in ("gpus", "gbs_seqs") if name not in setup]
    if missing:
        raise AutoplanError(f"{plan}: plan of rank {rank} has no {' or '.join(missing)}")
    settings = _plan_settings(ctx, data.get("setup") or {}, kwargs, plan)
    training = training_from_options({**kwargs, **settings}, model.seq_len, gpus=setup["gpus"],
                                     gbs_seqs=setup["gbs_seqs"], seq_len=setup.get("seq_len"), gbs_tokens=None)
    prediction = Prediction.from_record(record, str(data.get("trainer") or "searched"))
    return model, layout_from_record(record, training), training, prediction


def _trainer_version(given: str | None, recorded: str | None, plan: str) -> str | None:
    """The trainer version to write for: --trainer-version, else the one PLAN was searched with
    (plans.json ``trainer_version``); a given one that differs overrides it, with a note."""
    if given and recorded and given != recorded:
        click.echo(f"note: --trainer-version {shown(given)} overrides the {shown(recorded)} {plan} was searched "
                   "with; its plans and predictions assume the latter's capabilities", err=True)
    return given or recorded


def _profile(trainer: str, training, profile_path: str | None):
    """The trainer's profile with a calibrated profile file applied (None: the built-in)."""
    if not profile_path:
        return None
    from autoplan.calibration.profile_file import apply_profile_file
    from autoplan.profiles import load_profile

    return apply_profile_file(load_profile(trainer), training.cluster.gpu.name, profile_path)


def _recorded_cluster(ctx: click.Context, recorded: dict, kwargs: dict, plan: str) -> None:
    """The hardware, GPUs per node, NIC and FLOPs convention the plans were searched with
    (plans.json ``inputs``) into ``kwargs`` for each option not given on the command line; a given
    one that differs wins, with a note."""
    other_hardware = (ctx.get_parameter_source("hardware") == ParameterSource.COMMANDLINE
                      and kwargs["hardware"] != recorded.get("hardware"))
    for name in ("hardware", "gpus_per_node", "nic", "flops_convention"):
        key = "nic_bytes_per_s" if name == "nic" else name
        if key not in recorded or (other_hardware and name in ("gpus_per_node", "nic")):
            continue  # (another GPU brings its own node size and NIC unless given)
        value = f"{recorded[key] / 1e9:.17g} GB/s" if name == "nic" else recorded[key]
        if ctx.get_parameter_source(name) == ParameterSource.COMMANDLINE:
            if str(kwargs[name]) != str(value) and name != "nic":
                click.echo(f"note: --{name.replace('_', '-')} {shown(kwargs[name])} instead of the {shown(value)} "
                           f"{plan} was searched with; its predictions assume the latter", err=True)
        else:
            kwargs[name] = value


def _plan_settings(ctx: click.Context, recorded: dict, kwargs: dict, plan: str) -> dict:
    """The trainer settings the plans were searched with (plans.json ``setup``: the TrainingSpec
    fields of SETUP_SETTINGS; files written before it have none) for every setting not given on
    the command line; a command-line value that differs from the recorded one wins, with a note
    (the prediction assumed the other)."""
    out = {}
    for name in SETUP_SETTINGS:
        if name not in recorded:
            continue
        if ctx.get_parameter_source(name) == ParameterSource.COMMANDLINE:
            if kwargs[name] != recorded[name]:
                click.echo(f"note: {name}={shown(kwargs[name])} instead of the {shown(recorded[name])} {plan} was "
                           "searched with; its predictions assume the latter", err=True)
        else:
            out[name] = recorded[name]
    return out


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
