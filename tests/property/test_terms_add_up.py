"""The terms explain shows add up to the totals estimate reports, from the one set of term
definitions (``cost/terms.py``, the ``adds_to`` relation), for random model presets, GPU counts
and knobs, legal or not: the memory terms of the peak stage sum to ``peak_memory_bytes`` and the
time terms to ``step_time_s``. nanotron on H100 is among the trainers so that the calibrated
memory-pressure term is exercised near the memory limit.
"""

from __future__ import annotations

import os
from functools import lru_cache

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from autoplan.api import build_context, build_training
from autoplan.cost.evaluate import evaluate
from autoplan.cost.terms import STAGES, STEP_TIME, summands
from autoplan.errors import AutoplanError
from autoplan.layout import PLACEMENTS, LayoutBatch, resolve_layout
from autoplan.profiles import list_trainers
from autoplan.report.explain import explain_terms
from autoplan.units import GiB

PRESETS = ("llama3.2-1b", "llama3-8b", "qwen3-8b", "gpt3-175b", "mixtral-8x7b", "qwen3-30b-a3b", "deepseek-v3")
TRAINERS = tuple(list_trainers())
EXAMPLES = settings(max_examples=int(os.environ.get("AUTOPLAN_PROPERTY_EXAMPLES", "40")), deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])


@lru_cache(maxsize=None)
def context(model: str, gpus: int, seq_len: int, gbs_seqs: int, trainer: str, hardware: str):
    return build_context(model, build_training(gpus, seq_len, gbs_seqs, hardware=hardware), trainer=trainer)


@st.composite
def cases(draw):
    """(context, one layout) with random preset, trainer, GPU and knobs."""
    tp, pp, cp, dp = (draw(st.sampled_from(c)) for c in ((1, 2, 4, 8), (1, 2, 4), (1, 2), (1, 2, 4, 8, 16)))
    gpus = tp * pp * cp * dp
    model = draw(st.sampled_from(PRESETS))
    mbs, grad_acc = draw(st.sampled_from((1, 2, 4))), draw(st.sampled_from((1, 2, 4, 8)))
    ctx = context(model, gpus, draw(st.sampled_from((1024, 4096, 8192))), dp * mbs * grad_acc,
                  draw(st.sampled_from(TRAINERS)), draw(st.sampled_from(("h100-sxm", "a100-80gb"))))
    values = {"tp": tp, "pp": pp, "cp": cp, "dp": dp, "mbs": mbs, "grad_acc": grad_acc,
              "vpp": draw(st.sampled_from((1, 2))) if pp > 1 else 1,
              "zero": draw(st.sampled_from((0, 1, 2, 3))), "sp": draw(st.booleans()) and tp > 1,
              "recompute": draw(st.sampled_from(("none", "selective", "full"))),
              "precision": draw(st.sampled_from(("bf16", "fp8"))), "placement": draw(st.sampled_from(PLACEMENTS))}
    if ctx.model.is_moe:
        values["ep"] = draw(st.sampled_from([e for e in (1, 2, 4, 8) if (dp * cp * tp) % e == 0]))
    try:
        layout = resolve_layout(values, ctx.training)
    except AutoplanError:
        assume(False)
    return ctx, layout


@EXAMPLES
@given(cases())
def test_explained_terms_of_the_peak_stage_sum_to_the_reported_peak_and_step_time(case):
    ctx, layout = case
    table = evaluate(ctx, LayoutBatch.from_layouts([layout]), allow_uneven=True)
    assume(np.isfinite(table[STEP_TIME][0]) and np.isfinite(table["peak_memory_bytes"][0]))
    rows = explain_terms(ctx, table, 0)
    peak_stage = max(STAGES, key=lambda s: table[f"mem_{s}_total_bytes"][0])
    memory = sum(r["value"] for r in rows if r["kind"] == "memory" and r["stage"] == peak_stage) * GiB
    assert memory == pytest.approx(table["peak_memory_bytes"][0], rel=1e-12)
    time = sum(r["value"] for r in rows if r["kind"] == "time")
    assert time == pytest.approx(table[STEP_TIME][0], rel=1e-12)


@EXAMPLES
@given(cases())
def test_every_total_is_the_sum_of_the_terms_defined_to_add_up_to_it(case):
    ctx, layout = case
    table = evaluate(ctx, LayoutBatch.from_layouts([layout]), allow_uneven=True)
    assume(np.isfinite(table[STEP_TIME][0]))
    for total in (*(f"mem_{s}_total_bytes" for s in STAGES), STEP_TIME):
        parts = summands(total)
        assert parts, total
        assert sum(table[t.column][0] for t in parts) == pytest.approx(table[total][0], rel=1e-12), total
