"""Trainer profiles: what each trainer runs (its capabilities), parsed strictly and enforced by the
rule table on every layout, for every command."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import yaml

from autoplan.api import build_context, build_training
from autoplan.cost.evaluate import evaluate
from autoplan.errors import SpecError
from autoplan.layout import LayoutBatch, resolve_layout
from autoplan.profiles import builtin_trainer_names, list_trainers, load_profile
from autoplan.profiles.profile import _PROFILE_DIR, profile_from_mapping
from autoplan.rules import REASON_CODES, broken_rules


def test_trainers_state_their_fp8_recipes():
    assert load_profile("megatron").capabilities.fp8_recipes == ("tensorwise", "delayed", "blockwise", "mxfp8")
    assert load_profile("torchtitan").capabilities.fp8_recipes == ("tensorwise", "rowwise", "mxfp8")
    # nanotron's and DeepSpeed's configs have no FP8 switch: they train in bf16 only, no recipe
    for trainer in ("nanotron", "deepspeed"):
        assert load_profile(trainer).capabilities.precisions == ("bf16",)
        assert load_profile(trainer).capabilities.fp8_recipes == ()


def _titan() -> dict:
    return yaml.safe_load((_PROFILE_DIR / "torchtitan.yaml").read_text())


@pytest.mark.parametrize("value", [[], ["tensorwise", "fp4"], "rowwise", [{"a": 1}]])
def test_unknown_or_empty_fp8_recipes_are_refused(value):
    data = _titan()
    data["capabilities"] = {**data["capabilities"], "fp8_recipes": value}
    with pytest.raises(SpecError, match="fp8_recipes must be a non-empty list of"):
        profile_from_mapping(data, "x.yaml")


@pytest.mark.parametrize("change, message", [
    ({"precisions": ["bf16"]}, "fp8_recipes must list the FP8 recipes exactly when precisions has fp8"),
    ({"zero_stages": [True]}, "zero_stages must be a non-empty list"),
    ({"pp_schedules": ["1f1b"]}, "pp_schedules must list 'default'"),
    ({"settings": {"grad_reduce_in_bf16": ["yes"]}}, "grad_reduce_in_bf16 must be a non-empty list of False, True"),
    ({"settings": {"grad_reduce_in_fp16": [True]}}, "unknown key 'grad_reduce_in_fp16' "
                                                     r"\(did you mean 'grad_reduce_in_bf16'\?\)"),
    ({"expert_tp": False}, r"unknown key 'expert_tp'"),
])
def test_a_capability_list_outside_its_choices_is_refused(change, message):
    data = _titan()
    data["capabilities"] = {**data["capabilities"], **change}
    with pytest.raises(SpecError, match=message):
        profile_from_mapping(data, "x.yaml")


def test_a_profile_without_capabilities_is_refused():
    data = {k: v for k, v in _titan().items() if k != "capabilities"}
    with pytest.raises(SpecError, match="missing required key.*capabilities"):
        profile_from_mapping(data, "x.yaml")


def _reason(trainer: str, layout: dict, *, hardware: str = "h100-sxm", **settings) -> str:
    training = build_training(8, 4096, 64, hardware=hardware, **settings)
    ctx = build_context("llama3-8b", training, trainer=trainer)
    batch = LayoutBatch.from_layouts([resolve_layout({"tp": 1, "pp": 1, "cp": 1, "mbs": 1, **layout}, training)])
    return REASON_CODES[int(evaluate(ctx, batch)["reason_code"][0])]


def test_a_setup_with_a_recipe_the_trainer_lacks_is_refused_for_its_fp8_layouts_only():
    # Megatron has no rowwise recipe (torchao's); a bf16 layout does not use the recipe
    assert _reason("megatron", {"zero": 1, "precision": "fp8"}, fp8_recipe="rowwise") == "trainer_setting"
    assert _reason("megatron", {"zero": 1, "precision": "bf16"}, fp8_recipe="rowwise") == "ok"
    assert _reason("torchtitan", {"zero": 3, "precision": "fp8"}, fp8_recipe="rowwise") == "ok"


def test_a_trainer_without_fp8_refuses_fp8_layouts():
    """nanotron has no FP8 training: search used to rank its FP8 plans first, export wrote bf16."""
    assert _reason("nanotron", {"zero": 1, "precision": "fp8"}) == "trainer_precision"
    assert _reason("nanotron", {"zero": 1, "precision": "bf16"}) == "ok"


def test_mxfp8_needs_a_blackwell_gpu():
    assert _reason("megatron", {"zero": 1, "precision": "fp8"}, fp8_recipe="mxfp8") == "fp8_recipe_hardware"
    assert _reason("megatron", {"zero": 1, "precision": "fp8"}, fp8_recipe="mxfp8", hardware="b200") == "ok"


@pytest.mark.parametrize("trainer", ["torchtitan", "nanotron", "deepspeed"])
def test_a_setting_the_trainer_cannot_run_is_refused_with_the_values(trainer):
    """torchtitan's export wrote no trace of --grad-reduce-in-bf16 though the cost model charged it."""
    zero = 3 if trainer != "nanotron" else 1
    assert _reason(trainer, {"zero": zero}, grad_reduce_in_bf16=True) == "trainer_setting"
    training = build_training(8, 4096, 64, grad_reduce_in_bf16=True)
    ctx = build_context("llama3-8b", training, trainer=trainer)
    batch = LayoutBatch.from_layouts([resolve_layout({"tp": 1, "pp": 1, "cp": 1, "mbs": 1, "zero": zero}, training)])
    (name, message), = broken_rules(ctx, batch, 0)
    assert name == "trainer_setting" and f"grad_reduce_in_bf16=True, {trainer} runs False" in message


def test_every_setting_is_allowed_at_its_default_by_every_trainer():
    """A trainer's capabilities only ever add values: the defaults run everywhere."""
    training = build_training(8, 4096, 64)
    for trainer in list_trainers():
        caps = load_profile(trainer).capabilities
        from autoplan.specs.training import TRAINER_SETTINGS
        assert all(caps.allows_setting(name, getattr(training, name)) for name in TRAINER_SETTINGS), trainer


def test_a_run_whose_framework_runs_more_is_let_through_by_its_override():
    """NeMo 1's Apex optimizer kept no master copy, which the pinned Megatron-LM cannot."""
    training = build_training(8, 4096, 64, optimizer_state_dtype="bf16", master_weights="none")
    ctx = build_context("llama3-8b", training, trainer="megatron")
    batch = LayoutBatch.from_layouts([resolve_layout({"tp": 1, "pp": 1, "cp": 1, "mbs": 1, "zero": 1}, training)])
    assert REASON_CODES[int(evaluate(ctx, batch)["reason_code"][0])] == "trainer_setting"
    allowed = ctx.profile.with_overrides([("allow_setting", ("master_weights", "none"))])
    assert np.all(evaluate(dataclasses.replace(ctx, profile=allowed), batch)["reason_code"] == 0)


def test_each_builtin_profile_file_is_named_after_its_trainer():
    """--help lists the trainers from the file names (no file read at start-up): so the names
    must be the profiles' own."""
    assert builtin_trainer_names() == list_trainers()
