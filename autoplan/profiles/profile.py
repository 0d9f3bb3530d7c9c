"""Dataclasses and YAML loading for trainer profiles (see ``autoplan/profiles/*.yaml``)."""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from dataclasses import dataclass, field, fields, replace
from functools import lru_cache
from pathlib import Path
from typing import Any, get_type_hints

from autoplan.errors import AutoplanError, SpecError, UnknownNameError, shown
from autoplan.profiles.capabilities import KEYS as CAPABILITY_KEYS
from autoplan.profiles.capabilities import Capabilities, capabilities_from_mapping
from autoplan.profiles.efficiency import CalibratedParameters
from autoplan.profiles.groups import (  # noqa: F401 (ActivationCoefficients: re-exported)
    ActivationCoefficients,
    Activations,
    ContextParallel,
    DataParallel,
    ModelStates,
    Pipeline,
    ProfileGroup,
    Recompute,
    Zero3,
    group_from_mapping,
    is_required,
)
from autoplan.profiles.parameter_files import DEFAULTS_PATH, profile_parameters
from autoplan.profiles.trainer_options import TrainerOptions, options_from_mapping
from autoplan.profiles.transfer import transfer_parameters
from autoplan.specs.yaml_io import check_keys, is_file_stem, read_mapping

_PROFILE_DIR = Path(__file__).resolve().parent


@dataclass(frozen=True)
class TrainerProfile:
    """What one trainer's implementation does; see the YAML of each trainer for sources. The
    physical facts come in groups (``profile.model_states.weight_bytes``), each a block of the
    YAML; ``groups.py`` declares their fields with their sources."""

    name: str
    description: str
    capabilities: Capabilities  # what the trainer can run (allow-lists, profiles/capabilities.py)
    model_states: ModelStates  # bytes per parameter of each model state, their sharding
    activations: Activations  # bytes saved for backward per layer and by the loss
    recompute: Recompute  # what full recompute keeps, what selective recompute runs again
    zero3: Zero3  # what ZeRO-3 holds unsharded
    pipeline: Pipeline  # schedule, stage split, gradient reduction under pp
    data_parallel: DataParallel  # buckets, parameter gathers, hybrid sharding
    context_parallel: ContextParallel  # how K/V move under cp
    sources: tuple[str, ...] = ()
    parameters: dict[str, CalibratedParameters] = field(default_factory=dict)
    # The error band of a user's own calibration, by GPU (the ``band:`` block a ``--profile`` file
    # of ``autoplan calibrate`` holds: calibration.own_band); search.ranking.context_band reads it.
    own_bands: dict[str, dict] = field(default_factory=dict)
    options: TrainerOptions = field(default_factory=TrainerOptions)  # see trainer_options.py
    # The profiles this one inherits from, nearest first (``inherits:``, :func:`inherited_mapping`):
    # rules bound to a base trainer bind it too, and an uncalibrated GPU borrows the base's fits.
    lineage: tuple[str, ...] = ()

    @property
    def family(self) -> tuple[str, ...]:
        """This profile's name and its lineage: the trainer names a rule may bind it by."""
        return (self.name, *self.lineage)

    def parameters_for(self, gpu_name: str) -> CalibratedParameters:
        """The calibrated parameters for ``gpu_name``; for a GPU this trainer was not calibrated
        on, the efficiencies of its nearest calibrated GPU (``transfer.transfer_parameters``)."""
        if gpu_name in self.parameters:
            return self.parameters[gpu_name]
        calibrated = {name: p for name, p in self.parameters.items() if name != "default"}
        borrowed = None if calibrated else other_calibrations(self.name, self.lineage)
        return transfer_parameters(calibrated, gpu_name, self.parameters["default"], borrowed=borrowed)

    def with_parameters(self, gpu_name: str, params: CalibratedParameters) -> TrainerProfile:
        return replace(self, parameters={**self.parameters, gpu_name: params})

    def at_version(self, version: str | None) -> TrainerProfile:
        """This profile with the capabilities of trainer ``version`` (None: the pinned one,
        ``Capabilities.at_version``)."""
        known = self.capabilities.versions
        if version and version not in known:
            raise AutoplanError(f"unknown {self.name} version {shown(version)}; autoplan knows "
                                + (", ".join(known) if known else f"one {self.name} version (unnamed): drop --trainer-version"))
        return replace(self, capabilities=self.capabilities.at_version(version))

    def with_overrides(self, overrides: Iterable[tuple[str, Any]]) -> TrainerProfile:
        """This profile with a measured run's own departures from it: (field, value) pairs of
        the profile (a grouped field by its flat name, ``grad_reduce_bytes`` or
        ``zero3_pp_unsharded_bytes``: :data:`FLAT_NAMES`), of its capabilities
        (``activation_offload``, True), or ("allow_setting", (setting, value)) for a setting value
        the run's framework runs beyond this trainer's."""
        profile_values, grouped, caps = {}, {}, self.capabilities
        for name, value in overrides:
            if name == "allow_setting":
                caps = caps.allowing(*value)
            elif name in CAPABILITY_KEYS:
                caps = replace(caps, **{name: value})
            elif name in FLAT_NAMES:
                group, field_name = FLAT_NAMES[name]
                grouped.setdefault(group, {})[field_name] = value
            else:
                profile_values[name] = value
        for group, values in grouped.items():
            profile_values[group] = replace(getattr(self, group), **values)
        return replace(self, capabilities=caps, **profile_values)


