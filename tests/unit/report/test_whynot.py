"""The nearest single-knob change that makes an out-of-memory layout fit."""

from autoplan.api import build_context, build_training
from autoplan.cost.evaluate import evaluate
from autoplan.layout import LayoutBatch, resolve_layout
from autoplan.report.whynot import nearest_fitting_change


def test_suggested_change_fits_and_is_a_single_knob():
    ctx = build_context("70b", build_training(512, 8192, 512))
    lay = resolve_layout(dict(tp=8, pp=4, mbs=4, recompute="none"), ctx.training)
    assert not evaluate(ctx, LayoutBatch.from_layouts([lay]))["fits"][0]
    advice = nearest_fitting_change(ctx, lay)
    assert advice.startswith("try --")
    option, value = advice.split()[1:3]
    knob = option.removeprefix("--").replace("-", "_")
    changed = dict(lay.to_dict(), **{knob: int(value) if value.isdigit() else value})
    changed.pop("dp"), changed.pop("grad_acc"), changed.pop("sp")
    fixed = resolve_layout(changed, ctx.training)
    assert evaluate(ctx, LayoutBatch.from_layouts([fixed]))["fits"][0]


def test_no_advice_when_nothing_nearby_fits():
    # 405B on 8 GPUs: no single knob brings it under 80 GiB
    ctx = build_context("405b", build_training(8, 8192, 8))
    lay = resolve_layout(dict(tp=8), ctx.training)
    assert nearest_fitting_change(ctx, lay) == ""
