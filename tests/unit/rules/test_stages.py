"""Uneven pipeline stages: one rule per trainer, and the exported split is the costed one."""

from __future__ import annotations

import numpy as np
import pytest

from autoplan.api import plan_from_record
from autoplan.cost.stages import stage_layers, virtual_stage_layers
from autoplan.export import render
from autoplan.layout import LayoutBatch
from autoplan.profiles import load_profile
from autoplan.rules import REASON_CODES, RuleContext, legality_codes
from autoplan.specs.models import load_model


def rank_layers(num_layers: int, pp: int, vpp: int) -> list[int]:
    """Layers per rank when virtual stage k·pp + r runs on rank r."""
    chunks = virtual_stage_layers(num_layers, pp, vpp)
    return [sum(chunks[k * pp + r] for k in range(vpp)) for r in range(pp)]


@pytest.mark.parametrize("num_layers", [16, 28, 32, 61, 80, 126])
@pytest.mark.parametrize("pp", [1, 2, 3, 4, 7, 8, 16])
@pytest.mark.parametrize("vpp", [1, 2, 3])
def test_virtual_split_puts_the_costed_layers_on_first_and_last_rank(num_layers, pp, vpp):
    if pp * vpp > num_layers:
        pytest.skip("more stages than layers is refused (pp_layers)")
    ranks = rank_layers(num_layers, pp, vpp)
    assert sum(ranks) == num_layers and max(ranks) - min(ranks) <= 1
    assert ranks == sorted(ranks, reverse=True)  # the extra layers sit on the early ranks
    spec = _with_layers(num_layers)
    costed = stage_layers(spec, np.array([float(pp)]))
    assert ranks[0] == costed.first[0] and ranks[-1] == costed.last[0]


def deepspeed_type_partition(num_layers: int, stages: int, before: int = 3, after: int = 4) -> list[int]:
    """Transformer layers per stage as DeepSpeed's ``PipelineModule`` cuts a Megatron-DeepSpeed
    model pipe under ``partition_method='type:transformer'``: ``before`` and ``after`` layer
    specs of weight 0 (casts, embedding, final norm, head) around ``num_layers`` of weight 1, cut
    by the linear-partition programme of ``deepspeed/runtime/utils.py`` ``partition_balanced``
    (v0.19.5): over cuts, minimise the largest minus the smallest stage, keeping the last cut
    among equal costs (its ``>=`` update), then walk the cuts back. Written here to check that
    the trainer's own split is the one the cost model costs."""
    weights = np.array([0] * before + [1] * num_layers + [0] * after, dtype=float)
    n = len(weights)
    prefix = np.concatenate([[0.0], np.cumsum(weights)])
    high = np.full((n + 1, stages + 1), np.inf)
    low = np.full((n + 1, stages + 1), np.inf)
    cost = np.full((n + 1, stages + 1), np.inf)
    cut = np.zeros((n + 1, stages + 1), dtype=int)
    high[0, 0] = cost[0, 0] = 0.0
    for i in range(1, n + 1):
        for j in range(1, min(i, stages) + 1):
            k = np.arange(i)
            part = prefix[i] - prefix[k]
            hi, lo = np.maximum(high[k, j - 1], part), np.minimum(low[k, j - 1], part)
            spread = hi - lo
            last = int(np.flatnonzero(spread == spread.min())[-1])
            cost[i, j], high[i, j], low[i, j], cut[i, j] = spread[last], hi[last], lo[last], last
    cuts = [n]
    for j in range(stages, 0, -1):
        cuts.append(cut[cuts[-1], j])
    cuts.reverse()
    return [int(prefix[cuts[s + 1]] - prefix[cuts[s]]) for s in range(stages)]


@pytest.mark.parametrize(("num_layers", "pp"), [(32, 3), (70, 12), (61, 16), (24, 5), (80, 6), (30, 4),
                                                (126, 16), (40, 7), (96, 5), (28, 8), (13, 2), (9, 4)])
