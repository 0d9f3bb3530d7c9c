"""Every term's formula (``cost.memory_formulas``, ``cost.time_formulas``), evaluated on the
intermediates the cost model's functions compute, equals the column ``evaluate()`` returns, for
a batch of random layouts of dense and MoE models under several trainers: the formula explain
prints cannot drift from the code."""

from __future__ import annotations

import ast
import random

import numpy as np
import pytest

from autoplan.api import build_context, build_training
from autoplan.cost.evaluate import evaluate
from autoplan.cost.formula import Formula, Quantity
from autoplan.cost.memory_formulas import MEMORY_FORMULAS
from autoplan.cost.time_formulas import TIME_FORMULAS
from autoplan.errors import AutoplanError
from autoplan.layout import LayoutBatch, resolve_layout

CASES = [("llama3-8b", "megatron"), ("mixtral-8x7b", "megatron"), ("llama3-8b", "deepspeed"),
         ("qwen3-30b-a3b", "torchtitan"), ("llama3-8b", "nanotron")]


def _batch(model: str, trainer: str, n: int = 120):
    rng = random.Random(f"{model}-{trainer}")
    ctx = build_context(model, build_training(64, 4096, 256), trainer=trainer)
    layouts = []
    for _ in range(n):
        knobs = dict(tp=rng.choice((1, 2, 4, 8)), pp=rng.choice((1, 2, 4)), cp=rng.choice((1, 2)),
                     zero=rng.choice((0, 1, 2, 3)), recompute=rng.choice(("none", "selective", "full")),
                     precision=rng.choice(("bf16", "fp8")), mbs=rng.choice((1, 2)),
                     offload=rng.choice(("none", "none", "optimizer", "params")), offload_layers=rng.choice((0, 0, 2)))
        if knobs["pp"] > 1:
            knobs["vpp"] = rng.choice((1, 2))
        if ctx.model.is_moe:
            knobs["ep"] = rng.choice((1, 2, 4, 8))
        try:
            layouts.append(resolve_layout(knobs, ctx.training))
        except (AutoplanError, ValueError):
            continue
    batch = LayoutBatch.from_layouts(layouts)
    return ctx, batch, evaluate(ctx, batch)


@pytest.mark.parametrize(("model", "trainer"), CASES)
def test_every_formula_evaluates_to_its_column(model, trainer):
    ctx, batch, table = _batch(model, trainer)
    assert len(batch) > 40
    for stage in ("first", "middle", "last"):
        present = batch.pp >= 3 if stage == "middle" else np.ones(len(batch), bool)  # no interior rank below pp 3
        for name, formula in MEMORY_FORMULAS.items():
            got = formula.evaluate(formula.intermediates(ctx, batch, stage))
            want = table[f"mem_{stage}_{name}_bytes"]
            assert np.allclose(got[present], want[present], rtol=1e-9, atol=1e-3), (stage, name)
    for name, formula in TIME_FORMULAS.items():
        got = formula.evaluate(formula.intermediates(ctx, batch, None))
        want = table[f"time_{name}_s"]
        assert np.allclose(got, want, rtol=1e-9, atol=1e-12, equal_nan=True), name


def test_every_formula_declares_exactly_the_names_it_uses():
    for name, formula in {**MEMORY_FORMULAS, **TIME_FORMULAS}.items():
        used = {n.id for n in ast.walk(formula.tree) if isinstance(n, ast.Name)}
        used -= {"max", "min", "clip"}
        assert used == {q.name for q in formula.quantities}, name


def test_substitution_leaves_out_what_does_not_apply():
    f = Formula("a * (b / c + d / e)", tuple(Quantity(n, "1", n, "x") for n in "abcde"), lambda *_: {})
    assert f.general() == "a × (b / c + d / e)"
    # d = 0: the expert part drops; c = 1 would read b alone
    assert f.substituted({"a": 12.0, "b": 3e9, "c": 32.0, "d": 0.0, "e": 1.0}) == "12 × 3e9 / 32"
    assert f.evaluate({"a": 12.0, "b": 3e9, "c": 32.0, "d": 0.0, "e": 1.0}) == pytest.approx(12 * 3e9 / 32)
    g = Formula("x - y", (Quantity("x", "1", "", ""), Quantity("y", "1", "", "")), lambda *_: {})
    assert g.general() == "x − y" and Formula("x - (y - x)", g.quantities, g.intermediates).general() == "x − (y − x)"