_HINTS = get_type_hints(TrainerProfile)
# The profile's groups (groups.py) by the field, and YAML block, that holds each.
GROUPS: dict[str, type] = {f.name: _HINTS[f.name] for f in fields(TrainerProfile)
                           if isinstance(_HINTS[f.name], type) and issubclass(_HINTS[f.name], ProfileGroup)}
# Each grouped field's flat name (an earlier release's top-level key, still read, and the name
# with_overrides takes) -> (group, field): ``zero3_prefetch_layers`` -> ("zero3", "prefetch_layers").
FLAT_NAMES: dict[str, tuple[str, str]] = {cls.FLAT_PREFIX + f.name: (group, f.name)
                                          for group, cls in GROUPS.items() for f in fields(cls)}
# Top-level YAML keys (the dataclass is the one declaration; own_bands: from a --profile file;
# lineage: from ``inherits:``; parameters: from ``defaults:`` and ``calibrated:``). Required: the
# fields without a default, a group only where one of its own fields is required.
_PROFILE_KEYS = [f.name for f in fields(TrainerProfile) if f.name not in ("own_bands", "lineage", "parameters")]
_REQUIRED_KEYS = [f.name for f in fields(TrainerProfile) if f.name in _PROFILE_KEYS and is_required(f)
                  and (f.name not in GROUPS or any(is_required(g) for g in fields(GROUPS[f.name])))]
_OPTIONAL_KEYS = [k for k in _PROFILE_KEYS if k not in _REQUIRED_KEYS] + ["defaults", "calibrated"]
INHERITS = "inherits"  # a built-in profile's base: its YAML holds only what differs from the base's
_MERGED_BLOCKS = ("capabilities", "options", *GROUPS)  # merged key by key with the base's; other keys replace
_NOT_INHERITED = ("calibrated",)  # fits belong to the trainer measured: a child borrows them only by transfer
assert not set(FLAT_NAMES) & set(_PROFILE_KEYS), "a flat name is also a top-level key"


