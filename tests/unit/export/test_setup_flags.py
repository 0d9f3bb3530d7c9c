"""The Megatron launch script carries the memory settings the prediction assumed (TrainingSpec)."""

from __future__ import annotations

import dataclasses
import shlex

import pytest

from autoplan.api import plan_from_record
from autoplan.export import render
from autoplan.rules import TrainerRuleError
from autoplan.specs.models import load_model


def _words(model: str, record: dict, **setup) -> list[str]:
    layout, training = plan_from_record({"gpus": 8, "seq_len": 4096, "gbs_seqs": 64, **record})
    text = render("megatron", load_model(model), layout, dataclasses.replace(training, **setup)).files[
        "megatron_pretrain_gpt.sh"]
    return shlex.split(text, comments=True)


def test_fp8_recipe_param_gather_and_bf16_gradients_are_written():
    words = _words("llama3-8b", {"precision": "fp8", "zero": 1}, fp8_recipe="blockwise", fp8_param_gather=True,
                   grad_reduce_in_bf16=True)
    assert words[words.index("--fp8-recipe") + 1] == "blockwise"
    assert "--fp8-param-gather" in words and "--grad-reduce-in-bf16" in words


def test_bf16_plan_writes_no_fp8_flags_and_flash_attention_keeps_megatrons_default():
    words = _words("llama3-8b", {})
    assert not {"--fp8-recipe", "--fp8-param-gather", "--grad-reduce-in-bf16", "--attention-backend"} & set(words)


def test_eager_attention_and_capacity_factor():
    words = _words("mixtral-8x7b", {"ep": 8}, attention_kernel="eager", moe_capacity_factor=1.25)
    assert words[words.index("--attention-backend") + 1] == "unfused"
    assert words[words.index("--moe-expert-capacity-factor") + 1] == "1.25"
    assert "--moe-pad-expert-input-to-capacity" in words


def test_sharded_gradients_are_refused_by_megatron():
    """Megatron has no option that shards its gradient buffer under zero 1: the plan is refused
    (it was written with a warning, a script that needs more memory than predicted)."""
    layout, training = plan_from_record({"gpus": 8, "seq_len": 4096, "gbs_seqs": 64, "zero": 1})
    render("megatron", load_model("llama3-8b"), layout, training)
    with pytest.raises(TrainerRuleError, match="shard_gradients=True, megatron runs False"):
        render("megatron", load_model("llama3-8b"), layout, dataclasses.replace(training, shard_gradients=True))


def test_cuda_graph_flags_follow_megatrons_arguments():
    """core_v0.15.3 arguments.py: TE graphs of the attention; the full-iteration graph with the local
    implementation and the NaN check off (an assert there); none writes nothing (its default)."""
    attn = _words("llama3-8b", {}, cuda_graphs="attn")
    assert attn[attn.index("--cuda-graph-impl") + 1] == "transformer_engine"
    assert attn[attn.index("--cuda-graph-scope") + 1] == "attn" and "--no-check-for-nan-in-loss-and-grad" not in attn
    full = _words("llama3-8b", {}, cuda_graphs="full_iteration")
    assert full[full.index("--cuda-graph-impl") + 1] == "local"
    assert full[full.index("--cuda-graph-scope") + 1] == "full_iteration"
    assert "--no-check-for-nan-in-loss-and-grad" in full
    assert not {"--cuda-graph-impl", "--cuda-graph-scope"} & set(_words("llama3-8b", {}))


def test_megatron_refuses_the_moe_graph_scopes_of_core_v0_16():
    layout, training = plan_from_record({"gpus": 8, "seq_len": 4096, "gbs_seqs": 64, "ep": 8})
    with pytest.raises(TrainerRuleError, match="cuda_graphs=moe_router,moe_preprocess, megatron runs none or attn"):
        render("megatron", load_model("qwen3-30b-a3b"), layout,
               dataclasses.replace(training, cuda_graphs="moe_router,moe_preprocess"))


def _titan(recipe: str, hardware: str = "h100-sxm") -> dict[str, str]:
    layout, training = plan_from_record({"gpus": 8, "seq_len": 4096, "gbs_seqs": 64, "precision": "fp8", "zero": 3},
                                        hardware=hardware)
    return render("torchtitan", load_model("llama3-8b"), layout, dataclasses.replace(training, fp8_recipe=recipe)).files


