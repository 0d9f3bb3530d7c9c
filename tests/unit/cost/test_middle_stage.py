"""The middle (interior) pipeline stage, rank 1: its layers, its parameters, and that the peak
memory and the pace of the pipeline take it into account where the ends hold less (DeepSeek-V3's
dense layers on the first stage; Llama 3's embed-loss split)."""

from __future__ import annotations

import numpy as np
import pytest

from autoplan.api import build_context, build_training
from autoplan.cost.evaluate import evaluate
from autoplan.cost.params import count_params
from autoplan.cost.stages import stage_layers
from autoplan.layout import LayoutBatch, resolve_layout
from autoplan.specs.models import load_model


def one(value: float) -> np.ndarray:
    return np.array([float(value)])


def test_deepseek_v3_middle_stage_is_all_moe():
    """61 layers (3 dense, then 58 MoE) on pp 16: 61 = 16·3 + 13, so ranks 0-12 hold 4 layers.
    Rank 0 holds the 3 dense layers and 1 MoE layer; rank 1 holds 4 MoE layers."""
    layers = stage_layers(load_model("deepseek-v3"), one(16), one(1))
    assert (layers.first[0], layers.first_dense[0]) == (4, 3)
    assert (layers.middle[0], layers.middle_dense[0], layers.middle_moe[0]) == (4, 0, 4)


def test_dense_layers_past_rank_0_move_the_middle_to_the_first_all_moe_rank():
    """DeepSeek-V3 on pp 32: 61 = 32·1 + 29, ranks 0-28 hold 2 layers. The 3 dense layers fill
    rank 0 and one of rank 1's two, so rank 2 (2 MoE layers) stands for the interior."""
    layers = stage_layers(load_model("deepseek-v3"), one(32), one(1))
    assert layers.middle_rank[0] == 2
    assert (layers.middle[0], layers.middle_dense[0]) == (2, 0)
    assert stage_layers(load_model("deepseek-v3"), one(16), one(1)).middle_rank[0] == 1


def test_embed_loss_split_leaves_the_middle_a_layer_more():
    """126 layers + embedding + loss on pp 16 (Llama 3 405B): 128 units, 8 per rank; the ends
    give one unit each to the embedding and the loss (7 layers), the middle keeps 8."""
    layers = stage_layers(load_model("405b"), one(16), one(1), np.array([1]))
    assert (layers.first[0], layers.middle[0], layers.last[0]) == (7, 8, 7)
    assert layers.most[0] == 8


def test_no_middle_stage_below_pp_3():
    layers = stage_layers(load_model("deepseek-v3"), np.array([1.0, 2.0]), np.ones(2))
    assert layers.middle.tolist() == [0.0, 0.0]


@pytest.fixture(scope="module")
def deepseek_table():
    training = build_training(2048, 4096, 4096, hardware="h800")
    ctx = build_context("deepseek-v3", training, trainer="megatron")
    lays = [resolve_layout(dict(tp=2, pp=pp, ep=8, zero=1), training) for pp in (16, 2)]
    return ctx, evaluate(ctx, LayoutBatch.from_layouts(lays))


def test_middle_stage_holds_its_expert_parameters(deepseek_table):
    """Rank 1 of pp 16: 4 MoE layers, each with 256 experts of 3·7168·2048 weights over ep·etp = 8
    GPUs, plus their attention, norms, router and shared expert over tp = 2; bf16 weights."""
    ctx, table = deepseek_table
    pc = count_params(ctx.model)
    expert = 4 * pc.expert_per_layer / 8
    non_expert = 4 * (pc.attention_per_layer / 2 + pc.norm_per_layer + pc.router_per_layer
                      + pc.shared_expert_per_layer / 2)
    assert pc.expert_per_layer == 256 * 3 * 7168 * 2048
    assert table["mem_middle_weights_bytes"][0] == pytest.approx(2.0 * (expert + non_expert), rel=1e-12)


def test_peak_is_the_largest_stage_and_the_middle_is_zero_below_pp_3(deepseek_table):
    _, table = deepseek_table
    totals = np.array([table[f"mem_{s}_total_bytes"] for s in ("first", "middle", "last")])
    np.testing.assert_array_equal(table["peak_memory_bytes"], totals.max(axis=0))
    # pp 16: the all-MoE middle stage outweighs the dense-first first stage
    assert table["peak_stage"][0] == 1 and totals[1, 0] > totals[0, 0]
    assert totals[1, 1] == 0.0 and table["peak_stage"][1] in (0.0, 1.0)  # pp 2: rank 1 is the last


