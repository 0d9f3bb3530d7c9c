"""Memory settings read from the trainers' code: nanotron's multi-head attention copies and
torchtitan's reserve, zero by construction."""

from __future__ import annotations

import dataclasses

import numpy as np

from autoplan.api import build_context, build_training
from autoplan.calibration.accuracy import FIT_PLAN
from autoplan.cost.memory import layer_activation_bytes
from autoplan.layout import LayoutBatch, resolve_layout
from autoplan.profiles import load_profile

SEQ = 4096


def _dense_layer_bytes(model: str, trainer: str, tp: int, **profile_changes) -> float:
    training = build_training(8, SEQ, 8)
    ctx = build_context(model, training, trainer=trainer)
    ctx = dataclasses.replace(ctx, profile=ctx.profile.with_overrides(profile_changes.items()))
    batch = LayoutBatch.from_layouts([resolve_layout({"mbs": 1, "tp": tp}, training)])
    return float(layer_activation_bytes(ctx, batch, "none")[0][0])


def test_nanotron_mha_keeps_four_more_bytes_per_kv_element():
    # usp-1b is multi-head (32 KV heads of 64 = kv_size 2048): nanotron's non-GQA branch keeps
    # the whole permuted q|k|v copy and a k|v copy, 4 B per KV element per token beyond the
    # separate copies of the GQA branch, sharded over tp's heads.
    tp = 2
    with_copies = _dense_layer_bytes("usp-1b", "nanotron", tp)
    without = _dense_layer_bytes("usp-1b", "nanotron", tp, mha_kv_copy_bytes=0.0)
    assert with_copies - without == 4 * 2048 / tp * SEQ


def test_grouped_query_models_keep_no_extra_copy():
    # Llama 3 8B has 8 KV heads for 32 query heads: the GQA branch, no whole q|k|v copy.
    assert _dense_layer_bytes("llama3-8b", "nanotron", 1) == _dense_layer_bytes(
        "llama3-8b", "nanotron", 1, mha_kv_copy_bytes=0.0)


def test_torchtitan_reserve_is_zero_by_construction_and_never_fitted():
    # torchtitan logs the allocator's reserved_bytes.all.peak, which leaves out the CUDA context
    # and NCCL buffers: the reserve is a profile default of 0, outside the fit plan.
    profile = load_profile("torchtitan")
    for gpu, params in profile.parameters.items():
        assert params.corrections.memory_reserve_bytes == 0.0, gpu
        assert "memory_reserve_bytes" not in params.fitted, gpu
    assert all("memory_reserve_bytes" not in params for (trainer, _), params in FIT_PLAN.items()
               if trainer == "torchtitan")


# --- nanotron's own pipeline split (src/nanotron/models/base.py, build_model) -----------------

def test_nanotron_cost_split_by_hand():
    # usp-1b: a layer costs 4·32·64·2048 + 3·8192·2048 = 67,108,864, the LM head 131072·2048 =
    # 268,435,456 = 4 layers: 20 layer-costs in all. On pp 2 rank 0 takes blocks until the
    # cumulative cost exceeds 10 layers, i.e. 11 layers; rank 1 the other 5 and the head. On pp 4
    # (threshold 5, 10, 15): 6, 5, 5, and the last rank only the head.
    from autoplan.cost.stages import compute_cost_rank_layers
    from autoplan.specs.models import load_model

    counts = compute_cost_rank_layers(load_model("usp-1b"), np.array([2.0, 4.0]))
    assert counts[:, 0].tolist() == [11, 5, 0, 0]
    assert counts[:, 1].tolist() == [6, 5, 5, 0]


def test_nanotron_cost_split_of_an_moe_model_by_hand():
    # Issue 46: nanotron's own build_model puts [3, 2, ..., 2, 1] Mixtral-8x7B layers on pp 16
    # (Qwen2ForTraining.get_block_compute_costs: an MoE layer weighs as a dense one). By hand: a
    # layer costs 4·32·128·4096 + 3·14336·4096 = 243,269,632, the head 32000·4096 = 131,072,000;
    # per rank (32 layers + head)/16 = 494,737,408: rank 0 passes it with its third layer
    # (729,808,896), every later rank with its second, the last holds one layer and the head.
    from autoplan.cost.stages import compute_cost_rank_layers, trainer_stage_layers
    from autoplan.specs.models import load_model

    model = load_model("mixtral-8x7b")
    assert compute_cost_rank_layers(model, np.array([16.0]))[:, 0].tolist() == [3] + [2] * 14 + [1]
    stages = trainer_stage_layers(model, load_profile("nanotron").pipeline.split_rule, np.array([16.0]))
    assert (stages.first[0], stages.first_moe[0], stages.middle[0], stages.last[0]) == (3, 3, 2, 1)


