"""``inherits:``: a built-in profile that states only what differs from its base (profile.py)."""

from __future__ import annotations

import dataclasses

import pytest

from autoplan.errors import SpecError
from autoplan.profiles import load_profile
from autoplan.profiles.profile import inherited_mapping
from autoplan.rules import RULES, RuleContext
from autoplan.api import build_training
from autoplan.specs.models import load_model

# What megatron-bridge.yaml itself sets; every other field must be megatron's.
OWN = {"name", "description", "capabilities", "options", "sources", "parameters", "lineage"}


def test_bridge_shares_every_megatron_core_fact():
    bridge, megatron = load_profile("megatron-bridge"), load_profile("megatron")
    differing = {f.name for f in dataclasses.fields(bridge) if getattr(bridge, f.name) != getattr(megatron, f.name)}
    assert differing <= OWN, differing - OWN
    assert bridge.activations.attention == megatron.activations.attention and bridge.data_parallel.dp_bucket_params_per_rank == 1.0e6
    assert bridge.lineage == ("megatron",) and bridge.family == ("megatron-bridge", "megatron")


def test_bridge_overrides_merge_key_by_key():
    bridge, megatron = load_profile("megatron-bridge"), load_profile("megatron")
    assert bridge.options.tp_comm_overlap and not megatron.options.tp_comm_overlap
    assert bridge.options.overlap_grad_reduce == megatron.options.overlap_grad_reduce  # inherited
    assert bridge.capabilities.activation_offload and not megatron.capabilities.activation_offload
    assert bridge.capabilities.zero_stages == megatron.capabilities.zero_stages  # inherited
    assert bridge.capabilities.versions == ("v0.3.1",)  # megatron's later tags are not Bridge's
    assert bridge.sources[: len(megatron.sources)] == megatron.sources


def test_calibrations_are_not_inherited_but_transferred_from_the_base():
    bridge = load_profile("megatron-bridge")
    assert list(bridge.parameters) == ["default"]
    params = bridge.parameters_for("h100-sxm")
    assert params.fitted_on.startswith("transferred from megatron's calibration on h100-sxm")
    fitted = load_profile("megatron").parameters["h100-sxm"]
    assert params.value("gemm_efficiency_max") == fitted.value("gemm_efficiency_max")


def test_rules_bound_to_megatron_bind_its_children():
    training = build_training(64, 8192, 512)
    names = {rule.name for rule in RULES if rule.trainers == ("megatron",)}
    ctx = RuleContext(load_model("llama3-8b"), load_profile("megatron-bridge"), training)
    assert names and all(rule.binds(ctx) for rule in RULES if rule.name in names)


@pytest.mark.parametrize("missing", ["name", "description"])
def test_a_child_names_and_describes_itself(missing):
    child = {"inherits": "megatron", "name": "x", "description": "y"}
    del child[missing]
    with pytest.raises(SpecError, match=missing):
        inherited_mapping(child, {"name": "megatron", "calibrated": {}}, "x.yaml")