def test_deepspeed_cuts_transformer_layers_as_the_cost_model_splits_them(num_layers, pp):
    """BLOOM-176B ran 70 layers on PP12 with Megatron-DeepSpeed: its partition puts the extra
    layers on the first stages, as ``stage_layers`` does; the leading and trailing specs of weight
    0 do not move a layer."""
    expected = rank_layers(num_layers, pp, 1)
    assert deepspeed_type_partition(num_layers, pp) == expected
    assert deepspeed_type_partition(num_layers, pp, before=1, after=1) == expected


def _with_layers(num_layers: int):
    import dataclasses

    return dataclasses.replace(load_model("llama3-8b"), num_layers=num_layers)


def _uneven_layout(**values):
    """(layout, training) of pp = 3 on 24 GPUs unless ``values`` say otherwise."""
    return plan_from_record({"gpus": 24, "seq_len": 4096, "gbs_seqs": 48, "pp": 3, **values})


@pytest.mark.parametrize(("trainer", "values", "supported"), [
    ("megatron", {}, True), ("megatron", {"vpp": 2, "gbs_seqs": 96}, True),
    ("torchtitan", {"zero": 0}, True), ("torchtitan", {"zero": 0, "vpp": 2}, True),
    ("torchtitan", {"zero": 0, "vpp": 4, "gbs_seqs": 96}, False),
    ("nanotron", {}, True), ("deepspeed", {}, True), ("hf", {}, False),
])
def test_each_trainer_says_whether_it_splits_unevenly(trainer, values, supported):
    model = load_model("llama3-8b")  # 32 layers: pp=3 is uneven
    layout, training = _uneven_layout(**values)
    batch = LayoutBatch.from_layouts([layout])
    ctx = RuleContext(model, load_profile(trainer), training)
    refused = REASON_CODES[int(legality_codes(ctx, batch, allow_uneven=False)[0])]
    allowed = REASON_CODES[int(legality_codes(ctx, batch, allow_uneven=True)[0])]
    assert refused == ("pp_uneven" if supported else "trainer_uneven_pp")
    assert allowed == ("ok" if supported else "trainer_uneven_pp")


def test_megatron_export_writes_the_layout_and_no_virtual_stage_size():
    # 32 layers on 6 virtual stages: 6, 6, 5, 5, 5, 5; ranks hold 6+5, 6+5, 5+5 = ceil/floor(32/3)
    text = render("megatron", load_model("llama3-8b"), *_uneven_layout(vpp=2, gbs_seqs=96),
                  allow_uneven_pp=True).files["megatron_pretrain_gpt.sh"]
    assert "--pipeline-model-parallel-layout 'E(t*6|)*2(t*5|)*3t*5L'" in text
    assert "--num-layers-per-virtual-pipeline-stage" not in text


def test_torchtitan_export_leaves_the_split_to_torchtitan():
    """torchtitan's generate_llm_fqn_per_model_part with less_layers 0 gives L // n layers and
    one more to the first L mod n stages: the split the cost model uses."""
    result = render("torchtitan", load_model("llama3-8b"), *_uneven_layout(zero=0), allow_uneven_pp=True)
    module, toml = result.files["torchtitan_autoplan.py"], result.files["torchtitan_job.toml"]
    for text in (module, toml):
        assert "pipeline_parallel_layers_per_stage" not in text
        assert "pipeline_parallel_first_stage_less_layers" in text
    even = render("torchtitan", load_model("llama3-8b"), *_uneven_layout(gpus=32, pp=4, zero=0, gbs_seqs=64))
    assert "pipeline_parallel_layers_per_stage=8" in even.files["torchtitan_autoplan.py"]


def test_deepspeed_export_names_the_split_its_partition_makes():
    text = render("deepspeed", load_model("llama3-8b"), *_uneven_layout(zero=1)).files["deepspeed_launch.sh"]
    split = ", ".join(map(str, deepspeed_type_partition(32, 3)))
    assert f"pipeline stages hold {split} transformer layers" in text
    even = render("deepspeed", load_model("llama3-8b"), *_uneven_layout(gpus=32, pp=4, gbs_seqs=64, zero=1))
    assert "pipeline stages hold" not in even.files["deepspeed_launch.sh"]
