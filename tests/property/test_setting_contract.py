"""Every setup setting × every exporter: the export writes it, or refuses the plan with the rule.

A setting the cost model charges (bf16 gradients, fp8 primary weights, fp8 or eager attention, the
optimizer's stored dtypes, a MoE capacity factor) must reach the trainer's files, or the plan
must not be exported (nor ranked: the same rule table binds the search). ``WRITTEN`` is how each
exporter spells a setting it runs; a trainer whose capabilities list a value must write it so.
"""

from __future__ import annotations

import dataclasses

import pytest

from autoplan.api import plan_from_record
from autoplan.export import TRAINERS, render
from autoplan.profiles import load_profile
from autoplan.rules import TrainerRuleError
from autoplan.specs.models import load_model
from autoplan.specs.training import TRAINER_SETTINGS

# (setting, value, other settings it needs, layout, model): every non-default value of every
# trainer setting once.
CASES = [
    ("attention_kernel", "eager", {}, {}, "llama3-8b"),
    ("fp8_param_gather", True, {}, {"precision": "fp8"}, "llama3-8b"),
    ("fp8_attention", True, {}, {"precision": "fp8"}, "llama3-8b"),
    ("grad_reduce_in_bf16", True, {}, {}, "llama3-8b"),
    ("shard_gradients", True, {}, {}, "llama3-8b"),
    ("optimizer_state_dtype", "bf16", {"master_weights": "remainders"}, {}, "llama3-8b"),
    ("optimizer_state_dtype", "fp8", {"master_weights": "remainders"}, {}, "llama3-8b"),
    ("master_weights", "fp16", {}, {}, "llama3-8b"),
    ("master_weights", "remainders", {}, {}, "llama3-8b"),
    ("master_weights", "none", {"optimizer_state_dtype": "bf16"}, {}, "llama3-8b"),
    ("moe_capacity_factor", 1.25, {}, {"ep": 8}, "mixtral-8x7b"),
    ("cuda_graphs", "attn", {}, {}, "llama3-8b"),
    ("cuda_graphs", "full_iteration", {}, {}, "llama3-8b"),
    ("cuda_graphs", "moe_router,moe_preprocess", {}, {"ep": 8}, "qwen3-30b-a3b"),
    ("cuda_graphs", "attn,moe_router,moe_preprocess", {}, {"ep": 8}, "qwen3-30b-a3b"),
    ("compile_loss", True, {}, {}, "llama3-8b"),
]
# (trainer, setting, value) -> text the exported files must hold
WRITTEN = {
    ("megatron", "attention_kernel", "eager"): "--attention-backend unfused",
    ("megatron", "fp8_param_gather", True): "--fp8-param-gather",
    ("megatron", "grad_reduce_in_bf16", True): "--grad-reduce-in-bf16",
    ("megatron", "optimizer_state_dtype", "bf16"): "--exp-avg-dtype bf16",
    ("megatron", "optimizer_state_dtype", "fp8"): "--exp-avg-dtype fp8",
    ("megatron", "master_weights", "fp16"): "--main-params-dtype fp16",
    ("megatron", "master_weights", "remainders"): "--use-precision-aware-optimizer",
    ("megatron", "moe_capacity_factor", 1.25): "--moe-expert-capacity-factor 1.25",
    ("megatron", "cuda_graphs", "attn"): "--cuda-graph-impl transformer_engine --cuda-graph-scope attn",
    ("megatron", "cuda_graphs", "full_iteration"): "--cuda-graph-impl local --cuda-graph-scope full_iteration",
    ("deepspeed", "attention_kernel", "eager"): "attn_implementation='eager'",
    ("torchtitan", "compile_loss", True): "compile=CompileConfig(enable=True, components=['model', 'loss'])",
    ("megatron-bridge", "fp8_param_gather", True): "fp8_param_gather: true",   # in mixed_precision
    ("megatron-bridge", "grad_reduce_in_bf16", True): "grad_reduce_in_fp32: false",
    ("megatron-bridge", "fp8_attention", True): "fp8_dot_product_attention: true",
    ("megatron-bridge", "cuda_graphs", "attn"): "model.cuda_graph_impl=transformer_engine 'model.cuda_graph_scope=[attn]'",
    ("megatron-bridge", "cuda_graphs", "full_iteration"):
        "model.cuda_graph_impl=local 'model.cuda_graph_scope=[full_iteration]' model.use_te_rng_tracker=true",
    ("megatron-bridge", "cuda_graphs", "moe_router,moe_preprocess"):
        "model.cuda_graph_impl=transformer_engine 'model.cuda_graph_scope=[moe_router,moe_preprocess]'",
    ("megatron-bridge", "cuda_graphs", "attn,moe_router,moe_preprocess"):
        "model.cuda_graph_impl=transformer_engine 'model.cuda_graph_scope=[attn,moe_router,moe_preprocess]'",
}


def _zero(trainer: str) -> int:
    return {"torchtitan": 3, "deepspeed": 1, "nanotron": 1}.get(trainer, 1)


@pytest.mark.parametrize("trainer", TRAINERS)
@pytest.mark.parametrize(("setting", "value", "needs", "layout", "model"), CASES,
                         ids=[f"{c[0]}={c[1]}" for c in CASES])
def test_a_setting_is_written_or_the_plan_refused(trainer, setting, value, needs, layout, model):
    record = {"gpus": 8, "seq_len": 4096, "gbs_seqs": 64, "zero": _zero(trainer), **layout}
    plan, training = plan_from_record(record, hardware="h100-sxm")
    training = dataclasses.replace(training, **{setting: value, **needs})
    caps = load_profile(trainer).capabilities
    precision_ok = plan.precision in caps.precisions
    runs = precision_ok and caps.allows_setting(setting, value) and all(
        caps.allows_setting(k, v) for k, v in needs.items()) and (trainer != "megatron" or not (
            training.optimizer_state_dtype != "fp32" and training.master_weights == "fp32"))
    if not runs or (layout.get("ep", 1) > 1 and not caps.expert_parallel):
        with pytest.raises(TrainerRuleError) as info:
            render(trainer, load_model(model), plan, training)
        assert {"trainer_setting", "trainer_precision", "trainer_ep"} & {name for name, _ in info.value.broken}
        return
    files = render(trainer, load_model(model), plan, training).files
    text = " ".join(" ".join(files.values()).replace('"', " ").split())
    expected = WRITTEN.get((trainer, setting, value))
    assert expected is not None, f"{trainer} runs {setting}={value} but the test has no spelling for it"
    assert expected in text, (trainer, setting, value)


def test_every_setting_has_a_case():
    assert {c[0] for c in CASES} == set(TRAINER_SETTINGS)
