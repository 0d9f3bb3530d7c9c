"""The host-dispatch term (cost/host_dispatch.py): launch counts, the run-ahead rule across the
MoE sync, and what CUDA graphs remove (arithmetic of every expectation in its comment)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from autoplan.api import build_context, build_training
from autoplan.cost import host_dispatch
from autoplan.cost.evaluate import evaluate
from autoplan.layout import LayoutBatch, resolve_layout


def ctx_for(model: str, gpus: int = 8, cuda_graphs: str = "none", **training):
    setup = build_training(gpus, 4096, 512, hardware="b200", cuda_graphs=cuda_graphs, **training)
    return build_context(model, setup, trainer="megatron-bridge")


def batch(ctx, **knobs) -> LayoutBatch:
    return LayoutBatch.from_layouts([resolve_layout(knobs, ctx.training)])


@pytest.mark.parametrize("graphs, precision, dense", [
    ("none", "bf16", 12.0),            # attention 7 + MLP 5
    ("none", "fp8", 16.0),             # + one quantization per GEMM: 2 attention + 2 MLP
    ("attn", "bf16", 6.0),             # the attention's 7 replay as 1 graph: 1 + 5
    ("full_iteration", "bf16", 0.0),   # the whole iteration replays: no launch per layer
])
def test_dense_layer_launches(graphs, precision, dense):
    ctx = ctx_for("llama3-8b", cuda_graphs=graphs)
    got, _ = host_dispatch.forward_launches(ctx, batch(ctx, precision=precision))
    assert got[0] == dense


@pytest.mark.parametrize("graphs, precision, moe", [
    ("none", "bf16", 75.0),   # attention 7 + router 15 + preprocess 9 + dispatch 12 + 2 GEMMs × 128/8 experts (32)
    ("none", "fp8", 109.0),   # attention 7 + 2, router and preprocess 24, dispatch 12, 32 GEMMs + 32 quantizations
    ("moe_router,moe_preprocess", "bf16", 52.0),       # router + preprocess as one replay: 7 + 1 + 12 + 32
    ("attn,moe_router,moe_preprocess", "bf16", 46.0),  # and attention too: 1 + 1 + 12 + 32
])
def test_moe_layer_launches_follow_the_local_experts_and_the_graphs(graphs, precision, moe):
    ctx = ctx_for("qwen3-30b-a3b", cuda_graphs=graphs)
    _, got = host_dispatch.forward_launches(ctx, batch(ctx, ep=8, precision=precision))
    assert got[0] == moe


def test_run_ahead_rule_by_hand():
    # Dense layer, no MoE sync: F = 12 launches, H = 12·c forward, 24·c backward; c = 10 µs.
    # 4 layers with G = 0.6 ms each (0.2 forward, 0.4 backward): ΣH = 4·36·10 µs = 1.44 ms,
    # ΣG = 2.4 ms -> hidden: 0. At G = 0.1 ms each: ΣG = 0.4 ms -> exposed 1.44 − 0.4 = 1.04 ms.
    ctx = ctx_for("llama3-8b")
    ctx = dataclasses.replace(ctx, parameters=dataclasses.replace(
        ctx.parameters, efficiency=dataclasses.replace(ctx.efficiency, host_launch_s=1e-5)))
    b = batch(ctx)
    four, zero = np.array([4.0]), np.array([0.0])
    no_moe = {"gpu_moe_experts_f_s": 0.0, "gpu_moe_post_sync_f_s": 0.0}
    hidden = host_dispatch.host_exposed_s(ctx, b, four, zero, np.array([6e-4]), np.array([0.0]), **no_moe)
    exposed = host_dispatch.host_exposed_s(ctx, b, four, zero, np.array([1e-4]), np.array([0.0]), **no_moe)
    assert hidden[0] == 0.0
    assert exposed[0] == pytest.approx(1.44e-3 - 0.4e-3, rel=1e-12)


def test_the_moe_sync_exposes_each_forward_on_its_own():
    # Qwen3-30B-A3B at ep 8, bf16: F = 75 launches, c = 10 µs: H_f = 0.75 ms, H_b = 1.5 ms per layer.
    # Two MoE layers. G = 1.5 ms each (forward 0.5, backward 1.0): sync 2·(0.75 − 0.5) + 2·(1.5 − 1.0)
    # = 1.5 ms. G = 2.4 ms (forward 0.8 hides 0.75, backward 1.6 hides 1.5): 0. G = 2.1 ms (forward 0.7,
    # backward 1.4): 2·0.05 + 2·0.1 = 0.3 ms, and the same 2·(2.25 − 2.1) pooled (capacity-padded, no sync).
    ctx = ctx_for("qwen3-30b-a3b")
    ctx = dataclasses.replace(ctx, parameters=dataclasses.replace(
        ctx.parameters, efficiency=dataclasses.replace(ctx.efficiency, host_launch_s=1e-5)))
    b = batch(ctx, ep=8)
    # The forward's GPU work all before the experts' end (G_E = G_A = G_f; H_E = 32, H_A = 44 launches
    # ≤ H_f = 75): the whole-stretch rule.
    zero, two = np.array([0.0]), np.array([2.0])

    def exposed(c, gpu_moe_s):
        return host_dispatch.host_exposed_s(c, b, zero, two, zero, np.array([gpu_moe_s]),
                                            gpu_moe_experts_f_s=gpu_moe_s / 3.0,
                                            gpu_moe_post_sync_f_s=gpu_moe_s / 3.0)[0]
    assert exposed(ctx, 1.5e-3) == pytest.approx(1.5e-3)
    assert exposed(ctx, 2.4e-3) == 0.0
    padded = dataclasses.replace(ctx, training=dataclasses.replace(ctx.training, moe_capacity_factor=1.0))
    for c in (ctx, padded):
        assert exposed(c, 2.1e-3) == pytest.approx(3e-4)


def test_the_sync_keeps_the_forward_exposed_where_the_pooled_stretch_would_hide_it():
    # One MoE layer and 8 dense layers, c = 10 µs. MoE: H_f 0.75 ms, G_f 0.25 ms (G 0.75 ms, backward 0.5 ms,
    # H_b 1.5 ms). Dense: F = 12, H 0.36 ms, G 3 ms each (forward 1.0, backward 2.0).
    # Sync: MoE forward 0.75 − 0.25 = 0.5 ms exposed; the rest: 8·(0.12 − 1.0) + (1.5 − 0.5) + 8·(0.24 − 2.0)
    # < 0 -> 0: 0.5 ms. Pooled (capacity-padded): 8·0.36 + 2.25 − (8·3 + 0.75) < 0 -> 0.
    ctx = ctx_for("qwen3-30b-a3b")
    ctx = dataclasses.replace(ctx, parameters=dataclasses.replace(
        ctx.parameters, efficiency=dataclasses.replace(ctx.efficiency, host_launch_s=1e-5)))
    b = batch(ctx, ep=8)
    args = (np.array([8.0]), np.array([1.0]), np.array([3e-3]), np.array([7.5e-4]))
    post = {"gpu_moe_experts_f_s": 2.5e-4, "gpu_moe_post_sync_f_s": 2.5e-4}  # all the MoE forward's GPU work
    assert host_dispatch.host_exposed_s(ctx, b, *args, **post)[0] == pytest.approx(5e-4, rel=1e-9)
    padded = dataclasses.replace(ctx, training=dataclasses.replace(ctx.training, moe_capacity_factor=1.0))
    assert host_dispatch.host_exposed_s(padded, b, *args, **post)[0] == 0.0


def test_mbs_1_moe_layout_is_host_bound_and_graphs_recover_it():
    # Qwen3-30B-A3B on 8 B200, ep 8, mbs 1: eager launches exceed the GPU's forward work per MoE layer;
    # the full-iteration graph removes the host time and the MoE layers' eager fixed time.
    times = {}
    for graphs in ("none", "moe_router,moe_preprocess", "full_iteration"):
        ctx = ctx_for("qwen3-30b-a3b", cuda_graphs=graphs)
        table = evaluate(ctx, batch(ctx, ep=8, mbs=1, precision="fp8"))
        times[graphs] = (float(table["time_host_exposed_s"][0]), float(table["step_time_s"][0]))
    assert times["none"][0] > 0.0
    assert times["full_iteration"][0] == 0.0
    assert times["none"][1] > times["moe_router,moe_preprocess"][1] > times["full_iteration"][1]


@pytest.mark.parametrize("graphs, precision, ep, post", [
    ("none", "fp8", 8, 76.0),        # dispatch 12 + 2 GEMMs × 128/8 experts (32) + 32 quantizations
    ("none", "bf16", 8, 44.0),       # dispatch 12 + 32 GEMMs
    ("none", "fp8", 16, 44.0),       # dispatch 12 + 2 × 128/16 (16) GEMMs + 16 quantizations
    ("moe_router,moe_preprocess", "fp8", 8, 76.0),  # the graphed router runs before the sync: unchanged
    ("full_iteration", "fp8", 8, 0.0),              # no launch per layer
])
def test_post_sync_launches_are_the_dispatch_and_the_local_experts(graphs, precision, ep, post):
    ctx = ctx_for("qwen3-30b-a3b", cuda_graphs=graphs)
    b = batch(ctx, ep=ep, precision=precision)
    assert host_dispatch.post_sync_launches(ctx, b)[0] == post
    # the experts' own: all but the dispatch's 12 (none under the full-iteration graph)
    assert host_dispatch.expert_launches(ctx, b)[0] == max(post - 12.0, 0.0)


def test_the_launch_heavy_part_after_the_sync_is_exposed_by_hand():
    # Qwen3-30B-A3B, ep 8, bf16, c = 10 µs, one MoE layer: F = 75 launches, H_f = 0.75 ms; the experts'
    # 32 launches H_E = 0.32 ms, through the combine 44, H_A = 0.44 ms. GPU: G = 2.4 ms (G_f = 0.8 ms
    # hides H_f; the backward, H_b 1.5 ms against G_b 1.6 ms, hides too).
    # G_E = G_A = 0.1 ms: boundary A gives 0.44 − 0.1 = 0.34 ms (E: 0.22 ms).
    # G_E = 0.05 ms, G_A = 0.4 ms (a long combine): boundary E gives 0.32 − 0.05 = 0.27 ms (A: 0.04 ms).
    # G_E = 0.35 ms, G_A = 0.5 ms: the stretch's GPU work keeps pace everywhere: 0.
    ctx = ctx_for("qwen3-30b-a3b")
    ctx = dataclasses.replace(ctx, parameters=dataclasses.replace(
        ctx.parameters, efficiency=dataclasses.replace(ctx.efficiency, host_launch_s=1e-5)))
    b = batch(ctx, ep=8)
    zero, one, g = np.array([0.0]), np.array([1.0]), np.array([2.4e-3])

    def exposed(g_e, g_a):
        return host_dispatch.host_exposed_s(ctx, b, zero, one, zero, g, gpu_moe_experts_f_s=g_e,
                                            gpu_moe_post_sync_f_s=g_a)[0]
    assert exposed(1e-4, 1e-4) == pytest.approx(3.4e-4, rel=1e-12)
    assert exposed(5e-5, 4e-4) == pytest.approx(2.7e-4, rel=1e-12)
    assert exposed(3.5e-4, 5e-4) == 0.0


def test_less_gpu_work_after_the_sync_never_hides_more():
    # Property: the exposed time falls (weakly) as the post-sync GPU work grows, and never drops
    # below the whole-stretch rule max(0, H_f − G_f) (G_E = G_A = G_f).
    ctx = ctx_for("qwen3-30b-a3b")
    b = batch(ctx, ep=8, precision="fp8")
    # fp8, ep 8, c = 17 µs: H_f = 109 launches = 1.853 ms, H_A = 76 = 1.292 ms; G = 4.5 ms, G_f 1.5 ms.
    zero, one, g = np.array([0.0]), np.array([1.0]), np.array([4.5e-3])
    post = np.linspace(0.0, 1.5e-3, 61)
    got = np.array([host_dispatch.host_exposed_s(ctx, b, zero, one, zero, g, gpu_moe_experts_f_s=p / 2.0,
                                                 gpu_moe_post_sync_f_s=p)[0] for p in post])
    assert np.all(np.diff(got) <= 0.0)
    assert got[0] > got[-1]
    whole = host_dispatch.host_exposed_s(ctx, b, zero, one, zero, g, gpu_moe_experts_f_s=g[0] / 3.0,
                                         gpu_moe_post_sync_f_s=g[0] / 3.0)[0]
    assert np.all(got >= whole - 1e-15) and got[-1] == pytest.approx(whole, rel=1e-12)
