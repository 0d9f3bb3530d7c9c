"""Trainer versions in a profile's capabilities: what each later version adds, and refusals."""

from __future__ import annotations

import pytest

from autoplan.errors import AutoplanError, SpecError
from autoplan.profiles import load_profile
from autoplan.profiles.capabilities import capabilities_from_mapping

BASE = {"zero_stages": [0, 1], "max_zero_with_pp": 1, "virtual_stages": False, "context_parallel": False,
        "expert_parallel": False, "expert_tensor_parallel": False, "precisions": ["bf16"]}


def test_a_later_version_adds_to_the_pinned_lists_in_order():
    caps = capabilities_from_mapping({**BASE, "version": "v1", "later_versions": {
        "v2": {"optimizers": ["muon"]}, "v3": {"optimizers": ["lion"], "context_parallel": True}}}, "t.yaml")
    assert caps.versions == ("v1", "v2", "v3") and caps.optimizers == ("adamw",)
    v2 = caps.at_version("v2")
    assert v2.optimizers == ("adamw", "muon") and not v2.context_parallel and v2.versions == ("v2", "v3")
    v3 = caps.at_version("v3")
    assert v3.optimizers == ("adamw", "muon", "lion") and v3.context_parallel
    assert caps.first_version_with("optimizers", "lion") == "v3" and caps.first_version_with("optimizers", "sgd") == ""
    assert caps.first_version_with("context_parallel", True) == "v3"
    assert caps.at_version(None) is caps and caps.at_version("v1") is caps


@pytest.mark.parametrize(("later", "says"), [
    ({"v2": {"optimizers": ["adamw9"]}}, "optimizers must be a non-empty list"),
    ({"v2": {"context_parallel": False}}, "a later version can only add it"),
    ({"v2": ["muon"]}, "expected a mapping"),
])
def test_bad_later_versions_are_refused(later, says):
    with pytest.raises(SpecError, match=says):
        capabilities_from_mapping({**BASE, "version": "v1", "later_versions": later}, "t.yaml")


def test_later_versions_need_a_named_version():
    with pytest.raises(SpecError, match="under a named version"):
        capabilities_from_mapping({**BASE, "later_versions": {"v2": {"optimizers": ["muon"]}}}, "t.yaml")


def test_megatron_versions_follow_its_arguments_py():
    """--optimizer choices in megatron/training/arguments.py: core_v0.15.3 adam, sgd; core_v0.16.0
    adds muon, dist_muon; core_v0.17.0 adds lion."""
    megatron = load_profile("megatron")
    assert megatron.capabilities.version == "core_v0.15.3"
    assert megatron.capabilities.optimizers == ("adamw", "sgd")
    assert megatron.at_version("core_v0.16.0").capabilities.optimizers == ("adamw", "sgd", "muon")
    assert megatron.at_version("core_v0.17.0").capabilities.optimizers == ("adamw", "sgd", "muon", "lion")
    with pytest.raises(AutoplanError, match="unknown megatron version 'core_v0.14.0'"):
        megatron.at_version("core_v0.14.0")
    with pytest.raises(AutoplanError, match="one nanotron version"):
        load_profile("nanotron").at_version("0.5")
