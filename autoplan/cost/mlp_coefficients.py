"""Activation coefficients of the MLP block by activation function.

The trainer profiles describe a SwiGLU layer (``TrainerProfile.activations.mlp``); GELU models (GPT family,
with dropout) use Korthikanti et al. 2022's coefficients; a squared-ReLU MLP (Nemotron) saves
one f-wide fc1 output where SwiGLU saves two.
"""

from __future__ import annotations

import dataclasses

from autoplan.cost.context import CostContext
from autoplan.profiles import ActivationCoefficients

BF16_BYTES = 2.0

# GPT-style MLP (GELU, LayerNorm, dropout; Korthikanti et al. 2022 eq. 1): 19sbh + LayerNorm
# input 2sbh and CUDA's fp32 LayerNorm statistics (cost.memory, GPT_ATTENTION_EAGER).
GPT_MLP = {
    "none": ActivationCoefficients(h=5, f=4, tok=4),
    "selective": ActivationCoefficients(h=5, f=4, tok=4),
}
# A non-gated MLP outside the GPT family (squared ReLU, Nemotron: megatron/core/transformer/mlp.py
# MLP.forward without gated_linear_unit) saves its fc1 output once (f elements, the activation
# function's input) where a SwiGLU layer saves both halves of fc1's 2f output (gate and up):
# the profile's gated f and moe_kf coefficients less one bf16 copy of an f-wide tensor.
UNGATED_FC1_SAVING_BYTES = BF16_BYTES
# The residual dropout mask GPT_MLP and cost.memory's GPT_ATTENTION_* count in h: one byte per
# hidden element (CUDA's bool mask; Korthikanti et al. 2022 eq. 1).
GPT_DROPOUT_MASK_BYTES = 1.0


def without_dropout_mask(ctx: CostContext, c: ActivationCoefficients) -> ActivationCoefficients:
    """GPT-style block coefficients ``c`` (which count Korthikanti's 1-byte residual dropout mask
    per hidden element) with the trainer's own mask bytes (``gpt_residual_dropout_mask_bytes``)."""
    missing = GPT_DROPOUT_MASK_BYTES - ctx.profile.activations.gpt_residual_dropout_mask_bytes
    return dataclasses.replace(c, h=c.h - missing) if missing else c


def mlp_coefficients(ctx: CostContext, mode: str) -> ActivationCoefficients:
    """MLP-block coefficients for recompute ``mode``: GPT_MLP for GELU models; the profile's
    (written for SwiGLU) for gated models; for squared ReLU the profile's less the gate half of
    fc1's saved output (UNGATED_FC1_SAVING_BYTES per f element)."""
    if ctx.model.activation == "gelu":
        return without_dropout_mask(ctx, GPT_MLP[mode])
    c = ctx.profile.activations.mlp[mode]
    if ctx.model.activation == "relu2":
        return dataclasses.replace(c, f=c.f - UNGATED_FC1_SAVING_BYTES, moe_kf=c.moe_kf - UNGATED_FC1_SAVING_BYTES)
    return c


