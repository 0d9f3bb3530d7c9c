"""Trainer memory mechanisms: FP8 recipes and primary weights, bf16 gradient buffers, ZeRO-3 caps."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from autoplan.api import build_context, build_training
from autoplan.cost.memory import layer_activation_bytes
from autoplan.cost.model_states import model_state_bytes, sharded_gradient_transient_bytes, zero3_gathered_bytes
from autoplan.layout import LayoutBatch, resolve_layout
from autoplan.profiles import load_profile
from autoplan.specs.training import TrainingSpecError

SEQ = 4096


def _at(trainer: str = "megatron", precision: str = "fp8", zero: int = 1, **setup):
    training = dataclasses.replace(build_training(8, SEQ, 8), **setup)
    ctx = build_context("llama3-8b", training, trainer=trainer)
    batch = LayoutBatch.from_layouts([resolve_layout({"mbs": 1, "precision": precision, "zero": zero}, training)])
    return ctx, batch


def _dense_layer_bytes(**kw) -> float:
    return float(layer_activation_bytes(*_at(**kw), "none")[0][0])


# --- FP8 activations: Transformer Engine keeps one quantized copy of each linear input -------

# Llama 3 8B linear inputs per token of a layer: ln_out into QKV and into FC1 (2h = 8192), the
# attention output into the projection (q = 4096), the SwiGLU output into FC2 (f = 14336):
# 26,624 elements per token.
LINEAR_INPUTS_PER_TOKEN = 2 * 4096 + 4096 + 14336


@pytest.mark.parametrize("recipe, saved_per_element", [("tensorwise", 1.0), ("blockwise", 1.0 + 4 / 128),
                                                       ("mxfp8", 1.0 + 1 / 32)])
def test_te_fp8_saves_linear_inputs_at_the_recipe_bytes(recipe, saved_per_element):
    # tensorwise: (2 − 1)·26,624·4096 = 109,051,904 bytes less than bf16 for one sequence;
    # blockwise and MXFP8 keep 1/32 byte of scales per element: (31/32) of that.
    saving = _dense_layer_bytes(precision="bf16") - _dense_layer_bytes(fp8_recipe=recipe)
    assert saving == pytest.approx((2.0 - saved_per_element) * LINEAR_INPUTS_PER_TOKEN * SEQ)
    if recipe == "tensorwise":
        assert saving == 109_051_904


def test_torchao_float8_keeps_bf16_inputs():
    """torchtitan's Float8 (torchao) saves the bf16 inputs: fp8 does not change activations."""
    assert _dense_layer_bytes(trainer="torchtitan") == _dense_layer_bytes(trainer="torchtitan", precision="bf16")


# --- FP8 weights -------------------------------------------------------------------------------

def _bytes_per_param(name: str, **kw) -> float:
    ctx, batch = _at(**kw)
    states = model_state_bytes(ctx, batch, np.array([1e9]), np.array([0.0]))
    return float(states[name][0]) / 1e9


@pytest.mark.parametrize("setup, expected", [
    (dict(precision="bf16"), 2.0),                                    # the bf16 compute copy
    (dict(), 4.0),                                                    # + fp8 copy and transpose (2·1)
    (dict(fp8_recipe="mxfp8"), 2.0 + 2 * (1 + 1 / 32)),               # row- and column-wise MXFP8
    (dict(fp8_param_gather=True), 2.0),                               # no bf16 copy: 2·1
    (dict(fp8_param_gather=True, precision="bf16"), 2.0),             # fp8 params only under fp8
])
def test_weight_bytes_per_parameter(setup, expected):
    assert _bytes_per_param("weights", **setup) == pytest.approx(expected)


def test_grad_reduce_in_bf16_halves_megatrons_gradient_buffer():
    assert _bytes_per_param("gradients") == 4.0
    assert _bytes_per_param("gradients", grad_reduce_in_bf16=True) == 2.0


def test_shard_gradients_shards_the_fp32_gradient_buffer_from_zero_1():
    """Llama 3's FSDP-style DP (arXiv 2407.21783 Sec. 3.3.2) shards gradients with the optimizer
    states: 4 bytes over dp = 8 is 0.5 per parameter under zero 1; zero 0 keeps all 4."""
    assert _bytes_per_param("gradients", shard_gradients=True) == 0.5
    assert _bytes_per_param("gradients", shard_gradients=True, zero=0) == 4.0


