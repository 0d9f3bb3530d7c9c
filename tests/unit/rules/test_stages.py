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
    ("nanotron", {}, True), ("deepspeed", {}, False), ("hf", {}, False),
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
