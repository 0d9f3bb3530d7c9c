"""Triton flash attention (llm-foundry's attn_impl triton) at its published speed: the
FlashAttention-2 paper's forward + backward TFLOP/s (Dao 2023, Fig. 4(c, d) A100, Fig. 7(c, d)
H100, the FlashAttention (1.x CUDA) bars, which the Triton kernel's author measured it against; the
bar labels are in autoplan/cost/attention_kernels.py), expected values worked from the
figure's numbers and its benchmark's FLOP count (3.5 · 4·b·s²·h·d/2 for causal forward + backward,
flash-attention benchmarks/benchmark_flash_attention.py ``flops``)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from autoplan.cost.attention_kernels import AttentionKernelError, triton_attention_efficiency
from autoplan.cost.context import CostContext
from autoplan.cost.evaluate import evaluate
from autoplan.cost.time import attention_s
from autoplan.layout import LayoutBatch, resolve_layout
from autoplan.profiles import load_profile
from autoplan.specs.hardware import load_gpu, make_cluster
from autoplan.specs.model import ModelSpec
from autoplan.specs.training import TrainingSpec, TrainingSpecError

# mpt-760m's attention: d_model 1536, 12 heads of 128 (MHA).
MODEL = ModelSpec(name="mpt-760m-like", num_layers=24, hidden_size=1536, ffn_hidden_size=6144,
                  num_attention_heads=12, num_kv_heads=12, head_dim=128, vocab_size=50368)


def ctx_for(gpu: str, seq_len: int, kernel: str, model: ModelSpec = MODEL) -> CostContext:
    profile = load_profile("llmfoundry")
    return CostContext(model=model, training=TrainingSpec(make_cluster(load_gpu(gpu), 8), seq_len, 8,
                                                          attention_kernel=kernel),
                       profile=profile, parameters=profile.parameters_for(gpu))


def test_efficiency_is_the_figures_bar_over_the_gpus_peak():
    # Fig. 4(d), A100, head dim 128, seq 2k: FlashAttention 69 TFLOP/s of 312 (not the
    # FlashAttention Triton bar's 68: that is triton.ops.flash_attention, another kernel)
    assert triton_attention_efficiency("a100-40gb", 128, 2048) == pytest.approx(69 / 312)
    # Fig. 4(c), head dim 64, seq 16k: 97 of 312 (the FlashAttention Triton bar: 80)
    assert triton_attention_efficiency("a100-80gb", 64, 16384) == pytest.approx(97 / 312)
    # Fig. 7(d), H100 SXM5, head dim 128, seq 2k: FlashAttention (the figure has no Triton bar) 108 of 989
    assert triton_attention_efficiency("h100-sxm", 128, 2048) == pytest.approx(108 / 989)


def test_between_the_figures_points_linear_in_log_seq_and_head_dim_held_outside():
    # 2^11.5 keys: halfway between 2k (69) and 4k (76) on Fig. 4(d): 72.5
    assert triton_attention_efficiency("a100-40gb", 128, 2 ** 11.5) == pytest.approx(72.5 / 312)
    # head dim 96 at 2k: halfway between Fig. 4(c)'s 77 and 4(d)'s 69: 73
    assert triton_attention_efficiency("a100-40gb", 96, 2048) == pytest.approx(73 / 312)
    # beyond the figure: 32K keys hold 16K's 83, 256 keys hold 512's 55; head dim 256 holds 128's
    assert triton_attention_efficiency("a100-40gb", 128, 32768) == pytest.approx(83 / 312)
    assert triton_attention_efficiency("a100-40gb", 128, 256) == pytest.approx(55 / 312)
    assert triton_attention_efficiency("a100-40gb", 256, 2048) == pytest.approx(69 / 312)
    # arrays in, arrays out (one per layout)
    np.testing.assert_allclose(triton_attention_efficiency("h100-sxm", 128, np.array([512.0, 16384.0])),
                               np.array([98, 137]) / 989)


def test_a_gpu_without_a_published_figure_is_refused_with_the_measured_ones():
    with pytest.raises(AttentionKernelError, match=r"a100-40gb.*h100-sxm.*got gpu 'b200'"):
        triton_attention_efficiency("b200", 128, 2048)


def test_layer_attention_time_is_the_figures_speed_on_its_flop_count():
    # One layer, one sequence of 4096 tokens, 12 heads of 128, A100: the benchmark's causal forward
    # FLOPs f = 4·1·4096²·12·128/2 = 51,539,607,552; forward + backward time = 3.5·f / 76 TFLOP/s
    # (Fig. 4(d) at 4k) = 2.3735 ms, forward 1/3.5 of it (backward 2.5× forward).
    f = 4 * 4096**2 * 12 * 128 / 2
    ctx = ctx_for("a100-80gb", 4096, "triton")
    batch = LayoutBatch.from_layouts([resolve_layout({"tp": 1, "pp": 1, "mbs": 1}, ctx.training)])
    forward, backward = attention_s(ctx, batch, np.array([4096.0]))
    assert forward[0] + backward[0] == pytest.approx(3.5 * f / 76e12, rel=1e-9)
    assert backward[0] == pytest.approx(2.5 * forward[0], rel=1e-12)


def test_triton_changes_time_not_memory_and_runs_slower_than_flash_at_long_sequences():
    # It saves what flash attention saves (Q, K, V, output, LSE): the same peak memory. At 16K keys
    # the figure's 83 TFLOP/s is 0.27 of the A100's peak, below the flash efficiency the profile
    # holds for flash-attn 2 (0.3177): the step takes longer.
    ctx = ctx_for("a100-40gb", 16384, "flash")
    batch = LayoutBatch.from_layouts([resolve_layout({"tp": 1, "pp": 1, "zero": 3, "mbs": 1}, ctx.training)])
    flash = evaluate(ctx, batch)
    triton = evaluate(ctx_for("a100-40gb", 16384, "triton"), batch)
    assert triton["peak_memory_bytes"][0] == flash["peak_memory_bytes"][0]
    assert triton["step_time_s"][0] > flash["step_time_s"][0]


def test_triton_is_an_attention_kernel_only_llmfoundry_runs():
    assert "triton" in load_profile("llmfoundry").capabilities.settings["attention_kernel"]
    for trainer in ("megatron", "torchtitan", "deepspeed", "hf", "nanotron"):
        assert not load_profile(trainer).capabilities.allows_setting("attention_kernel", "triton"), trainer
    with pytest.raises(TrainingSpecError):
        dataclasses.replace(TrainingSpec(make_cluster(load_gpu("a100-40gb"), 8), 2048, 8), attention_kernel="xformers")
