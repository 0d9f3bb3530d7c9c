"""The nearest single-knob change that makes an out-of-memory layout fit."""

from autoplan.api import build_context, build_training
from autoplan.cost.evaluate import evaluate
from autoplan.layout import LayoutBatch, resolve_layout
from autoplan.report.whynot import RETRY_REGIME_MEASURED, nearest_fitting_change, why_not


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


def _sweep_retry_regime():
    """The Ultra-Scale Playbook sweep's runs that fit only in the allocator's retry regime, and
    each ok one's tokens/s over the fastest ok run of its model, tp, pp, ZeRO stage and recompute
    at micro-batch 1."""
    from autoplan.calibration.fit import predict_rows
    from autoplan.calibration.sources import load_source

    rows = list(load_source("playbook_sweep").rows)
    pred = predict_rows(rows)
    band = [r for r, f, w in zip(rows, pred["fits"], pred["fits_with_retries"]) if w and not f]

    def family(r):
        return (r.model.name, *(r.layout[k] for k in ("tp", "pp", "zero", "recompute")))

    fastest: dict[tuple, float] = {}
    for r in rows:
        if r.status == "ok" and r.layout["mbs"] == 1:
            fastest[family(r)] = max(fastest.get(family(r), 0.0), r.tokens_per_s_per_gpu)
    speeds = [r.tokens_per_s_per_gpu / fastest[family(r)] for r in band if r.status == "ok"]
    return band, speeds


def test_the_retry_regime_note_states_what_the_sweep_measured():
    """RETRY_REGIME_MEASURED is the sweep's figure under the shipped profile (it must move with it)."""
    band, speeds = _sweep_retry_regime()
    assert f"of {len(band)} such runs" in RETRY_REGIME_MEASURED
    assert f"{len(speeds)} ran, at {min(speeds):.2f}-{max(speeds):.2f} of their speed" in RETRY_REGIME_MEASURED


def test_a_layout_beyond_the_card_only_by_the_cache_may_run_with_retries():
    """The sweep's ok run at tp 1, pp 4, micro-batch 2 (8B, 32 H100s, ZeRO-1): its reserved peak
    is predicted over the card, its firm peak under it, and why-not says it may run."""
    ctx = build_context("usp-8b", build_training(32, 4096, 256, hardware="p5"), trainer="nanotron")
    batch = LayoutBatch.from_layouts([resolve_layout({"tp": 1, "pp": 4, "mbs": 2, "zero": 1}, ctx.training)])
    table = evaluate(ctx, batch)
    assert not table["fits"][0] and table["fits_with_retries"][0]
    text = why_not(ctx, batch, table)
    assert text.startswith("out of memory") and "may run in the free-and-retry regime" in text
    assert RETRY_REGIME_MEASURED in text
