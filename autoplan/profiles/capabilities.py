"""What a trainer can run, as allow-lists: the ``capabilities:`` block of its profile YAML.

Each trainer profile lists what it can run (ZeRO stages, virtual stages, context, expert and
expert-tensor parallelism, precisions, FP8 scaling recipes, activation offload) and, under
``settings:``, the values of each setup setting (``specs.training.TRAINER_SETTINGS``) it can run.
A setting the block does not name is allowed at its default only, so a new trainer inherits
nothing it was not said to run (STYLE.md, "capabilities are allow-lists"). The rule table
(``autoplan.rules.capabilities``) is the one place that enforces these facts, for search,
estimate, compare, capacity and export alike; each YAML cites the trainer source of its entries.

``version`` names the trainer version the lists describe (the one autoplan pins) and
``later_versions`` what each newer version adds, in order (Megatron-LM core_v0.16.0 adds Muon):
:meth:`Capabilities.at_version` gives the lists of a later version, and
:meth:`Capabilities.first_version_with` the version a refused value needs.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Any

from autoplan.errors import AutoplanError, SpecError, shown
from autoplan.layout import OFFLOADS, OPTIMIZERS, PP_SCHEDULES, PP_SPLITS, PRECISIONS
from autoplan.specs.training import FP8_RECIPES, TRAINER_SETTINGS, setting_choice, setting_choices
from autoplan.specs.yaml_io import check_keys


@dataclass(frozen=True)
class Capabilities:
    """What one trainer can run; every field is an allow-list or a yes/no fact."""

    zero_stages: tuple[int, ...]
    max_zero_with_pp: int  # the highest ZeRO stage the trainer runs with pp > 1
    virtual_stages: bool  # interleaved pipeline stages (vpp > 1)
    context_parallel: bool  # cp > 1
    expert_parallel: bool  # ep > 1
    expert_tensor_parallel: bool  # etp > 1
    precisions: tuple[str, ...] = ("bf16",)  # layout precisions (layout.PRECISIONS)
    fp8_recipes: tuple[str, ...] = ()  # FP8 scaling recipes (specs.training.FP8_RECIPES)
    activation_offload: bool = False  # activations of N layers to the host (offload_layers)
    partial_recompute: bool = False  # full recompute of N layers (recompute_layers), chosen modules
    pp_schedules: tuple[str, ...] = ("default",)  # layout.PP_SCHEDULES ('default': its own)
    pp_splits: tuple[str, ...] = ("balanced",)  # layout.PP_SPLITS
    optimizers: tuple[str, ...] = ("adamw",)  # layout.OPTIMIZERS
    state_offloads: tuple[str, ...] = ("none",)  # layout.OFFLOADS
    cpu_optimizers: tuple[str, ...] = ()  # the optimizers its offloaded (host) step runs
    hybrid_shard_zero_stages: tuple[int, ...] = ()  # the ZeRO stages it shards hybrid at (hsdp)
    # Unequal pipeline stages (layers not divisible by pp·vpp): up to this many virtual stages
    # per rank (0: none; inf: any), autoplan.rules.stages.
    uneven_stages_max_vpp: float = 0.0
    # setting -> the values it may take (as specs.training.setting_choice spells them); a
    # setting not named runs at its default only.
    settings: dict[str, tuple[Any, ...]] = field(default_factory=dict)
    version: str = ""  # the trainer version these lists describe ('' : one unnamed version)
    # (version, {list field: values it adds, or bool field: True}) for each newer version, oldest first
    later_versions: tuple[tuple[str, dict[str, Any]], ...] = ()

    @property
    def versions(self) -> tuple[str, ...]:
        """The versions these capabilities know, the described (pinned) one first."""
        return (self.version, *(name for name, _ in self.later_versions)) if self.version else ()

    def at_version(self, version: str | None) -> Capabilities:
        """The capabilities of ``version`` (None or the pinned one: these): each later version's
        additions up to it merged in, the versions after it still later; an unknown version is an
        error naming the known ones."""
        if not version or version == self.version:
            return self
        if version not in self.versions[1:]:
            known = ", ".join(self.versions) or "none named"
            raise AutoplanError(f"unknown trainer version {shown(version)}; the capabilities know {known}")
        merged, names = {}, [name for name, _ in self.later_versions]
        reached = names.index(version) + 1
        for _, added in self.later_versions[:reached]:
            for key, values in added.items():
                merged[key] = True if values is True else (*merged.get(key, getattr(self, key)), *values)
        return replace(self, version=version, later_versions=self.later_versions[reached:], **merged)

    def first_version_with(self, key: str, value: Any) -> str:
        """The first later version whose additions to ``key`` hold ``value`` (True for a yes/no
        field), '' when none does."""
        for name, added in self.later_versions:
            values = added.get(key, ())
            if values is True and value is True or values is not True and value in values:
                return name
        return ""

    def allows_setting(self, name: str, value: Any) -> bool:
        """Whether the trainer runs setup setting ``name`` at ``value`` (its default always)."""
        choice = setting_choice(name, value)
        return choice == setting_choice(name, TRAINER_SETTINGS[name]) or choice in self.settings.get(name, ())

    def allowing(self, name: str, value: Any) -> Capabilities:
        """These capabilities with ``value`` of setting ``name`` allowed too (a measured run's
        framework that runs more than the profile's trainer version, e.g. NeMo 1's Apex optimizer)."""
        choices = self.settings.get(name, ())
        return replace(self, settings={**self.settings, name: (*choices, setting_choice(name, value))})


_BOOL_KEYS = ("virtual_stages", "context_parallel", "expert_parallel", "expert_tensor_parallel", "activation_offload",
              "partial_recompute")
# list key -> (its choices, the value always allowed: the trainer's own or nothing)
_LISTS = {"pp_schedules": (PP_SCHEDULES, "default"), "pp_splits": (PP_SPLITS, "balanced"),
          "optimizers": (OPTIMIZERS, None), "state_offloads": (OFFLOADS, "none"),
          "cpu_optimizers": (OPTIMIZERS, None), "hybrid_shard_zero_stages": ((1, 2, 3), None)}
_REQUIRED = ("zero_stages", "max_zero_with_pp", "virtual_stages", "context_parallel", "expert_parallel",
             "expert_tensor_parallel", "precisions")
KEYS = tuple(f.name for f in fields(Capabilities))


def capabilities_from_mapping(data: Any, where: str) -> Capabilities:
    """The ``capabilities:`` block of a profile YAML, every list checked against its choices."""
    where = f"{where}: capabilities"
    if not isinstance(data, dict):
        raise SpecError(where, f"expected a mapping, got {shown(data)}")
    check_keys(data, where, required=_REQUIRED, optional=[k for k in KEYS if k not in _REQUIRED])
    for key in _BOOL_KEYS:
        if key in data and not isinstance(data[key], bool):
            raise SpecError(where, f"{key} must be true or false, got {shown(data[key])}")
    zero = _choices(data, "zero_stages", (0, 1, 2, 3), where)
    precisions = _choices(data, "precisions", PRECISIONS, where)
    recipes = _choices(data, "fp8_recipes", FP8_RECIPES, where) if "fp8_recipes" in data else ()
    if ("fp8" in precisions) != bool(recipes):
        raise SpecError(where, "fp8_recipes must list the FP8 recipes exactly when precisions has fp8, got "
                               f"precisions {list(precisions)}, fp8_recipes {list(recipes)}")
    settings = data.get("settings") or {}
    if not isinstance(settings, dict):
        raise SpecError(where, f"settings must be a mapping of setting -> allowed values, got {shown(settings)}")
    check_keys(settings, f"{where}.settings", required=[], optional=list(TRAINER_SETTINGS))
    allowed = {name: _choices(settings, name, setting_choices(name), f"{where}.settings") for name in settings}
    lists = {key: _choices(data, key, choices, where) for key, (choices, _) in _LISTS.items() if key in data}
    for key, (_, always) in _LISTS.items():
        if always is not None and always not in lists.get(key, (always,)):
            raise SpecError(where, f"{key} must list {always!r}, got {list(lists[key])}")
    uneven = data.get("uneven_stages_max_vpp", 0)
    if isinstance(uneven, bool) or not isinstance(uneven, (int, float)) or uneven < 0 or uneven != uneven:
        raise SpecError(where, f"uneven_stages_max_vpp must be a number of virtual stages >= 0 (.inf: any), "
                               f"got {shown(uneven)}")
    max_zero = data["max_zero_with_pp"]
    if isinstance(max_zero, bool) or not isinstance(max_zero, int) or not 0 <= max_zero <= 3:
        raise SpecError(where, f"max_zero_with_pp must be a ZeRO stage 0..3, got {shown(max_zero)}")
    version = data.get("version", "")
    if not isinstance(version, str):
        raise SpecError(where, f"version must be the trainer version's name (text), got {shown(version)}")
    return Capabilities(zero_stages=zero, max_zero_with_pp=max_zero, precisions=precisions, fp8_recipes=recipes,
                        settings=allowed, uneven_stages_max_vpp=float(uneven), **lists,
                        **{k: data.get(k, False) for k in _BOOL_KEYS}, version=version,
                        later_versions=_later_versions(data.get("later_versions"), bool(version), where))


def _later_versions(data: Any, named: bool, where: str) -> tuple[tuple[str, dict[str, Any]], ...]:
    """``later_versions:`` (version -> {list field: added values, or yes/no field: true}), in the
    YAML's order; it needs the pinned ``version`` named."""
    if data is None:
        return ()
    if not isinstance(data, dict) or not named:
        raise SpecError(where, "later_versions must be a mapping of version -> what it adds, under a named "
                               f"version, got {shown(data)}")
    out = []
    for name, added in data.items():
        here = f"{where}.later_versions.{name}"
        if not isinstance(added, dict):
            raise SpecError(here, f"expected a mapping of capability -> what it adds, got {shown(added)}")
        check_keys(added, here, required=[], optional=[*_LISTS, *_BOOL_KEYS])
        for key in _BOOL_KEYS:
            if key in added and added[key] is not True:
                raise SpecError(here, f"{key}: a later version can only add it (true), got {shown(added[key])}")
        values = {key: _choices(added, key, _LISTS[key][0], here) for key in added if key in _LISTS}
        out.append((str(name), {**values, **{key: True for key in added if key in _BOOL_KEYS}}))
    return tuple(out)


def _choices(data: dict, key: str, allowed: tuple, where: str) -> tuple:
    values = data[key]
    if not isinstance(values, list) or not values or any(v not in allowed or isinstance(v, bool) != isinstance(
            allowed[0], bool) for v in values):
        raise SpecError(where, f"{key} must be a non-empty list of {', '.join(map(str, allowed))}, got {shown(values)}")
    return tuple(values)
