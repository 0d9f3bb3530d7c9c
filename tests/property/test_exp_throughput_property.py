"""More exponential throughput never slows a step (cost.time.exp_floor_s), over random small models
and legal layouts: the floor is a max with the tensor time, so a faster SFU (or none stated, an
unbounded one) can only lower or keep each attention pass.

Context parallelism is left out: there the ring exchange hides behind the attention
(``cp_exposed``) while the gradient reduction hides behind the same backward (``dp_exposed``), so a
slower attention can shorten the step (found by this test, a property of the overlap model that
any slower attention shows, not of the floor; see CHANGELOG)."""

from __future__ import annotations

import dataclasses

from hypothesis import assume, given
from hypothesis import strategies as st

from autoplan.cost.context import CostContext
from autoplan.cost.evaluate import evaluate
from autoplan.layout import LayoutBatch
from autoplan.profiles import load_profile
from autoplan.specs.hardware import load_gpu, make_cluster
from autoplan.specs.training import TrainingSpec
from tests.property.test_cost_properties import FAST, model_and_layouts

GPU = load_gpu("h100-sxm")  # no exp rate of its own: the drawn rates are the only floor


def _step_times(model, layouts, exp_ops_per_s: float) -> list[float]:
    gpu = dataclasses.replace(GPU, exp_ops_per_s=exp_ops_per_s)
    profile = load_profile("megatron")
    out = []
    for lay in layouts:
        ctx = CostContext(model=model, training=TrainingSpec(make_cluster(gpu, lay.gpus), lay.seq_len, lay.gbs_seqs),
                          profile=profile, parameters=profile.parameters_for(GPU.name))
        out.append(float(evaluate(ctx, LayoutBatch.from_layouts([lay]))["step_time_s"][0]))
    return out


@FAST
@given(model_and_layouts(max_size=3, trainer="megatron"), st.floats(1e10, 1e14), st.floats(1.0, 100.0))
def test_more_exp_throughput_never_slows_a_step(case, rate, factor):
    model, _, layouts = case
    assume(all(lay.cp == 1 for lay in layouts))
    slow, fast, unbounded = (_step_times(model, layouts, r) for r in (rate, rate * factor, 0.0))
    for s, f, u in zip(slow, fast, unbounded):
        assert s >= f * (1 - 1e-12) and f >= u * (1 - 1e-12), (s, f, u)
