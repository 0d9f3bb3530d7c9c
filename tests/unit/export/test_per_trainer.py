"""best_plans: for each trainer, the best plan that trainer can run, with its own predictions."""

from __future__ import annotations

import dataclasses
import functools

from autoplan.api import build_context, build_training
from autoplan.export.per_trainer import best_plans
from autoplan.layout_records import layout_from_record
from autoplan.profiles import load_profile
from autoplan.rules import RuleContext, check_layout
from autoplan.search import search
from autoplan.space import load_space


@functools.cache
def _search(model: str, gpus: int, gbs_seqs: int, seq_len: int = 4096):
    training = build_training(gpus, seq_len, gbs_seqs)
    space = load_space("default").with_overrides(tp=[1, 2], pp=[1, 2], cp=[1])  # small: a fast test
    return search(build_context(model, training, trainer="megatron"), space)


def test_each_trainer_gets_a_plan_it_can_run_labelled_with_its_own_prediction():
    result = _search("llama3-8b", 32, 128)
    plans = best_plans(result, ["megatron", "nanotron", "torchtitan", "deepspeed"])
    assert [plan.trainer for plan in plans] == ["megatron", "nanotron", "torchtitan", "deepspeed"]
    for plan in plans:
        assert plan.exported, plan.reason
        layout = layout_from_record(plan.record, result.training)
        check_layout(RuleContext(result.ctx.model, load_profile(plan.trainer), result.training), layout)
        assert plan.prediction.profile == plan.trainer
        headers = [text for name, text in plan.result.files.items() if not name.endswith(".json")]
        assert all("# Predicted: peak memory" in text for text in headers)
    # the searched trainer's plan is the search's own best plan, with its figures
    top = result.top_records(1)[0]
    assert plans[0].rank == 1 and plans[0].prediction.step_time_s == top["step_time_s"]
    assert plans[1].record["zero"] in (0, 1)  # nanotron has no ZeRO-3


def test_a_trainer_that_cannot_build_the_model_gets_one_line():
    result = _search("gpt3-175b", 256, 256, seq_len=2048)
    megatron, titan = best_plans(result, ["megatron", "torchtitan"])
    assert megatron.exported
    assert not titan.exported and "cannot build this model" in titan.reason and "\n" not in titan.reason
    assert titan.summary().startswith("torchtitan: no plan to export: ")


def test_a_trainer_without_the_setups_fp8_recipe_gets_one_line():
    training = dataclasses.replace(build_training(32, 4096, 128), fp8_recipe="blockwise")
    space = load_space("default").with_overrides(tp=[1, 2], pp=[1, 2], cp=[1], precision=["fp8"])
    result = search(build_context("llama3-8b", training, trainer="megatron"), space)
    megatron, titan = best_plans(result, ["megatron", "torchtitan"])
    assert megatron.exported
    assert titan.summary().startswith("torchtitan: no plan to export: ")
    assert "fp8_recipe=blockwise, torchtitan runs tensorwise or rowwise or mxfp8" in titan.summary()
