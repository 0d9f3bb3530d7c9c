"""The nearest single-knob change that makes an out-of-memory layout fit."""

from autoplan.api import build_context, build_training
from autoplan.cost.evaluate import evaluate
from autoplan.layout import LayoutBatch, resolve_layout
from autoplan.report.whynot import nearest_fitting_change, why_not


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


def _why_not(model: str, gpus: int, gbs_seqs: int, **knobs) -> str:
    ctx = build_context(model, build_training(gpus, 8192, gbs_seqs))
    batch = LayoutBatch.from_layouts([resolve_layout(knobs, ctx.training)])
    return why_not(ctx, batch, evaluate(ctx, batch))


def test_why_not_names_the_broken_rule_and_its_fix():
    # llama3-70b has 8 KV heads: tp=16 does not divide them
    reason = _why_not("70b", 512, 512, tp=16)
    assert "kv_heads=8, tp=16" in reason and reason.endswith(": try --tp 8")


def test_why_not_out_of_memory_gives_the_excess_the_largest_term_and_the_nearest_fix():
    reason = _why_not("70b", 512, 512, tp=8, pp=4, mbs=4, recompute="none")
    assert reason.startswith("out of memory: peak ") and "GiB over the usable" in reason
    assert "largest term: activations" in reason and "; try --" in reason


def test_why_not_is_empty_for_a_layout_that_runs_and_fits():
    assert _why_not("8b", 64, 256, tp=2, zero=1, recompute="selective") == ""
