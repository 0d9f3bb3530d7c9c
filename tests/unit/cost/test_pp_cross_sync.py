"""The floor tp > 1 puts under each micro-batch's stage time (cost/time.py):
L_S·passes·TP_COLLECTIVES_PER_PASS·(collective_overhead_s + tp·pp_cross_tp_sync_s where the
pipeline crosses nodes).

nanotron on 32 H100s (4 nodes of 8), the Ultra-Scale Playbook's 8B model (32 layers), seq 4096,
global batch 256: nanotron's rank order puts tp innermost and pp outermost, so every pipeline
here has its neighbours tp·dp = 16 ranks apart, on other nodes.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from autoplan.api import build_context, build_training
from autoplan.cost.evaluate import evaluate
from autoplan.cost.time import TP_COLLECTIVES_PER_PASS
from autoplan.layout import LayoutBatch, resolve_layout

SYNC_S = 1e-3


def ctx_with(sync_s: float, host_s: float = 0.0):
    ctx = build_context("usp-8b", build_training(32, 4096, 256, hardware="p5"), trainer="nanotron")
    values = {"pp_cross_tp_sync_s": sync_s, "collective_overhead_s": host_s}
    return dataclasses.replace(ctx, parameters=ctx.parameters.with_values(values))


def tables(sync_s: float, layouts: list[dict], host_s: float = 0.0):
    ctx = ctx_with(sync_s, host_s)
    b = LayoutBatch.from_layouts([resolve_layout(v, ctx.training) for v in layouts])
    return evaluate(ctx, b).columns


LAYOUTS = [{"tp": tp, "pp": pp, "mbs": mbs, "zero": 1}
           for tp in (1, 2, 4, 8) for pp in (1, 2, 4) for mbs in (1, 2, 4)]


def test_neutral_value_changes_nothing_and_the_floor_never_speeds_a_layout_up():
    base, floored = tables(0.0, LAYOUTS), tables(SYNC_S, LAYOUTS)
    assert np.all(floored["step_time_s"] >= base["step_time_s"])
    unaffected = np.array([v["tp"] == 1 or v["pp"] == 1 for v in LAYOUTS])
    assert np.array_equal(floored["step_time_s"][unaffected], base["step_time_s"][unaffected])
    # tp > 1 with a pipeline across nodes: at 1 ms per collective and rank the floor (>= 0.26 s
    # per micro-batch at tp 2, pp 2) is above the work of one sequence, and binds; at tp 2, pp 2,
    # mbs 4 (~0.3 s of work) it does not, and changes nothing
    one = np.array([v["mbs"] == 1 for v in LAYOUTS])
    assert np.all(floored["step_time_s"][~unaffected & one] > base["step_time_s"][~unaffected & one])
    above = [i for i, v in enumerate(LAYOUTS) if (v["tp"], v["pp"], v["mbs"]) == (2, 2, 4)]
    assert floored["step_time_s"][above] == pytest.approx(base["step_time_s"][above], rel=1e-12)


def test_a_binding_floor_makes_the_micro_batch_time_independent_of_its_size():
    """32 layers over pp 4, of which nanotron's cost-balanced split puts 9 on the first (the LM
    head's V·h cost weighs on the last: cost/stages.py), 2 passes × TP_COLLECTIVES_PER_PASS
    collectives per layer, tp 8 ranks at 1 ms: a 0.58 s floor per micro-batch on the heaviest
    stage, far above the work of 1 to 4 sequences.
    Every exposed term then sums to it: step = grad_acc·floor + bubble + the per-step terms."""
    layouts = [{"tp": 8, "pp": 4, "mbs": mbs, "zero": 1} for mbs in (1, 2, 4)]
    t = tables(SYNC_S, layouts)
    floor = 9 * 2 * TP_COLLECTIVES_PER_PASS * 8 * SYNC_S
    per_micro = (t["time_compute_s"] + t["time_recompute_s"] + t["time_tp_exposed_s"] + t["time_cp_exposed_s"]
                 + t["time_ep_exposed_s"] + t["time_pp_exposed_s"] + t["time_offload_exposed_s"])
    grad_acc = np.array([256 / mbs for mbs in (1, 2, 4)])
    zero3 = 0.0  # zero 1: no per-micro-batch gathers
    assert per_micro / grad_acc + zero3 == pytest.approx(np.full(3, floor), rel=1e-9)
    # the step time per sequence then halves as the micro-batch doubles
    step_per_micro = (t["step_time_s"] - t["time_bubble_s"]) / grad_acc
    assert step_per_micro[0] < step_per_micro[2]


def test_the_floor_grows_with_the_tp_group():
    layouts = [{"tp": tp, "pp": 4, "mbs": 1, "zero": 1} for tp in (2, 4, 8)]
    base, floored = tables(0.0, layouts), tables(SYNC_S, layouts)
    added = floored["time_tp_exposed_s"] - base["time_tp_exposed_s"]
    assert np.all(np.diff(added) > 0.0)


def test_the_pipeline_runs_at_the_floor_of_its_stage_with_the_most_layers():
    """The 1B model (vocabulary 131072 on h 2048) on tp 4, pp 8: nanotron's split leaves the last
    stage only the LM head (its cost V·h counts as four layers), which with its loss is the
    heaviest stage by work; the floor is still that of a stage with the most layers (3)."""
    from autoplan.cost.shared_terms import stage_layer_counts

    ctx = dataclasses.replace(ctx_with(SYNC_S), model=build_context("usp-1b", ctx_with(0.0).training).model)
    b = LayoutBatch.from_layouts([resolve_layout({"tp": 4, "pp": 8, "mbs": 1, "zero": 1}, ctx.training)])
    layers = stage_layer_counts(ctx, b)
    assert layers["last"][0] == 0 and layers["first"][0] == 3
    t = evaluate(ctx, b).columns
    per_micro = (t["time_compute_s"] + t["time_recompute_s"] + t["time_tp_exposed_s"] + t["time_cp_exposed_s"]
                 + t["time_ep_exposed_s"] + t["time_pp_exposed_s"] + t["time_offload_exposed_s"]) / 256
    assert per_micro[0] == pytest.approx(3 * 2 * TP_COLLECTIVES_PER_PASS * 4 * SYNC_S, rel=1e-9)


def per_micro_batch_s(t, grad_acc) -> np.ndarray:
    return (t["time_compute_s"] + t["time_recompute_s"] + t["time_tp_exposed_s"] + t["time_cp_exposed_s"]
            + t["time_ep_exposed_s"] + t["time_pp_exposed_s"] + t["time_offload_exposed_s"]) / grad_acc


def test_the_host_floor_binds_inside_a_node_and_adds_nothing_above_it():
    """collective_overhead_s alone (no pipeline): tp 8, pp 1, 32 layers, 2 passes × 4 collectives
    at 1 ms: 0.256 s per micro-batch at mbs 1, above its work; at mbs 64 the work (> 0.3 s) is
    above it and the floor changes nothing."""
    layouts = [{"tp": 8, "pp": 1, "mbs": mbs, "zero": 1} for mbs in (1, 64)]
    base, floored = tables(0.0, layouts, host_s=0.0), tables(0.0, layouts, host_s=SYNC_S)
    grad_acc = np.array([256 / 4, 256 / 4 / 64])  # dp 4
    assert per_micro_batch_s(floored, grad_acc)[0] == pytest.approx(32 * 2 * TP_COLLECTIVES_PER_PASS * SYNC_S, rel=1e-9)
    assert per_micro_batch_s(base, grad_acc)[1] > 32 * 2 * TP_COLLECTIVES_PER_PASS * SYNC_S
    assert floored["step_time_s"][1] == pytest.approx(base["step_time_s"][1], rel=1e-12)
