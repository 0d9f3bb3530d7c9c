"""FP8 speed-up per GPU and recipe, MoE dispatch volumes and TP rings (arithmetic in comments)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from autoplan.api import build_context, build_training
from autoplan.cost import fp8, moe_time
from autoplan.cost.comm import GroupLink, group_link
from autoplan.cost.tp_comm import tp_collective_s
from autoplan.layout import LayoutBatch, resolve_layout
from autoplan.profiles.trainer_options import TrainerOptions


def ctx_on(hardware: str, recipe: str = "tensorwise", model: str = "llama3-8b", gpus: int = 8):
    trainer = "torchtitan" if recipe == "rowwise" else "megatron"  # the trainers that run the recipe
    return build_context(model, build_training(gpus, 4096, gpus, hardware=hardware, fp8_recipe=recipe), trainer=trainer)


def speedup(hardware: str, recipe: str) -> float:
    ctx = ctx_on(hardware, recipe)
    batch = LayoutBatch.from_layouts([resolve_layout({"precision": "fp8"}, ctx.training)])
    return float(fp8.matmul_speedup(ctx, batch)[0]), ctx.efficiency.fp8_gemm_speedup


@pytest.mark.parametrize("hardware, recipe, share", [
    ("h100-sxm", "tensorwise", 1.0), ("h100-sxm", "delayed", 1.0), ("h100-sxm", "blockwise", 0.70),
    ("h100-sxm", "mxfp8", 0.0), ("b200", "mxfp8", 1.0), ("b200", "blockwise", 1.0),
    ("h100-sxm", "rowwise", 0.81), ("b200", "rowwise", 0.81)])
def test_fp8_gain_scales_with_the_peak_ratio_and_the_recipe(hardware, recipe, share):
    # S = 1 + (S_ref − 1)·(peak_fp8/peak_bf16 − 1)·share; H100 1979/989, B200 4500/2250 = 2
    ratios = {"h100-sxm": 1979 / 989, "b200": 4500 / 2250}
    got, reference = speedup(hardware, recipe)
    assert got == pytest.approx(1 + (reference - 1) * (ratios[hardware] - 1) * share, rel=1e-12)


def test_no_fp8_gain_without_fp8_tensor_cores():
    # A100: peak_fp8 0 -> ratio 0 -> no gain (and never a slow-down from the speed-up itself)
    assert speedup("a100-80gb", "tensorwise")[0] == 1.0


def test_bf16_layouts_pay_no_casts():
    ctx = ctx_on("h100-sxm")
    batch = LayoutBatch.from_layouts([resolve_layout({}, ctx.training)])
    dense, moe = fp8.cast_s(ctx, batch, np.array([4096.0]))
    assert dense[0] == 0.0 and moe[0] == 0.0


def test_rowwise_casts_read_each_tensor_once_per_axis_first():
    # cast 4 B per element (read bf16, write row- and column-wise fp8) + amax reads: tensorwise one
    # (2 B), rowwise one per axis (4 B)
    casts = {}
    for recipe in ("tensorwise", "rowwise"):
        ctx = ctx_on("h100-sxm", recipe)
        batch = LayoutBatch.from_layouts([resolve_layout({"precision": "fp8"}, ctx.training)])
        casts[recipe] = fp8.cast_s(ctx, batch, np.array([4096.0]))[0][0]
    assert casts["rowwise"] / casts["tensorwise"] == pytest.approx((4 + 4) / (4 + 2), rel=1e-12)


def test_tp_ring_pays_one_latency_per_step():
    # 16 ranks, busbw 400e9, α 10 µs, S = 32 MiB: 15/16·S/400e9 + 15·10 µs
    link = GroupLink(size=np.array([16.0]), bus_bytes_per_s=np.array([400e9]), latency_s=np.array([1e-5]),
                     inside_domain=np.array([False]), ranks_per_domain=np.array([8.0]))
    size = 32 * 2**20
    assert tp_collective_s(link, np.array([size]))[0] == pytest.approx(15 / 16 * size / 400e9 + 15e-5)


def _deepseek(ep: int, dedup: bool):
    ctx = build_context("deepseek-v3", build_training(ep, 4096, ep, hardware="h100-sxm"))
    profile = dataclasses.replace(ctx.profile, options=TrainerOptions(moe_token_dedup=dedup))
    ctx = dataclasses.replace(ctx, profile=profile)
    return ctx, group_link(ctx, np.array([float(ep)]), np.array([1.0]))


def test_plain_dispatch_sends_every_remote_copy():
    # EP 64 over 8 nodes of 8: top-8 copies, 56/64 of them off the node: 8·56/64 = 7
    ctx, link = _deepseek(64, dedup=False)
    assert moe_time.remote_copies_per_token(ctx, link)[0] == pytest.approx(7.0)


def test_dedup_sends_one_copy_per_remote_node_and_node_limit_caps_it():
    # D = 8 nodes, k = 8: E[distinct remote] = 7·(1 − (7/8)^8) = 4.90, capped by topk_group 4
    # (n_group 8 over 8 nodes: one group per node) at 4
    ctx, link = _deepseek(64, dedup=True)
    assert 7 * (1 - (7 / 8) ** 8) > 4.0
    assert moe_time.remote_copies_per_token(ctx, link)[0] == pytest.approx(4.0)


def test_grouped_gemm_spans_all_local_experts():
    # grouped: 2·tokens·k·h·f_e/etp; per expert (no grouped GEMM): ·ep/E
    ctx = build_context("mixtral-8x7b", build_training(8, 4096, 8, hardware="h100-sxm"))
    batch = LayoutBatch.from_layouts([resolve_layout({"ep": 8}, ctx.training)])
    grouped = moe_time.expert_gemm_flops(ctx, batch, np.array([4096.0]))[0]
    assert grouped == pytest.approx(2 * 4096 * 2 * 4096 * 14336)
    looped = dataclasses.replace(ctx, profile=dataclasses.replace(
        ctx.profile, options=TrainerOptions(moe_grouped_gemm=False)))
    assert moe_time.expert_gemm_flops(looped, batch, np.array([4096.0]))[0] == pytest.approx(grouped * 8 / 8)


def _qwen3_moe_matmul(ep: int, mbs: int, precision: str = "bf16"):
    from autoplan.cost.flops import layer_matmul_flops_per_token
    from autoplan.cost.time import _layer_forward_s, gemm_efficiency

    ctx = build_context("qwen3-30b-a3b", build_training(8, 2048, 64, hardware="h100-sxm"))
    batch = LayoutBatch.from_layouts([resolve_layout({"ep": ep, "mbs": mbs, "precision": precision}, ctx.training)])
    tokens = np.array([mbs * 2048.0])
    _, moe_per_token = layer_matmul_flops_per_token(ctx)
    compute = (tokens * moe_per_token / (ctx.cluster.gpu.compute_peak_bf16_flops_per_s * fp8.matmul_speedup(ctx, batch)
                                         * gemm_efficiency(ctx, moe_time.expert_gemm_flops(ctx, batch, tokens))))[0]
    return ctx, batch, float(_layer_forward_s(ctx, batch)["moe_matmul"][0]), float(compute)


def test_expert_weight_floor_reads_the_local_experts_once():
    # Qwen3-30B-A3B: 128 experts of gate, up, down 2048 x 768 each, 2 B in BF16, 1 B in FP8, over ep
    for ep, precision, element_bytes in ((1, "bf16", 2.0), (8, "bf16", 2.0), (8, "fp8", 1.0)):
        ctx, batch, _, _ = _qwen3_moe_matmul(ep, 1, precision)
        expected = 128 * 3 * 2048 * 768 / ep * element_bytes / ctx.effective_hbm_bytes_per_s
        assert moe_time.expert_weight_floor_s(ctx, batch)[0] == pytest.approx(expected, rel=1e-12)


def test_many_experts_per_gpu_at_few_tokens_are_bandwidth_bound():
    # ep 1, 2,048 tokens: 128 routed tokens per expert, below the ridge (peak·η over the effective
    # HBM bandwidth, ~220 FLOP/B here): the routed GEMMs take their weights' read, not their
    # FLOPs' time; at ep 8 and 8x the tokens (1,024 per local expert) the FLOPs decide.
    ctx, batch, slow, compute = _qwen3_moe_matmul(1, 1)
    from autoplan.cost.flops import layer_matmul_flops_per_token, routed_matmul_flops_per_token

    routed = compute * routed_matmul_flops_per_token(ctx) / layer_matmul_flops_per_token(ctx)[1]
    floor = moe_time.expert_weight_floor_s(ctx, batch)[0]
    assert floor > routed
    assert slow == pytest.approx(compute - routed + floor, rel=1e-12)
    _, _, fast, compute8 = _qwen3_moe_matmul(8, 8)
    assert fast == pytest.approx(compute8, rel=1e-12)
