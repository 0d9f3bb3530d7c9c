"""Export a plan as the files a real trainer launches from.

``render(trainer, model, layout, training, launch)`` checks the trainer's rules (the same table
the search uses, :mod:`autoplan.rules`, evaluated on a batch of one) and returns an
:class:`ExportResult`: the files (relative name -> text) and the knobs the trainer cannot express (also written in each file's header comment).
Each renderer is a pure function pinned to a stated trainer version (``VERSIONS``):

* ``megatron``: a bash launch script for Megatron-LM's ``pretrain_gpt.py``;
* ``megatron-bridge``: a recipe override YAML and a launch script for Megatron-Bridge's ``run_recipe.py``;
* ``torchtitan``: the Python config module of torchtitan 0.3.0 and the TOML job of 0.2.2;
* ``nanotron``: the YAML config of ``run_train.py``;
* ``deepspeed``: the DeepSpeed JSON and a launch script (Megatron-DeepSpeed when tp or pp > 1).

``training`` (:class:`~autoplan.specs.training.TrainingSpec`) gives the GPU count, the GPUs per
node (processes per node), the sequence length and the batch; ``launch``
(:class:`LaunchOptions`) the steps, learning rate, tokenizer, data and seed. ``export_plan``
writes the files of one plan record (a row of ``plans.json``) into a folder; file names never
leave that folder.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Iterable, Mapping
from pathlib import Path, PurePosixPath
from typing import Any

from autoplan.errors import AutoplanError
from autoplan.export.common import ExportError, ExportResult, LaunchOptions
from autoplan.export.registry import TRAINERS, VERSIONS, renderer_module
from autoplan.layout import Layout
from autoplan.layout_records import layout_from_record
from autoplan.profiles import TrainerProfile, load_profile
from autoplan.report.destination import OutputError, write_text
from autoplan.rules import RuleContext, TrainerRuleError, check_layout
from autoplan.specs.model import ModelSpec
from autoplan.specs.training import TrainingSpec

__all__ = ["TRAINERS", "VERSIONS", "ExportError", "architecture_problem", "ExportResult", "LaunchOptions", "TrainerRuleError",
           "export_plan", "parse_trainers", "plan_training", "read_plans", "render", "select_plan", "write_files"]



def render(trainer: str, model: ModelSpec, layout: Layout, training: TrainingSpec,
           launch: LaunchOptions | None = None, *, allow_uneven_pp: bool = True,
           profile: TrainerProfile | None = None, trainer_version: str | None = None) -> ExportResult:
    """The files of ``layout`` for ``trainer``; refuses a plan that breaks the trainer's rules.

    The rules are those the search applies (``autoplan.rules``, on a batch of one);
    ``allow_uneven_pp`` is False under --even-stages-only. ``profile`` is the trainer profile the
    plan was priced with (a user's calibrated one, ``--profile``; default the built-in): the
    exporters write the overlap it assumed. ``trainer_version`` is the trainer version to write
    for (default the profile's pinned one; ``TrainerProfile.at_version``): a plan that needs a later
    version is refused with the version that has it. Raises ``TrainerRuleError``.
    """
    names = parse_trainers(trainer)
    if len(names) != 1:
        raise AutoplanError(f"render takes one trainer, got {names}; use export_plan for several")
    trainer = names[0]
    profile = (profile or load_profile(trainer)).at_version(trainer_version)
    if profile.name != trainer:
        raise AutoplanError(f"the profile is {profile.name}'s, not {trainer}'s: export with that trainer's profile")
    check_layout(RuleContext(model, profile, training, allow_uneven_pp=allow_uneven_pp), layout)
    module = importlib.import_module(renderer_module(trainer))
    return module.render(model, layout, training, launch or LaunchOptions(), profile)


def architecture_problem(trainer: str, model: ModelSpec, training: TrainingSpec | None = None) -> str:
    """Why ``trainer``'s model code cannot build ``model`` ('' when it can), in its exporter's own
    words: torchtitan's model flavors, nanotron's LlamaConfig/Qwen2Config, and for these and
    Megatron-LM what ``common.feature_problems`` finds at ``training``'s sequence length.
    DeepSpeed runs the Hugging Face model (its Megatron-DeepSpeed path, tp or pp > 1, is checked
    at export)."""
    from autoplan.export.common import feature_problems

    if trainer == "torchtitan":
        from autoplan.export.torchtitan import model_flavor

        check = model_flavor
    elif trainer == "nanotron":
        from autoplan.export.nanotron import check_architecture

        check = check_architecture
    elif trainer == "deepspeed":
        from autoplan.export.deepspeed import check_architecture

        check = check_architecture
    elif trainer != "megatron":
        return ""
    else:
        check = None
    try:
        if check is not None:
            check(model)
    except ExportError as exc:
        return str(exc)
    if training is None:
        return ""
    from autoplan.export.megatron_model import LOCAL_ATTENTION

    problems = feature_problems(model, training.seq_len, LOCAL_ATTENTION if trainer == "megatron" else ())
    return f"the {trainer} export cannot express {model.name!r}: {'; '.join(problems)}" if problems else ""


def plan_training(layout: Layout, training: TrainingSpec) -> TrainingSpec:
    """``training`` with the global batch ``layout`` reaches (within a tolerance it may differ
    from the target): the batch the trainer is given."""
    return dataclasses.replace(training, gbs_seqs=layout.gbs_seqs, gbs_tolerance=0.0)


def parse_trainers(text: str | Iterable[str]) -> list[str]:
    """'megatron,torchtitan' or a list -> known trainer names (UnknownNameError otherwise)."""
    from autoplan.errors import UnknownNameError

    items = text.split(",") if isinstance(text, str) else list(text)
    names = [item.strip().lower() for item in items if item.strip()]
    if not names:
        raise AutoplanError(f"name at least one trainer to export to: {', '.join(TRAINERS)}")
    for name in names:
        if name not in TRAINERS:
            raise UnknownNameError("export trainer", name, TRAINERS)
    return list(dict.fromkeys(names))


def export_plan(plan_record: Mapping[str, Any], model: ModelSpec | str, trainers: str | Iterable[str],
                out_dir: str | Path, training: TrainingSpec, launch: LaunchOptions | None = None, *,
                allow_uneven_pp: bool = True) -> list[Path]:
    """Write the files of one plan for each trainer into ``out_dir``; returns the paths written.

    ``plan_record`` is a flat record (a row of ``plans.json``); its gpus, seq_len and gbs_seqs
    must agree with ``training`` (see :func:`autoplan.layout_records.layout_from_record`).

    Every trainer is rendered (and its rules checked) before anything is written, so a refused
    plan leaves no partial output.
    """
    if isinstance(model, str):
        from autoplan.specs.models import load_model

        model = load_model(model)
    layout = layout_from_record(plan_record, training)
    training = plan_training(layout, training)
    results = [render(trainer, model, layout, training, launch, allow_uneven_pp=allow_uneven_pp)
               for trainer in parse_trainers(trainers)]
    files: dict[str, str] = {}
    for result in results:
        files.update(result.files)
    return write_files(files, out_dir)


def write_files(files: Mapping[str, str], out_dir: str | Path) -> list[Path]:
    """Write ``files`` under ``out_dir``; a name that is absolute or climbs out with '..' is refused."""
    root = Path(out_dir)
    targets = [(safe_join(root, name), text) for name, text in files.items()]
    written = []
    for path, text in targets:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise OutputError(f"cannot write {path}: {exc.strerror or type(exc).__name__}") from None
        written.append(write_text(path, text, executable=text.startswith("#!")))  # new scripts +x
    return written


def safe_join(root: Path, name: str) -> Path:
    """``root/name``, refusing names that would land outside ``root``."""
    pure = PurePosixPath(str(name).replace("\\", "/"))
    if not name or pure.is_absolute() or ".." in pure.parts or ":" in pure.parts[0]:
        raise ExportError(f"refusing to write {name!r}: output names must stay inside {str(root)!r}")
    path = root / Path(*pure.parts)
    resolved_root = root.resolve()
    if resolved_root != path.resolve() and resolved_root not in path.resolve().parents:
        raise ExportError(f"refusing to write {name!r}: it resolves outside {str(root)!r}")
    return path


def read_plans(path: str | Path) -> dict[str, Any]:
    """A ``plans.json``: an object with ``plans`` (a list of flat records) and optional ``model``,
    ``hardware``, ``trainer``."""
    from autoplan.files import read_user_text
    from autoplan.specs.yaml_io import parse_json

    where = str(path)
    data = parse_json(read_user_text(path), where)
    if not isinstance(data, dict) or not isinstance(data.get("plans"), list):
        raise AutoplanError(f"{where}: expected an object with a 'plans' list (as written by "
                            "`autoplan search --format json` or its plans.json)")
    if not data["plans"] or not all(isinstance(plan, dict) for plan in data["plans"]):
        raise AutoplanError(f"{where}: 'plans' must be a non-empty list of objects")
    return data


def select_plan(plans: list[dict[str, Any]], rank: int, where: str = "plans.json") -> dict[str, Any]:
    """The plan of rank ``rank`` (1 = best): by its ``rank`` field if the records have one."""
    if all("rank" in plan for plan in plans):
        for plan in plans:
            if plan["rank"] == rank:
                return plan
    elif 1 <= rank <= len(plans):
        return plans[rank - 1]
    raise AutoplanError(f"{where}: no plan of rank {rank}; it holds {len(plans)} plan(s)")