def test_nanotron_stages_follow_its_split_and_others_the_layout():
    from autoplan.cost.stages import trainer_stage_layers
    from autoplan.specs.models import load_model

    model = load_model("usp-1b")
    nanotron = trainer_stage_layers(model, load_profile("nanotron").pipeline.split_rule, np.array([2.0]))
    megatron = trainer_stage_layers(model, load_profile("megatron").pipeline.split_rule, np.array([2.0]))
    assert (nanotron.first[0], nanotron.last[0]) == (11, 5)
    assert (megatron.first[0], megatron.last[0]) == (8, 8)


# --- nanotron's gradients without DDP (src/nanotron/trainer.py make_ddp; optim/gradient_accumulator.py) --

def _gradient_bytes_per_param(trainer: str, dp: int) -> float:
    from autoplan.cost.model_states import model_state_bytes

    training = build_training(8, SEQ, 8)
    ctx = build_context("usp-1b", training, trainer=trainer)
    batch = LayoutBatch.from_layouts([resolve_layout({"mbs": 1, "dp": dp, "tp": 8 // dp}, training)])
    params = 1.0e9
    terms = model_state_bytes(ctx, batch, np.array([params]), np.array([0.0]))
    return float(terms["gradients"][0]) / params


def test_nanotron_keeps_no_bf16_gradient_without_ddp():
    # Without DDP (dp = 1) only the fp32 accumulator stays: every bf16 .grad is set to None after
    # the micro-batch's backward; with dp > 1 torch DDP's bf16 bucket buffers come on top.
    assert _gradient_bytes_per_param("nanotron", 1) == 4.0
    assert _gradient_bytes_per_param("nanotron", 2) == 6.0


def test_trainers_without_the_setting_keep_their_gradient_buffer_at_dp_1():
    # Megatron's main_grad buffer is allocated whether or not there is data parallelism.
    assert _gradient_bytes_per_param("megatron", 1) == _gradient_bytes_per_param("megatron", 2)


def test_gpt_layers_without_dropout_save_no_residual_masks():
    """GPT-style (GELU) layers save Korthikanti's 34 bytes per token per hidden element with
    dropout (Megatron) and 32 without the two 1-byte residual masks (llm-foundry's MPT, resid_pdrop
    0): flash attention, MHA, f = 4h, so q = kv = h and the per-head log-sum-exp is 4 bytes."""
    from autoplan.calibration.published_runs import _mpt_models, mpt_model

    tokens, h, heads = SEQ, 2048, 16
    model = mpt_model(_mpt_models()["mpt-1b"], SEQ)
    assert (model.hidden_size, model.num_attention_heads, model.ffn_hidden_size) == (h, heads, 4 * h)
    for trainer, per_h in (("megatron", 34), ("llmfoundry", 32)):
        training = build_training(8, SEQ, 8, hardware="a100-40gb")
        ctx = build_context(model, training, trainer=trainer)
        batch = LayoutBatch.from_layouts([resolve_layout({"mbs": 1, "zero": 3 if trainer == "llmfoundry" else 0},
                                                         training)])
        got = float(layer_activation_bytes(ctx, batch, "none")[0][0])
        assert got == tokens * (per_h * h + 4 * heads + 8), trainer  # + LayerNorm statistics, 2 × 4 B


def _layer_bytes(mode: str, tp: int, **profile_changes) -> float:
    training = build_training(8, SEQ, 8)
    ctx = build_context("llama3-8b", training, trainer="torchtitan")
    ctx = dataclasses.replace(ctx, profile=ctx.profile.with_overrides(profile_changes.items()))
    batch = LayoutBatch.from_layouts([resolve_layout({"mbs": 1, "tp": tp, "zero": 3}, training)])
    return float(layer_activation_bytes(ctx, batch, mode)[0][0])


def test_a_fused_rmsnorm_saves_four_bytes_per_hidden_element_per_norm():
    # torchtitan 2024's fused_rmsnorm keeps its bf16 input and rstd, not the eager norm's fp32
    # upcast and bf16 normalised copies: 4 B per hidden element, two norms a layer, sharded by SP.
    h = 4096
    for tp in (1, 2):
        eager, fused = _layer_bytes("none", tp), _layer_bytes("none", tp, norm_saving_bytes_per_h=4.0)
        assert eager - fused == 2 * 4 * h / tp * SEQ
    # torchtitan's selective policy recomputes the norms: nothing of theirs is saved to drop.
    assert _layer_bytes("selective", 1) == _layer_bytes("selective", 1, norm_saving_bytes_per_h=4.0)
