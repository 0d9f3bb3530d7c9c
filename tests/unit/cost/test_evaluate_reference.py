"""evaluate() gives, to 1e-12 relative, the columns the cost model gave before its fixed cost per
call was cut (issue 43, item 7): ``reference/evaluate_reference.npz``, written by main at c045a1b
(and rewritten by the merges meant to move predictions: its maker's docstring) with
``reference/make_evaluate_reference.py``, for a few hundred random layouts of seven
contexts (dense and MoE, five trainers), as one batch, as a batch with repeated rows (so that
``cost.broadcast`` groups) and layout by layout."""

from __future__ import annotations

import json
import pathlib

import numpy as np
import pytest

from autoplan.api import build_context, build_training
from autoplan.cost.evaluate import evaluate
from autoplan.layout import FIELDS, LayoutBatch

REFERENCE = np.load(pathlib.Path(__file__).parent / "reference" / "evaluate_reference.npz")
CASES = [tuple(case) for case in json.loads(str(REFERENCE["meta"]))["cases"]]
RTOL = 1e-12


def case_context(i: int):
    model, gpus, seq_len, gbs, trainer, _, settings = CASES[i]
    return build_context(model, build_training(gpus, seq_len, gbs, **settings), trainer=trainer)


def case_batch(i: int) -> LayoutBatch:
    return LayoutBatch({name: REFERENCE[f"{i}/layout/{name}"] for name in FIELDS})


def expected_columns(i: int) -> dict[str, np.ndarray]:
    prefix = f"{i}/column/"
    return {key[len(prefix):]: REFERENCE[key] for key in REFERENCE.files if key.startswith(prefix)}


def assert_columns(got: dict[str, np.ndarray], expected: dict[str, np.ndarray], what: str) -> None:
    assert set(got) == set(expected), f"{what}: columns differ: {set(got) ^ set(expected)}"
    for name, values in expected.items():
        np.testing.assert_allclose(np.asarray(got[name], dtype=np.float64), values, rtol=RTOL, atol=0.0,
                                   err_msg=f"{what}: {name}")


@pytest.mark.parametrize("i", range(len(CASES)), ids=[f"{c[0]}-{c[4]}" for c in CASES])
def test_batch_matches_reference(i):
    ctx, batch, expected = case_context(i), case_batch(i), expected_columns(i)
    assert_columns(evaluate(ctx, batch).columns, expected, f"case {i}")
    # 40 layouts repeated 20 times on top: above broadcast.MIN_ROWS, so the grouped formulas group
    rows = np.concatenate([np.arange(len(batch)), np.repeat(np.arange(40), 20)])
    repeated = evaluate(ctx, batch.take(rows)).columns
    assert_columns(repeated, {name: values[rows] for name, values in expected.items()}, f"case {i} repeated")


@pytest.mark.parametrize("i", range(len(CASES)), ids=[f"{c[0]}-{c[4]}" for c in CASES])
def test_each_layout_matches_reference(i):
    ctx, batch, expected = case_context(i), case_batch(i), expected_columns(i)
    for k in range(len(batch)):
        got = evaluate(ctx, batch.take(np.array([k]))).columns
        assert_columns(got, {name: values[k:k + 1] for name, values in expected.items()}, f"case {i} row {k}")


def test_contexts_and_layouts_interleaved_match_reference():
    """Whatever is kept between calls is kept per context and per layout: one layout of each
    case in turn, every context built afresh, then again with the contexts built once."""
    contexts = [case_context(i) for i in range(len(CASES))]
    for k in (0, 1, 2):
        for i in range(len(CASES)):
            for ctx in (case_context(i), contexts[i]):
                got = evaluate(ctx, case_batch(i).take(np.array([k]))).columns
                assert_columns(got, {n: v[k:k + 1] for n, v in expected_columns(i).items()}, f"case {i} row {k}")
