"""Selective recompute of named modules (cost/recompute.py): what each name recomputes."""

from __future__ import annotations

import dataclasses

import autoplan
from autoplan.api import build_context, build_training
from autoplan.layout import Layout


def _tiny_moe_context():
    """A one-layer MoE whose experts' SwiGLU (memory bound) outweighs its tiny matmuls: the case
    where leaving the activation out of moe's recompute made moe cheaper than moe_act (a
    hypothesis example of tests/property/test_cost_properties.py)."""
    base = autoplan.load_model("mixtral-8x7b")
    moe = dataclasses.replace(base.moe, num_experts=4, num_experts_per_token=4, expert_ffn_hidden_size=608)
    model = dataclasses.replace(base, name="tiny-moe", num_layers=1, hidden_size=16, ffn_hidden_size=64,
                                num_attention_heads=1, num_kv_heads=1, head_dim=16, vocab_size=64, moe=moe)
    return build_context(model, build_training(8, 1024, 16))


def _recompute_s(ctx, modules: str) -> float:
    layout = Layout(dp=8, tp=1, pp=1, vpp=1, cp=1, ep=1, etp=1, zero=0, sp=False, mbs=2, grad_acc=1,
                    recompute="selective", recompute_modules=modules)
    table = autoplan.evaluate(ctx, autoplan.LayoutBatch.from_layouts([layout]))
    return float(table["time_recompute_s"][0])


def test_moe_recomputes_the_experts_activation_too():
    """Megatron --recompute-modules: moe is the whole MoE layer, moe_act its activation only."""
    ctx = _tiny_moe_context()
    moe, moe_act, both = (_recompute_s(ctx, m) for m in ("moe", "moe_act", "moe,moe_act"))
    assert moe > moe_act > 0.0
    assert both == moe  # naming moe_act beside moe recomputes nothing more


def test_activation_offload_moves_its_bytes_at_the_measured_payload_rate():
    """Nothing to hide behind (no compute): each offloaded layer's bytes go out and come back at
    host_bytes_per_s · HOST_LINK_EFFICIENCY, not at the datasheet rate."""
    import numpy as np

    from autoplan.cost.host_link import HOST_LINK_EFFICIENCY
    from autoplan.cost.recompute import offload_exposed_s
    from autoplan.layout import LayoutBatch

    ctx = build_context("8b", build_training(8, 4096, 8))
    batch = LayoutBatch.from_layouts([Layout(tp=1, pp=1, vpp=1, cp=1, ep=1, etp=1, dp=8, zero=1, mbs=1, grad_acc=1,
                                             sp=False, offload_layers=2)])
    layer_bytes = np.array([1e9])
    got = offload_exposed_s(ctx, batch, layer_bytes, np.array([32.0]), np.zeros(1), np.zeros(1))
    rate = ctx.cluster.gpu.host_bytes_per_s * HOST_LINK_EFFICIENCY
    assert got[0] == 2 * 2 * 1e9 / rate  # 2 layers, out and back


def test_offloaded_activations_leave_the_gpu_for_host_memory_which_must_hold_them():
    """offload_layers moves the layers' activations to the host: GPU memory falls, host memory
    rises by at least as much less the staged layer, and a host too small for them does not fit."""
    import dataclasses as dc

    from autoplan.cost.evaluate import evaluate
    from autoplan.layout import LayoutBatch

    ctx = build_context("8b", build_training(8, 4096, 8))
    ctx = dc.replace(ctx, profile=ctx.profile.with_overrides([("activation_offload", True)]))
    knobs = dict(tp=1, pp=1, vpp=1, cp=1, ep=1, etp=1, dp=8, zero=1, mbs=1, grad_acc=1, sp=False)
    batch = LayoutBatch.from_layouts([Layout(**knobs, offload_layers=n) for n in (0, 8, 16)])
    t = evaluate(ctx, batch)
    gpu, host = t.columns["peak_memory_bytes"], t.columns["host_memory_bytes"]
    assert host[0] == 0 and 0 < host[1] < host[2]
    assert gpu[0] > gpu[1] > gpu[2]
    assert (gpu[0] - gpu[2]) <= host[2] * 1.0001 + 1.0  # what left, less the layer in transfer
    small = dc.replace(ctx, training=dc.replace(ctx.training, cluster=dc.replace(
        ctx.training.cluster, gpu=dc.replace(ctx.cluster.gpu, host_memory_bytes=float(host[1])))))
    fits = evaluate(small, batch).columns["host_memory_fits"]
    assert list(fits) == [True, True, False]


def test_only_a_profile_that_can_offload_activations_is_let_through():
    import dataclasses as dc

    from autoplan.layout import LayoutBatch
    from autoplan.rules import legality_codes
    from autoplan.rules.evaluate import REASON_CODES

    ctx = build_context("8b", build_training(8, 4096, 8))
    batch = LayoutBatch.from_layouts([Layout(tp=1, pp=1, vpp=1, cp=1, ep=1, etp=1, dp=8, zero=1, mbs=1,
                                             grad_acc=1, sp=False, offload_layers=8)])
    assert REASON_CODES[int(legality_codes(ctx, batch)[0])] == "trainer_offload"
    able = dc.replace(ctx, profile=ctx.profile.with_overrides([("activation_offload", True)]))
    assert int(legality_codes(able, batch)[0]) == 0
