"""A profile's physical facts in grouped blocks (profiles/groups.py): the YAML round trip, an
earlier release's flat keys, and the strict checks of each block."""

from __future__ import annotations

import dataclasses

import pytest
import yaml

from autoplan.errors import SpecError
from autoplan.profiles import load_profile
from autoplan.profiles.groups import ActivationCoefficients
from autoplan.profiles.profile import (
    _PROFILE_DIR,
    FLAT_NAMES,
    GROUPS,
    grouped_mapping,
    inherited_mapping,
    profile_from_mapping,
)

# Keys of the megatron profile as an earlier release wrote them, one flat key per group (the
# release's megatron.yaml), with the grouped field each is now.
EARLIER_FLAT_KEYS = {
    "weight_bytes": ("model_states", "weight_bytes", 2),
    "logits_bytes_per_vocab": ("activations", "logits_bytes_per_vocab", 6),
    "selective_recomputes_attention": ("recompute", "selective_recomputes_attention", True),
    "zero3_prefetch_layers": ("zero3", "prefetch_layers", 2),
    "pp_schedule": ("pipeline", "schedule", "1f1b"),
    "dp_bucket_params_per_rank": ("data_parallel", "dp_bucket_params_per_rank", 1.0e6),
    "cp_rotate_method": ("context_parallel", "rotate_method", "ring"),
}


def _mapping(trainer: str) -> dict:
    return yaml.safe_load((_PROFILE_DIR / f"{trainer}.yaml").read_text())


def _flat(data: dict) -> dict:
    """``data`` with every group's block written as an earlier release's top-level keys."""
    back = {grouped: flat for flat, grouped in FLAT_NAMES.items()}
    out = {k: v for k, v in data.items() if k not in GROUPS}
    for group in GROUPS:
        out.update({back[(group, name)]: value for name, value in data.get(group, {}).items()})
    return out


def _records_as_yaml(trainer: str) -> dict:
    """The profile's YAML with each group's block written back from its loaded record."""
    profile, data = load_profile(trainer), _mapping(trainer)
    for group in GROUPS:
        data[group] = dataclasses.asdict(getattr(profile, group))
    return yaml.safe_load(yaml.safe_dump(data, sort_keys=False))


@pytest.mark.parametrize("trainer", ["megatron", "torchtitan", "nanotron", "deepspeed"])
def test_grouped_records_round_trip_through_yaml(trainer):
    profile = load_profile(trainer)
    again = profile_from_mapping(_records_as_yaml(trainer), "x.yaml")
    assert all(getattr(again, g) == getattr(profile, g) for g in GROUPS)
    assert isinstance(again.activations.attention["none"], ActivationCoefficients)


@pytest.mark.parametrize("trainer", ["megatron", "torchtitan", "nanotron", "deepspeed", "hf", "llmfoundry"])
def test_a_flat_profile_of_an_earlier_release_loads_as_the_grouped_one(trainer):
    data = _mapping(trainer)
    flat = profile_from_mapping(_flat(data), "old.yaml")
    assert all(getattr(flat, g) == getattr(load_profile(trainer), g) for g in GROUPS)


def test_each_earlier_flat_key_lands_in_its_group():
    flat = _flat(_mapping("megatron"))
    assert not set(flat) & set(GROUPS) and "zero3_prefetch_layers" in flat
    assert grouped_mapping(flat, "old.yaml")["zero3"]["prefetch_layers"] == 2
    profile = profile_from_mapping(flat, "old.yaml")
    for flat, (group, name, value) in EARLIER_FLAT_KEYS.items():
        assert FLAT_NAMES[flat] == (group, name)
        assert getattr(getattr(profile, group), name) == value, flat