@pytest.mark.parametrize("zero, setup, expected", [
    (1, dict(shard_gradients=True), 6.0),                           # bf16 gradient + its fp32 reduce copy
    (1, dict(shard_gradients=True, grad_reduce_in_bf16=True), 4.0),  # reduced in bf16: 2 + 2
    (1, dict(), 0.0),                                               # Megatron's buffer: nothing in flight
    (3, dict(shard_gradients=True), 0.0),                           # ZeRO-3 has its own buffers
])
def test_sharded_gradients_hold_one_layer_unsharded_while_reduce_scattering(zero, setup, expected):
    ctx, batch = _at(zero=zero, **setup)
    assert float(sharded_gradient_transient_bytes(ctx, batch, np.array([1e9]))[0]) / 1e9 == expected


def test_training_spec_rejects_unknown_kernels_and_recipes():
    training = build_training(8, SEQ, 8)
    with pytest.raises(TrainingSpecError, match="attention_kernel must be one of flash, eager"):
        dataclasses.replace(training, attention_kernel="sdpa")
    with pytest.raises(TrainingSpecError, match="fp8_recipe must be one of"):
        dataclasses.replace(training, fp8_recipe="delayed-ish")


# --- ZeRO-3 transient memory -----------------------------------------------------------------

def test_deepspeed_caps_gathered_parameters_and_gradient_buckets():
    """A 530B layer (~5e9 parameters): FSDP-style whole-layer gathering holds two layers of bf16
    weights and gradients, 2·(2·5e9)·2 B = 4e10 B (37.3 GiB); DeepSpeed holds at most
    stage3_max_live_parameters (1e9) weights and one reduce bucket (5e8) of gradients:
    2·(1e9 + 5e8) = 3e9 B."""
    layer = np.array([5.0e9])
    assert zero3_gathered_bytes(load_profile("megatron"), layer)[0] == 4.0e10
    assert zero3_gathered_bytes(load_profile("deepspeed"), layer)[0] == 3.0e9
    small = np.array([1.0e8])  # below both caps: two whole layers, 2·(2e8 + 2e8) = 8e8 B
    assert zero3_gathered_bytes(load_profile("deepspeed"), small)[0] == 8.0e8


# --- MoE: routed-token buffers, dispatch copies, capacity factor -------------------------------

def _mixtral(**setup):
    training = dataclasses.replace(build_training(8, SEQ, 8), **setup)
    ctx = build_context("mixtral-8x7b", training)
    batch = LayoutBatch.from_layouts([resolve_layout({"mbs": 1, "ep": 8}, training)])
    return ctx, batch


def test_moe_dispatch_holds_two_copies_of_the_routed_tokens():
    """Mixtral 8x7B, ep 8, one 4096-token sequence: 2 copies · k 2 · 4096 · h 4096 · 2 B
    = 134,217,728 bytes in the communication buffers of every stage with MoE layers."""
    from autoplan.cost.evaluate import evaluate

    table = evaluate(*_mixtral())
    assert table["mem_first_communication_buffers_bytes"][0] == 2 * 2 * SEQ * 4096 * 2 == 134_217_728


def test_capacity_factor_scales_the_routed_token_buffers():
    """Routed terms per token of the megatron profile: (moe_kh 2·k·h + moe_kf 6·k·f_e)
    = 2·2·4096 + 6·2·14336 = 188,416 B; capacity factor 1.25 adds a quarter: 47,104 B per token."""
    dropless = layer_activation_bytes(*_mixtral(), "none")[1][0]
    padded = layer_activation_bytes(*_mixtral(moe_capacity_factor=1.25), "none")[1][0]
    assert padded - dropless == pytest.approx(0.25 * (2 * 2 * 4096 + 6 * 2 * 14336) * SEQ)
    with pytest.raises(TrainingSpecError, match="moe_capacity_factor"):
        _mixtral(moe_capacity_factor=0)
