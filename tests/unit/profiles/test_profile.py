"""Trainer profiles: the FP8 recipes each trainer runs, parsed strictly and enforced on the setup."""

from __future__ import annotations

import dataclasses

import pytest
import yaml

from autoplan.api import build_context, build_training
from autoplan.errors import SpecError
from autoplan.profiles import load_profile
from autoplan.profiles.profile import _PROFILE_DIR, profile_from_mapping
from autoplan.specs.training import FP8_RECIPES


def test_trainers_state_their_fp8_recipes():
    assert load_profile("megatron").fp8_recipes == ("tensorwise", "delayed", "blockwise", "mxfp8")
    assert load_profile("torchtitan").fp8_recipes == ("tensorwise", "rowwise", "mxfp8")
    assert load_profile("nanotron").fp8_recipes == FP8_RECIPES  # not stated: every recipe


@pytest.mark.parametrize("value", [[], ["tensorwise", "fp4"], "rowwise", [{"a": 1}]])
def test_unknown_or_empty_fp8_recipes_are_refused(value):
    data = yaml.safe_load((_PROFILE_DIR / "torchtitan.yaml").read_text())
    with pytest.raises(SpecError, match="fp8_recipes must be a non-empty list of"):
        profile_from_mapping({**data, "fp8_recipes": value}, "x.yaml")


def test_a_setup_with_a_recipe_the_trainer_lacks_is_refused():
    training = build_training(8, 4096, 64)
    build_context("llama3-8b", dataclasses.replace(training, fp8_recipe="rowwise"), trainer="torchtitan")
    with pytest.raises(SpecError, match="trainer megatron: runs the FP8 recipes tensorwise, delayed, blockwise, "
                                        "mxfp8, not rowwise"):
        build_context("llama3-8b", dataclasses.replace(training, fp8_recipe="rowwise"), trainer="megatron")