def test_a_flat_child_merges_into_its_grouped_base_key_by_key():
    """A child profile still written flat overrides one field of its base's group, keeping the rest."""
    child = {"inherits": "megatron", "name": "mine", "description": "d", "zero3_prefetch_layers": 1}
    merged = inherited_mapping(child, _mapping("megatron"), "mine.yaml")
    profile = profile_from_mapping(merged, "mine.yaml")
    assert profile.zero3.prefetch_layers == 1
    assert profile.zero3.max_live_params == load_profile("megatron").zero3.max_live_params


def test_a_field_given_flat_and_grouped_is_refused_naming_the_group():
    data = {**_mapping("megatron"), "zero3_prefetch_layers": 1}
    with pytest.raises(SpecError, match=r"zero3_prefetch_layers is given twice.*keep zero3.prefetch_layers"):
        profile_from_mapping(data, "x.yaml")


def test_an_unknown_key_in_a_group_is_refused_with_the_near_miss():
    data = _mapping("megatron")
    data["zero3"] = {**data["zero3"], "prefetch_layer": 1}
    with pytest.raises(SpecError, match=r"x.yaml: zero3: unknown key 'prefetch_layer' \(did you mean 'prefetch_layers'\?\)"):
        profile_from_mapping(data, "x.yaml")


@pytest.mark.parametrize("key, near", [("zero3_prefetch_layer", "zero3.prefetch_layers"),
                                       ("schedule", "pipeline.schedule")])
def test_a_misspelt_or_misplaced_top_level_key_names_its_grouped_field(key, near):
    data = {**_mapping("megatron"), key: 1}
    with pytest.raises(SpecError, match=rf"unknown key '{key}' \(did you mean '{near}'\?\)"):
        profile_from_mapping(data, "x.yaml")


def test_a_required_field_of_a_group_is_required():
    data = _mapping("megatron")
    data["pipeline"] = {k: v for k, v in data["pipeline"].items() if k != "schedule"}
    with pytest.raises(SpecError, match=r"x.yaml: pipeline: missing required key\(s\): schedule"):
        profile_from_mapping(data, "x.yaml")


def test_a_group_of_defaults_may_be_left_out():
    """megatron.yaml has no context_parallel: block; its fields keep their declared defaults."""
    assert "context_parallel" not in _mapping("megatron")
    cp = load_profile("megatron").context_parallel
    assert (cp.rotate_method, cp.kv_repeated, cp.grad_exchange_bytes) == ("ring", False, 2.0)


@pytest.mark.parametrize("group, key, value, message", [
    ("data_parallel", "hybrid_shard_style", "tertiary", "hybrid_shard_style must be one of none, replicate, secondary"),
    ("pipeline", "split_rule", "greedy", "split_rule must be one of layout, compute_cost"),
    ("model_states", "zero_shards_over_cp", "yes", "zero_shards_over_cp must be true or false"),
    ("activations", "attention", {"none": {"h": 4}}, "attention: needs coefficients for 'none' and 'selective'"),
])
def test_a_value_outside_its_field_declaration_is_refused(group, key, value, message):
    data = _mapping("megatron")
    data[group] = {**data.get(group, {}), key: value}
    with pytest.raises(SpecError, match=message):
        profile_from_mapping(data, "x.yaml")


def test_overrides_take_the_flat_names():
    """Validation rows override single fields by their flat names (calibration/*_source.py)."""
    base = load_profile("megatron")
    changed = base.with_overrides([("grad_reduce_bytes", 2), ("zero3_pp_unsharded_bytes", 6),
                                   ("activation_offload", True)])
    assert changed.model_states.grad_reduce_bytes == 2 and changed.zero3.pp_unsharded_bytes == 6
    assert changed.capabilities.activation_offload
    assert changed.model_states.grad_bytes == base.model_states.grad_bytes
    assert changed.zero3.prefetch_layers == base.zero3.prefetch_layers


def test_every_grouped_field_has_one_flat_name():
    fields_count = sum(len(dataclasses.fields(cls)) for cls in GROUPS.values())
    assert len(FLAT_NAMES) == fields_count == len(set(FLAT_NAMES.values()))
