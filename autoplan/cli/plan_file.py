"""One plan of a plans.json as the inputs of `export`, `estimate --plan` and `explain --plan`.

A plan is a layout *for* a model, a cluster, a trainer profile and a setup
(:mod:`autoplan.report.plan_inputs` records them at search time). Every command that reads a
plan takes all of them from the file, and an option given on the command line that differs from
the recorded value wins with a note on stderr saying the prediction assumed the other. The
layout knobs and the batch cannot be given beside a plan: they are the plan.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import click
from click.core import ParameterSource

from autoplan.cli.layout_options import LAYOUT_KEYS
from autoplan.cli.options import SETUP_SETTINGS, training_from_options
from autoplan.errors import AutoplanError, shown


@dataclass(frozen=True)
class PlanInputs:
    """What one plan of a plans.json fixes: the model, layout and setup, the search's prediction
    (``export.common.Prediction``), the trainer it is priced or written for, and the trainer,
    calibrated profile file and trainer version it was searched with (None where the file
    records none)."""

    trainer: str
    model: Any
    layout: Any
    training: Any
    prediction: Any
    searched_trainer: str | None
    profile_path: str | None
    trainer_version: str | None


def plan_options(func):
    """--plan and --rank: price one plan of a plans.json instead of a layout given as options."""
    func = click.option("--rank", "plan_rank", type=click.IntRange(1), default=1, show_default=True,
                        help="Which plan of --plan (1 = best).")(func)
    return click.option("--plan", "plan_path", default=None, type=click.Path(exists=True, dir_okay=False),
                        help="A plans.json of `autoplan search`: its model, cluster, trainer, profile, setup "
                             "and the layout of --rank, instead of --model, --gpus and the layout options "
                             "(an option given beside it that differs wins, with a note).")(func)


def given_on_command_line(ctx: click.Context, name: str) -> bool:
    return ctx.get_parameter_source(name) == ParameterSource.COMMANDLINE


def read_plan(ctx: click.Context, plan: str, rank: int, trainer: str | None, kwargs: dict, *,
              spelled: str = "PLAN") -> PlanInputs:
    """The plan of ``rank`` in the plans.json ``plan``, for ``trainer`` (None: the one it was
    searched for, else ``kwargs["trainer"]``): the setup is the record's
    gpus, seq_len and gbs_seqs on the recorded hardware, the trainer settings the recorded ones
    (each unless given on the command line, ``kwargs``); the prediction is the record's, by the
    profile the plans were searched with. The profile file and trainer version apply only when
    ``trainer`` is the one searched for. ``spelled``: how the command names the plan argument."""
    from autoplan.export import read_plans, select_plan
    from autoplan.export.common import Prediction
    from autoplan.layout_records import layout_from_record, record_setup
    from autoplan.report.plan_inputs import recorded_inputs
    from autoplan.specs.models import load_model

    model_name = kwargs["model_name"]
    given = [name for name in (*LAYOUT_KEYS, "gpus", "seq_len", "gbs_seqs", "gbs_tokens")
             if given_on_command_line(ctx, name)]
    if given:
        flags = ", ".join("--" + name.replace("_", "-") for name in given)
        raise AutoplanError(f"give either {spelled} or the layout options, not both (got {plan} and {flags})")
    data = read_plans(plan)
    recorded, notes = recorded_inputs(data)
    for note in notes:
        click.echo(f"note: {note}", err=True)
    model_ref = model_name or recorded.get("model")
    if not model_ref:
        raise AutoplanError(f"{plan} names no model at top level; give it with --model")
    if model_name and recorded.get("model") and model_name not in (recorded["model"], data.get("model")):
        if load_model(model_name).name != load_model(str(recorded["model"])).name:  # (an alias is fine)
            raise AutoplanError(f"{plan} holds plans for {data.get('model') or recorded['model']}, not "
                                f"{model_name}: its layouts were searched (and fit) for that model; search for "
                                f"{model_name}, or drop --model")
    recorded_cluster(ctx, recorded, kwargs, plan)
    searched = str(data["trainer"]) if data.get("trainer") else None
    trainer = trainer or searched or kwargs["trainer"]
    same_trainer = searched == trainer
    if searched and not same_trainer:
        click.echo(f"note: the plan was searched for trainer {shown(searched)}; its predictions assume "
                   f"that trainer's implementation, not {trainer}'s", err=True)
    record = select_plan(data["plans"], rank, where=plan)
    model = load_model(str(model_ref))
    setup = record_setup(record)
    missing = [name for name in ("gpus", "gbs_seqs") if name not in setup]
    if missing:
        raise AutoplanError(f"{plan}: plan of rank {rank} has no {' or '.join(missing)}")
    settings = plan_settings(ctx, data.get("setup") or {}, kwargs, plan)
    training = training_from_options({**kwargs, **settings}, model.seq_len, gpus=setup["gpus"],
                                     gbs_seqs=setup["gbs_seqs"], seq_len=setup.get("seq_len"), gbs_tokens=None)
    return PlanInputs(
        trainer=trainer, model=model, layout=layout_from_record(record, training), training=training,
        prediction=Prediction.from_record(record, searched or "searched"), searched_trainer=searched,
        profile_path=recorded.get("profile") if same_trainer else None,  # the calibrated profile of the search
        trainer_version=str(data["trainer_version"]) if same_trainer and data.get("trainer_version") else None)


def resolve_trainer_version(given: str | None, recorded: str | None, plan: str) -> str | None:
    """The trainer version to use: --trainer-version, else the one the plan was searched with
    (plans.json ``trainer_version``); a given one that differs overrides it, with a note."""
    if given and recorded and given != recorded:
        click.echo(f"note: --trainer-version {shown(given)} overrides the {shown(recorded)} {plan} was searched "
                   "with; its plans and predictions assume the latter's capabilities", err=True)
    return given or recorded


def recorded_cluster(ctx: click.Context, recorded: dict, kwargs: dict, plan: str) -> None:
    """The hardware, GPUs per node, NIC and FLOPs convention the plans were searched with
    (plans.json ``inputs``) into ``kwargs`` for each option not given on the command line; a given
    one that differs wins, with a note."""
    other_hardware = given_on_command_line(ctx, "hardware") and kwargs["hardware"] != recorded.get("hardware")
    for name in ("hardware", "gpus_per_node", "nic", "flops_convention"):
        key = "nic_bytes_per_s" if name == "nic" else name
        if key not in recorded or (other_hardware and name in ("gpus_per_node", "nic")):
            continue  # (another GPU brings its own node size and NIC unless given)
        value = f"{recorded[key] / 1e9:.17g} GB/s" if name == "nic" else recorded[key]
        if given_on_command_line(ctx, name):
            if str(kwargs[name]) != str(value) and name != "nic":
                click.echo(f"note: --{name.replace('_', '-')} {shown(kwargs[name])} instead of the {shown(value)} "
                           f"{plan} was searched with; its predictions assume the latter", err=True)
        else:
            kwargs[name] = value


def plan_settings(ctx: click.Context, recorded: dict, kwargs: dict, plan: str) -> dict:
    """The trainer settings the plans were searched with (plans.json ``setup``: the TrainingSpec
    fields of SETUP_SETTINGS; files written before it have none) for every setting not given on
    the command line; a command-line value that differs from the recorded one wins, with a note
    (the prediction assumed the other)."""
    out = {}
    for name in SETUP_SETTINGS:
        if name not in recorded:
            continue
        if given_on_command_line(ctx, name):
            if kwargs[name] != recorded[name]:
                click.echo(f"note: {name}={shown(kwargs[name])} instead of the {shown(recorded[name])} {plan} was "
                           "searched with; its predictions assume the latter", err=True)
        else:
            out[name] = recorded[name]
    return out
