"""cost.stage_memory: the per-stage terms assembled from their grouped parts."""

from __future__ import annotations

import numpy as np

from autoplan.api import build_context, build_training
from autoplan.cost import broadcast
from autoplan.cost.stage_memory import layer_bytes_by_stage, stage_layer_bytes
from autoplan.space import enumerate_space, load_space


def test_a_dense_models_layer_bytes_are_the_same_on_every_stage_and_read_no_stage_knob():
    """A dense model has no MoE layers: one layer's bytes under recompute cannot depend on the
    stage split (an illegal split with more virtual stages than layers once counted a phantom MoE
    layer on the middle stage)."""
    training = build_training(64, 4096, 512)
    ctx = build_context("llama3-8b", training, trainer="megatron")
    space = load_space("default").with_overrides(pp=(1, 2, 4, 8, 16), vpp=(1, 2, 4), recompute=("none", "selective", "full"),
                                                 pp_split=("balanced", "embed-loss"))
    batch, _ = enumerate_space(space, training)
    with broadcast.shared_groupings():
        stages = [stage_layer_bytes(ctx, batch, stage) for stage in ("first", "middle", "last")]
    for part in ("per_layer", "working"):
        np.testing.assert_array_equal(stages[0][part], stages[1][part])
        np.testing.assert_array_equal(stages[0][part], stages[2][part])
    probe = broadcast._Recorder(batch)
    layer_bytes_by_stage.__wrapped__(ctx, probe)
    assert not probe.read & {"pp", "vpp", "pp_split"}, probe.read
