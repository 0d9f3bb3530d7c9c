"""The FLOP conventions the published TFLOP/s figures are converted with."""

import math
from dataclasses import replace

import pytest

from autoplan.calibration.validation import (
    gpt_model,
    load_megatron_core_h100,
    megatron_flops_per_token,
    playbook_flops_per_token,
)
from autoplan.specs.models import load_model


def test_megatron_count_of_a_gpt_model():
    # Megatron's num_floating_point_operations per token for an MHA GPT with a 4h GELU MLP:
    # 12·L·h²·(1 + 1 + s/h + 4 + V/(2·L·h)) = 72·L·h² + 12·L·h·s + 6·V·h.
    model = gpt_model("g", hidden=2048, layers=24, heads=16, vocab=131072, seq_len=4096, tied=False)
    expected = 72 * 24 * 2048**2 + 12 * 24 * 2048 * 4096 + 6 * 131072 * 2048
    assert megatron_flops_per_token(model, 4096) == pytest.approx(expected, rel=1e-12)


def test_megatron_count_of_a_gated_gqa_model():
    # Llama 3 8B: L=32, h=4096, f=14336, 32 heads, 8 KV heads, V=128256, s=8192:
    # 12·L·h²·[(1 + 8/32 + s/h) + (f/h)·3/2 + V/(2·L·h)].
    model = load_model("llama3-8b")
    h, layers, s = 4096, 32, 8192
    expected = 12 * layers * h * h * ((1 + 8 / 32 + s / h) + 14336 / h * 1.5 + 128256 / (2 * layers * h))
    assert megatron_flops_per_token(model, s) == pytest.approx(expected, rel=1e-12)


def test_playbook_convention_counts_the_input_embedding_as_well():
    # The playbook's 6·N over an untied model counts the input embedding's V·h parameters too:
    # its figure exceeds Megatron's by 6·V·h plus the biases, norms and learned positions.
    model = gpt_model("g", hidden=2048, layers=24, heads=16, vocab=131072, seq_len=4096, tied=False)
    gap = playbook_flops_per_token(model, 4096) - megatron_flops_per_token(model, 4096)
    assert 6 * 131072 * 2048 < gap < 6 * 131072 * 2048 * 1.1


def test_megatron_core_rows_use_megatron_count():
    source = load_megatron_core_h100()
    row = next(r for r in source.rows if r.cell == "1.7B")
    # 408.8 TFLOP/s per GPU (the README table) over the Megatron count of the 1.7B model.
    assert row.tokens_per_s_per_gpu == pytest.approx(408.8e12 / megatron_flops_per_token(row.model, 4096))


def test_moe_models_are_refused():
    model = load_model("mixtral-8x7b")
    with pytest.raises(ValueError, match="dense"):
        megatron_flops_per_token(model, 4096)
    assert math.isfinite(megatron_flops_per_token(replace(model, moe=None), 4096))