def test_torchtitan_writes_the_fp8_recipe_that_was_costed():
    # 0.2.2's TOML takes tensorwise and rowwise; 0.3.0's Float8LinearConverter rowwise only
    rowwise, tensorwise = _titan("rowwise"), _titan("tensorwise")
    assert 'recipe_name = "rowwise"' in rowwise["torchtitan_job.toml"]
    assert "recipe_name='rowwise'" in rowwise["torchtitan_autoplan.py"]
    assert "fp8_recipe=tensorwise" not in rowwise["torchtitan_autoplan.py"]
    assert 'recipe_name = "tensorwise"' in tensorwise["torchtitan_job.toml"]
    assert "# WARNING: fp8_recipe=tensorwise: torchtitan 0.3.0's Float8LinearConverter has no tensorwise" in \
        tensorwise["torchtitan_autoplan.py"]


def test_torchtitan_runs_mxfp8_through_its_mx_converters():
    files = _titan("mxfp8", "b200")
    assert 'converters = ["quantize.linear.mx"]' in files["torchtitan_job.toml"]
    assert 'recipe_name = "mxfp8_cublas"' in files["torchtitan_job.toml"]
    assert "MXFP8LinearConverter.Config(model_compile_enabled=True, fqns=['layers'])" in files["torchtitan_autoplan.py"]
    assert "from torchtitan.components.quantization import MXFP8LinearConverter" in files["torchtitan_autoplan.py"]


def test_torchtitan_refuses_a_recipe_it_has_not():
    with pytest.raises(TrainerRuleError, match="fp8_recipe=blockwise, torchtitan runs tensorwise or rowwise or mxfp8"):
        _titan("blockwise")


def test_mxfp8_is_refused_on_a_gpu_without_mx_tensor_cores():
    with pytest.raises(TrainerRuleError, match="mxfp8 needs blackwell"):
        _titan("mxfp8")


def test_precision_aware_optimizer_flags_are_written_once():
    """bf16 moments with int16 master remainders: Megatron's precision-aware optimizer, the flag
    once even where optimizer offload also needs it."""
    words = _words("llama3-8b", {"zero": 1}, optimizer_state_dtype="bf16", master_weights="remainders")
    assert words[words.index("--exp-avg-dtype") + 1] == "bf16"
    assert words[words.index("--exp-avg-sq-dtype") + 1] == "bf16"
    assert words.count("--use-precision-aware-optimizer") == 1 and "--main-params-dtype" not in words
    offloaded = _words("llama3-8b", {"zero": 1, "offload": "optimizer"}, master_weights="fp16")
    assert offloaded.count("--use-precision-aware-optimizer") == 1
    assert offloaded[offloaded.index("--main-params-dtype") + 1] == "fp16"
    assert "--use-precision-aware-optimizer" not in _words("llama3-8b", {"zero": 1})


@pytest.mark.parametrize("trainer, setup, message", [
    ("megatron", {"master_weights": "none", "optimizer_state_dtype": "bf16"},
     "master_weights=none, megatron runs fp32 or fp16 or remainders"),
    ("megatron", {"optimizer_state_dtype": "bf16"}, "keeps fp32 master weights as int16 remainders"),
    ("torchtitan", {"master_weights": "remainders"}, "master_weights=remainders, torchtitan runs fp32"),
    ("nanotron", {"optimizer_state_dtype": "bf16", "master_weights": "none"}, "optimizer_state_dtype=bf16, nanotron runs fp32"),
    ("deepspeed", {"optimizer_state_dtype": "fp16", "master_weights": "fp16"}, "master_weights=fp16, deepspeed runs fp32")])
def test_optimizer_dtypes_a_trainer_cannot_store_are_refused(trainer, setup, message):
    zero = 3 if trainer == "torchtitan" else 1  # torchtitan runs zero 0 or 3
    layout, training = plan_from_record({"gpus": 8, "seq_len": 4096, "gbs_seqs": 64, "zero": zero})
    with pytest.raises(TrainerRuleError, match=message):
        render(trainer, load_model("llama3-8b"), layout, dataclasses.replace(training, **setup))
