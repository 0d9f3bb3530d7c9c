"""The term definitions (``cost/terms.py``) cover exactly what ``evaluate()`` returns."""

from __future__ import annotations

import pytest

from autoplan.api import build_context, build_training
from autoplan.cost.evaluate import evaluate
from autoplan.cost.memory import MEMORY_TERMS
from autoplan.cost.terms import BY_COLUMN, KINDS, STEP_TIME, TERMS, memory_terms, time_terms
from autoplan.layout import LayoutBatch, resolve_layout
from autoplan.report.explain import parameter_value
from autoplan.report.substituted import substitute


def _table(model: str = "mixtral-8x7b", gpus: int = 16, **knobs):
    ctx = build_context(model, build_training(gpus, 4096, 64))
    layout = resolve_layout(knobs, ctx.training)
    return ctx, layout, evaluate(ctx, LayoutBatch.from_layouts([layout]))


def test_every_evaluated_column_has_exactly_one_definition():
    _, _, table = _table(tp=2, pp=2, ep=4, zero=1)
    assert len(BY_COLUMN) == len(TERMS)
    assert set(table.columns) == set(BY_COLUMN), set(table.columns) ^ set(BY_COLUMN)


def test_records_are_typed_and_summands_name_a_defined_total():
    for t in TERMS:
        assert t.kind in KINDS and t.unit and t.meaning and t.formula and t.source, t
        assert t.adds_to is None or t.adds_to in BY_COLUMN, t
    assert [t.term for t in memory_terms("first")] == list(MEMORY_TERMS)
    assert all(t.adds_to == STEP_TIME and t.unit == "s" for t in time_terms())


@pytest.mark.parametrize("knobs", [dict(zero=0), dict(zero=1, recompute="selective"),
                                   dict(zero=3, pp=2, recompute="full", precision="fp8")])
def test_every_parameter_a_term_names_resolves_and_no_formula_has_a_placeholder(knobs):
    ctx, layout, _ = _table("llama3-8b", 8, **knobs)
    for t in TERMS:
        for name in t.parameters:
            parameter_value(ctx, name)
        assert "{" not in t.formula, t.column


def test_zero_divisor_follows_the_profile():
    """Megatron shards ZeRO over dp·cp, nanotron over dp only (``zero_shards_over_cp``): the
    master weights' shard divisor explain substitutes."""
    training = build_training(8, 4096, 8)
    layout = resolve_layout({"cp": 2, "zero": 1}, training)
    weights = BY_COLUMN["mem_first_master_weights_bytes"]
    for trainer, group in (("megatron", layout.dp * layout.cp), ("nanotron", layout.dp)):
        ctx = build_context("llama3-8b", training, trainer=trainer)
        assert ctx.profile.model_states.zero_shards_over_cp == (trainer == "megatron")
        table = evaluate(ctx, LayoutBatch.from_layouts([layout]))
        assert substitute(ctx, table, 0, weights).values["shard"] == group
