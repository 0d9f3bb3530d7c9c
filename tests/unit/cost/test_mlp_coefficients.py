"""MLP activation coefficients by activation function: a squared-ReLU MLP saves one f-wide fc1
output where SwiGLU saves both halves (cost/mlp_coefficients.py)."""

from __future__ import annotations

import dataclasses

import pytest

from autoplan.api import build_context, build_training
from autoplan.cost.memory import layer_activation_bytes
from autoplan.cost.mlp_coefficients import GPT_MLP, UNGATED_FC1_SAVING_BYTES, mlp_coefficients
from autoplan.layout import LayoutBatch, resolve_layout

SEQ = 4096


def _layer_bytes(ctx, training, tp: int) -> float:
    batch = LayoutBatch.from_layouts([resolve_layout({"tp": tp, "mbs": 1, "precision": "bf16"}, training)])
    return float(layer_activation_bytes(ctx, batch, "none")[0][0])


@pytest.mark.parametrize("tp", [1, 2, 8])
@pytest.mark.parametrize("trainer", ["megatron", "torchtitan"])
def test_squared_relu_layer_saves_one_bf16_f_tensor_less_than_its_swiglu_twin(tp, trainer):
    training = build_training(8, SEQ, 8)
    relu2 = build_context("nemotron-4-15b", training, trainer=trainer)
    swiglu = dataclasses.replace(relu2, model=dataclasses.replace(relu2.model, activation="swiglu"))
    f = relu2.model.ffn_hidden_size
    difference = _layer_bytes(swiglu, training, tp) - _layer_bytes(relu2, training, tp)
    assert difference == pytest.approx(SEQ * UNGATED_FC1_SAVING_BYTES * f / tp, rel=1e-12)


def test_coefficients_by_activation():
    training = build_training(8, SEQ, 8)
    ctx = build_context("nemotron-3-8b", training)
    assert mlp_coefficients(ctx, "none").f == ctx.profile.activations.mlp["none"].f - UNGATED_FC1_SAVING_BYTES
    gpt = build_context("gpt3-5b", build_training(8, 2048, 8))
    assert mlp_coefficients(gpt, "none") == GPT_MLP["none"]
    llama = build_context("llama3-8b", training)
    assert mlp_coefficients(llama, "selective") == llama.profile.activations.mlp["selective"]
