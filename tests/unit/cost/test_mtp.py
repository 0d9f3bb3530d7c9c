"""Multi-token prediction (DeepSeek-V3 report Sec. 2.2; ModelSpec.num_mtp_layers): its parameters,
its place on the last pipeline stage, its logits and its FLOPs."""

import dataclasses

import numpy as np
import pytest

from autoplan.api import build_context, build_training
from autoplan.cost.evaluate import evaluate
from autoplan.cost.params import count_params
from autoplan.layout import LayoutBatch, resolve_layout
from autoplan.specs.models import load_model


def deepseek(mtp: int):
    return dataclasses.replace(load_model("deepseek-v3"), num_mtp_layers=mtp)


def test_one_mtp_depth_is_a_moe_block_and_its_projection():
    """DeepSeek-V3 (h = 7168): the MTP depth holds one MoE layer, M ∈ R^{h×2h} = 2·7168² =
    102,760,448 and three RMSNorms (3·7168 = 21,504); the embedding and the head are shared."""
    pc = count_params(deepseek(1))
    assert pc.mtp_projection_per_depth == 2 * 7168**2 + 3 * 7168
    assert pc.mtp_per_depth == pc.moe_layer + 102_760_448 + 21_504
    assert pc.total == count_params(deepseek(0)).total  # the published 671B leaves MTP out


def evaluate_both(**layout):
    training = build_training(256, 4096, 512, hardware="h800")
    out = []
    for mtp in (0, 1):
        ctx = build_context(deepseek(mtp), training, trainer="megatron")
        batch = LayoutBatch.from_layouts([resolve_layout(layout, training)])
        out.append(evaluate(ctx, batch).columns)
    return out


def test_mtp_sits_on_the_last_stage():
    """pp = 8: the last stage gets one more (MoE) layer, its parameters and one more vocab-sized
    logits tensor; the first stage is unchanged; the step takes longer and MFU counts the MTP
    FLOPs (Megatron's convention), so model FLOPs per step grow."""
    without, with_mtp = evaluate_both(pp=8, ep=8, zero=1, recompute="full")
    assert with_mtp["layers_last_stage"][0] == without["layers_last_stage"][0] + 1
    for name in ("mem_first_total_bytes", "layers_first_stage"):
        assert with_mtp[name][0] == without[name][0]
    assert with_mtp["mem_last_logits_and_loss_bytes"][0] == pytest.approx(
        2.0 * without["mem_last_logits_and_loss_bytes"][0], rel=1e-12)
    assert with_mtp["mem_last_weights_bytes"][0] > without["mem_last_weights_bytes"][0]
    assert with_mtp["step_time_s"][0] > without["step_time_s"][0]
    assert with_mtp["model_flops_per_step"][0] > without["model_flops_per_step"][0]
    assert np.isfinite(with_mtp["mfu"][0])


def test_mtp_out_of_the_model_flops_on_request():
    training = dataclasses.replace(build_training(256, 4096, 512, hardware="h800"), mtp_in_model_flops=False)
    layout = resolve_layout({"pp": 8, "ep": 8, "zero": 1}, training)
    flops = [evaluate(build_context(deepseek(m), training, trainer="megatron"),
                      LayoutBatch.from_layouts([layout])).columns["model_flops_per_step"][0] for m in (0, 1)]
    assert flops[0] == flops[1]
