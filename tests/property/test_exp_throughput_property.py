"""More exponential throughput never slows a step (cost.time.exp_floor_s), over random small models
and legal layouts, context parallelism included: the floor is a max with the tensor time, so a
faster SFU (or none stated, an unbounded one) can only lower or keep each attention pass, and a
faster attention never lengthens the step. Under context parallelism the ring exchange hides
behind the attention while the data-parallel traffic hides behind the same compute; the windows
beside the ring (``overlap.beside_cp_window_s``) keep a slower attention from widening the
reduction's window by more than it lengthens the micro-batch (this test found that it did)."""

from __future__ import annotations

import dataclasses

from hypothesis import given
from hypothesis import strategies as st

from autoplan.cost.context import CostContext
from autoplan.cost.evaluate import evaluate
from autoplan.layout import LayoutBatch
from autoplan.profiles import load_profile
from autoplan.specs.hardware import load_gpu, make_cluster
from autoplan.specs.training import TrainingSpec
from tests.property.test_cost_properties import FAST, model_and_layouts

GPU = load_gpu("h100-sxm")  # no exp rate of its own: the drawn rates are the only floor


def _step_times(model, layouts, exp_ops_per_s: float, attention_scale: float = 1.0,
                fp8_attention: bool = False) -> list[float]:
    gpu = dataclasses.replace(GPU, exp_ops_per_s=exp_ops_per_s)
    profile = load_profile("megatron")
    base = profile.parameters_for(GPU.name)
    parameters = base.with_values({"attention_efficiency": base.efficiency.attention_efficiency * attention_scale},
                                  fitted=False)
    out = []
    for lay in layouts:
        training = TrainingSpec(make_cluster(gpu, lay.gpus), lay.seq_len, lay.gbs_seqs, fp8_attention=fp8_attention)
        ctx = CostContext(model=model, training=training, profile=profile, parameters=parameters)
        out.append(float(evaluate(ctx, LayoutBatch.from_layouts([lay]))["step_time_s"][0]))
    return out


@FAST
@given(model_and_layouts(max_size=3, trainer="megatron"), st.floats(1e10, 1e14), st.floats(1.0, 100.0))
def test_more_exp_throughput_never_slows_a_step(case, rate, factor):
    model, _, layouts = case
    slow, fast, unbounded = (_step_times(model, layouts, r) for r in (rate, rate * factor, 0.0))
    for s, f, u in zip(slow, fast, unbounded):
        assert s >= f * (1 - 1e-12) and f >= u * (1 - 1e-12), (s, f, u)


@FAST
@given(model_and_layouts(max_size=3, trainer="megatron"), st.floats(0.3, 1.0))
def test_a_faster_attention_kernel_never_slows_a_step(case, share):
    """The attention at a lower efficiency (``share`` of the profile's) takes longer; no layout,
    at any cp, gets a shorter step from it. FP8 attention (fp8 layouts), a faster attention, too."""
    model, _, layouts = case
    slow, fast = _step_times(model, layouts, 5e12, share), _step_times(model, layouts, 5e12)
    fp8 = _step_times(model, layouts, 5e12, fp8_attention=True)
    for s, f, e in zip(slow, fast, fp8):
        assert s >= f * (1 - 1e-12) and f >= e * (1 - 1e-12), (s, f, e)
