"""What ``explain`` prints as a term's formula with values: every number in it is one of the
term's intermediates as the code evaluated them (or a literal of the formula), and the result
is the evaluated column, for the headline plan and a few other layouts."""

from __future__ import annotations

import re

import pytest

from autoplan.api import build_context, build_training
from autoplan.cost.evaluate import evaluate
from autoplan.cost.terms import memory_terms, time_terms
from autoplan.layout import LayoutBatch, resolve_layout
from autoplan.report.explain import compact_lines
from autoplan.report.substituted import formula_of, substitute

SCALE = {"GiB": 2.0**30, "MiB": 2.0**20, "B": 1.0, "s": 1.0, "ms": 1e-3, "µs": 1e-6, "params": 1.0, "layers": 1.0}
NUMBER = re.compile(r"(?<![\w.])(-?\d+(?:\.\d+)?(?:e-?\d+)?)(?: (GiB|MiB|B|ms|µs|s|params|layers)\b)?")

LAYOUTS = [("llama3-70b", 512, 512, dict(tp=4, pp=4, vpp=4, cp=2, zero=1, mbs=1)),
           ("mixtral-8x7b", 64, 256, dict(tp=2, pp=2, ep=4, zero=1, recompute="selective")),
           ("llama3-8b", 16, 64, dict(tp=2, zero=3, recompute="full", offload="optimizer"))]


def _numbers(text: str) -> list[float]:
    return [float(v) * SCALE.get(unit or "", 1.0) for v, unit in NUMBER.findall(text)]


@pytest.mark.parametrize(("model", "gpus", "gbs", "knobs"), LAYOUTS)
def test_every_printed_number_is_an_evaluated_intermediate(model, gpus, gbs, knobs):
    ctx = build_context(model, build_training(gpus, 8192 if gpus == 512 else 4096, gbs))
    table = evaluate(ctx, LayoutBatch.from_layouts([resolve_layout(knobs, ctx.training)]))
    checked = 0
    for t in (*memory_terms("first"), *memory_terms("last"), *time_terms()):
        s = substitute(ctx, table, 0, t)
        assert formula_of(t).evaluate(s.values) == pytest.approx(float(table[t.column][0]), rel=1e-9, abs=1e-9), t.column
        literals = [float(v) for v in re.findall(r"(?<![\w.])\d+(?:\.\d+)?", s.general)]
        for printed in _numbers(s.substituted):
            assert any(printed == pytest.approx(v, rel=6e-4) for v in (*s.values.values(), *literals)), (t.column, printed)
            checked += 1
    assert checked > 30


def test_the_compact_lines_end_each_formula_with_the_evaluated_value():
    ctx = build_context("llama3-70b", build_training(512, 8192, 512))
    table = evaluate(ctx, LayoutBatch.from_layouts([resolve_layout(LAYOUTS[0][3], ctx.training)]))
    lines = compact_lines(ctx, table, 0)
    for t in time_terms():
        value = float(table[t.column][0])
        line = next((x for x in lines if x.startswith(f"  {t.term} = ")), None)
        assert (line is None) == (value == 0), t.term
        if line:
            assert _numbers(line.rsplit(" = ", 1)[1])[0] == pytest.approx(value, rel=6e-4), t.term