def grouped_mapping(data: dict, where: str) -> dict:
    """``data`` with each flat key of an earlier release's profile (``weight_bytes: 2``,
    ``zero3_prefetch_layers: 2``) moved into its group's block (``model_states: {weight_bytes: 2}``,
    ``zero3: {prefetch_layers: 2}``; :data:`FLAT_NAMES`); a field given both ways is refused."""
    out = {k: v for k, v in data.items() if k not in FLAT_NAMES}
    for key, value in data.items():
        if key not in FLAT_NAMES:
            continue
        group, name = FLAT_NAMES[key]
        block = out.get(group, {})
        if not isinstance(block, dict):
            raise SpecError(where, f"{group}: expected a mapping of {group} fields, got {shown(block)}")
        if name in block:
            raise SpecError(where, f"{key} is given twice: at the top level (an earlier release's flat "
                                   f"form) and as {group}.{name}; keep {group}.{name}")
        out[group] = {**block, name: value}
    return out


def _refuse_unknown_keys(data: dict, where: str) -> None:
    """An unknown top-level key, with the nearest top-level key or grouped field as the hint
    (``zero3_prefetch_layer`` or ``prefetch_layers``: did you mean 'zero3.prefetch_layers'?)."""
    known = [*_REQUIRED_KEYS, *_OPTIONAL_KEYS]
    for key in data:
        if isinstance(key, str) and key not in known:
            close = difflib.get_close_matches(key, [*known, *FLAT_NAMES], n=1)
            near = [".".join(FLAT_NAMES[c]) if c in FLAT_NAMES else c for c in close]
            raise SpecError(where, f"unknown key {shown(key)}" + (f" (did you mean '{near[0]}'?)" if near else ""))


def inherited_mapping(data: dict, base: dict, where: str) -> dict:
    """A child profile's mapping (``inherits: <base>``) completed from its base's: the child's
    keys replace the base's, but ``capabilities:``, ``options:`` and the groups' blocks
    (``model_states:``, ``pipeline:``, ...) merge key by key (the child states what it runs
    beyond or instead of the base), ``sources`` are the base's then the child's, and the base's
    ``calibrated:`` fits are not carried (the child's GPUs borrow them by transfer,
    ``transfer.transfer_parameters``, saying so). Either may be in the flat form (:func:`grouped_mapping`)."""
    for key in ("name", "description"):
        if key not in data:
            raise SpecError(where, f"{key}: a profile that inherits ({INHERITS}: {base.get('name')}) needs its own {key}")
    data, base = grouped_mapping(data, where), grouped_mapping(base, where)
    out = {k: v for k, v in base.items() if k not in _NOT_INHERITED and k != INHERITS}
    for key, value in data.items():
        if key == INHERITS:
            continue
        if key in _MERGED_BLOCKS and isinstance(value, dict) and isinstance(base.get(key), dict):
            out[key] = {**base[key], **value}
        elif key == "sources":
            out[key] = [*base.get("sources", ()), *value]
        else:
            out[key] = value
    return out


def profile_from_mapping(data: dict, where: str, lineage: tuple[str, ...] = ()) -> TrainerProfile:
    """Build a ``TrainerProfile`` from a parsed YAML mapping, grouped (``model_states:`` ...) or in
    an earlier release's flat form (``lineage``: the profiles it was completed from,
    :func:`inherited_mapping`)."""
    parameters = profile_parameters(data, where)  # first: it names the sections that replace 'efficiency:'
    data = grouped_mapping(data, where)
    _refuse_unknown_keys(data, where)
    check_keys(data, where, required=_REQUIRED_KEYS, optional=_OPTIONAL_KEYS)
    values = {k: v for k, v in data.items() if k not in ("defaults", "calibrated")}
    values["lineage"] = lineage
    values["parameters"] = parameters
    for group, cls in GROUPS.items():
        values[group] = group_from_mapping(cls, data.get(group, {}), f"{where}: {group}")
    values["capabilities"] = capabilities_from_mapping(data["capabilities"], where)
    style = values["data_parallel"].hybrid_shard_style
    if (style == "none") != (not values["capabilities"].hybrid_shard_zero_stages):
        raise SpecError(where, "data_parallel.hybrid_shard_style says how the trainer shards hybrid exactly where its "
                               f"capabilities list hybrid_shard_zero_stages, got {shown(style)} "
                               f"and {list(values['capabilities'].hybrid_shard_zero_stages)}")
    values["sources"] = tuple(data.get("sources", ()))
    values["options"] = options_from_mapping(data.get("options"), where)
    return TrainerProfile(**values)