def test_the_pipeline_runs_at_the_pace_of_the_busiest_stage():
    """Llama 3 405B on pp 16 with the embed-loss split: the middle stage's 8 layers, not the
    ends' 7, set the micro-batch time; the balanced split (8 on each rank) costs the same."""
    training = build_training(2048, 8192, 1024, hardware="h100-sxm")
    ctx = build_context("405b", training, trainer="megatron")
    lays = [resolve_layout(dict(tp=8, pp=16, pp_split=split), training) for split in ("embed-loss", "balanced")]
    table = evaluate(ctx, LayoutBatch.from_layouts(lays))
    embed_loss, balanced = table["time_compute_s"]
    assert embed_loss == pytest.approx(balanced, rel=1e-9)


def _dense_by_brute_force(num_layers: int, num_dense: int, pp: int, vpp: int, embed_loss: bool, rank: int) -> int:
    """Dense layers on ``rank`` from the model-order split (virtual_stage_layers): virtual stage
    k·pp + rank holds the layers after those of the stages before it."""
    from autoplan.cost.stages import virtual_stage_layers

    split = virtual_stage_layers(num_layers, pp, vpp, embed_loss)
    starts = np.concatenate([[0], np.cumsum(split)[:-1]])
    return sum(max(0, min(num_dense - starts[s], split[s])) for s in range(rank, pp * vpp, pp))


@pytest.mark.parametrize("preset, pp, vpp, embed_loss", [
    ("llama3-70b", 8, 5, False), ("llama3.1-405b", 16, 2, True), ("deepseek-v3", 16, 2, False),
    ("deepseek-v3", 8, 4, True), ("deepseek-v3", 32, 1, False), ("nemotron-4-340b", 8, 12, False)])
def test_dense_layers_per_rank_follow_the_model_order_split(preset, pp, vpp, embed_loss):
    """Every rank's dense-layer count (first, middle, last) is what the model-order split of the
    virtual stages gives it; a dense model's interleaved middle rank is all dense (it once
    counted only its first chunk dense: 1 of 12 layers of Nemotron-4 340B on pp 8, vpp 12)."""
    model = load_model(preset)
    dense = model.num_layers - model.num_moe_layers
    layers = stage_layers(model, one(pp), one(vpp), np.array([1.0 if embed_loss else 0.0]))
    for rank, got in ((0, layers.first_dense), (int(layers.middle_rank[0]), layers.middle_dense),
                      (pp - 1, layers.last_dense)):
        assert got[0] == _dense_by_brute_force(model.num_layers, dense, pp, vpp, embed_loss, rank), rank
    if model.num_moe_layers == 0:
        assert layers.middle_dense[0] == layers.middle[0]


@pytest.mark.parametrize("num_layers", [16, 32, 61])
def test_every_layer_is_on_exactly_one_virtual_stage(num_layers):
    """The chunks of all ranks hold the L layers once each, for every pp, vpp and split, also with
    more virtual stages than layer units (an illegal layout, costed for orientation): the loss
    unit then sits on the last virtual stage that has a unit, not on an empty one."""
    from autoplan.cost.stages import rank_chunk_layers

    for pp in (2, 4, 8, 16, 32):
        for vpp in (1, 2, 4, 8):
            for embed_loss in (False, True):
                args = (np.array([float(pp)]), np.array([float(vpp)]), np.array([embed_loss]))
                total = sum(rank_chunk_layers(num_layers, *args, np.array([float(rank)])).sum() for rank in range(pp))
                assert total == num_layers, (pp, vpp, embed_loss, total)


def test_a_dense_models_stages_hold_only_dense_layers():
    model = load_model("llama3-8b")
    pp = np.array([2.0, 4.0, 8.0, 16.0, 32.0] * 4)
    vpp = np.repeat([1.0, 2.0, 4.0, 8.0], 5)
    for split in (0.0, 1.0):
        layers = stage_layers(model, pp, vpp, np.full_like(pp, split))
        for stage in ("first", "middle", "last"):
            np.testing.assert_array_equal(getattr(layers, f"{stage}_dense"), getattr(layers, stage))