@lru_cache(maxsize=None)
def _builtin_profiles() -> dict[str, TrainerProfile]:
    profiles = {}
    for path in sorted(p for p in _PROFILE_DIR.glob("*.yaml") if p != DEFAULTS_PATH):
        profile = _profile_file(path)
        profiles[profile.name] = profile
    return profiles


@lru_cache(maxsize=None)
def _profile_file(path: Path) -> TrainerProfile:
    """One built-in profile file, read once (the same object whether looked up alone or listed)."""
    data, lineage = _file_mapping(path, ())
    return profile_from_mapping(data, str(path), lineage)


def _file_mapping(path: Path, seen: tuple[str, ...]) -> tuple[dict, tuple[str, ...]]:
    """A built-in profile file's mapping with its ``inherits:`` chain resolved (the base is the
    file ``<base>.yaml`` beside it), and the base names, nearest first."""
    data = read_mapping(path)
    base_name = data.get(INHERITS)
    if base_name is None:
        return data, ()
    base_path = _PROFILE_DIR / f"{base_name}.yaml"
    if not isinstance(base_name, str) or not is_file_stem(base_name) or not base_path.is_file():
        raise SpecError(str(path), f"{INHERITS}: expected a built-in profile's name, got {shown(base_name)}")
    if base_name in seen or base_path == path:
        raise SpecError(str(path), f"{INHERITS}: a cycle ({' -> '.join((*seen, path.stem, base_name))})")
    base, lineage = _file_mapping(base_path, (*seen, path.stem))
    return inherited_mapping(data, base, str(path)), (str(base.get("name", base_name)), *lineage)


def _own_file_profile(key: str) -> TrainerProfile | None:
    """The built-in profile named ``key`` read from its own file ``<key>.yaml`` alone, the
    others unread (~1 ms each); None where no such file holds a profile of that name."""
    path = _PROFILE_DIR / f"{key}.yaml"
    if not is_file_stem(key) or path == DEFAULTS_PATH or not path.is_file():
        return None
    profile = _profile_file(path)
    return profile if profile.name == key else None


def other_calibrations(trainer: str, lineage: tuple[str, ...] = ()) -> dict[tuple[str, str], CalibratedParameters]:
    """(trainer, GPU) -> calibrated parameters of every built-in trainer but ``trainer``: where a
    trainer calibrated on no GPU starts from (``transfer.transfer_parameters``). A trainer that
    inherits (``lineage``, nearest base first) starts from its nearest calibrated base's only: it
    runs that base's code, so that base's fits are the closest measured ones."""
    profiles = _builtin_profiles()
    for base in lineage:
        own = {(base, gpu): params for gpu, params in profiles[base].parameters.items() if gpu != "default"} \
            if base in profiles else {}
        if own:
            return own
    return {(name, gpu): params for name, profile in profiles.items() if name != trainer
            for gpu, params in profile.parameters.items() if gpu != "default"}


def list_trainers() -> list[str]:
    return sorted(_builtin_profiles())


def builtin_trainer_names() -> list[str]:
    """The built-in trainers' names without reading their files (each file is named after its
    trainer, ``<name>.yaml``: tests/unit/profiles): what ``--help`` lists, at no start-up cost."""
    return sorted(p.stem for p in _PROFILE_DIR.glob("*.yaml") if p != DEFAULTS_PATH)


def load_profile(name: str) -> TrainerProfile:
    """A built-in trainer profile by name (:func:`list_trainers`), or a profile file's own name."""
    key = name.strip().lower()
    own = _own_file_profile(key)
    if own is not None:
        return own
    profiles = _builtin_profiles()
    if key not in profiles:
        raise UnknownNameError("trainer", name, profiles)
    return profiles[key]
