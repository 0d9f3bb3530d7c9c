"""cost.context.per_context: a quantity of the context alone is computed once per context."""

from __future__ import annotations

import dataclasses
import pickle

from autoplan.api import build_context, build_training
from autoplan.cost.context import per_context

CALLS: list[int] = []


@per_context
def _layers_plus(ctx, extra: int) -> int:
    CALLS.append(extra)
    return ctx.model.num_layers + extra


def test_computed_once_per_context_and_options():
    CALLS.clear()
    ctx = build_context("llama3-8b", build_training(8, 4096, 64))
    assert [_layers_plus(ctx, 1), _layers_plus(ctx, 1), _layers_plus(ctx, 2)] == [33, 33, 34]  # 32 layers
    assert CALLS == [1, 2]
    # a changed context (dataclasses.replace builds a new one) computes afresh
    other = dataclasses.replace(ctx, model=dataclasses.replace(ctx.model, num_layers=16))
    assert _layers_plus(other, 1) == 17 and CALLS == [1, 2, 1]
    assert _layers_plus(ctx, 1) == 33 and CALLS == [1, 2, 1]


def test_a_pickled_context_leaves_its_entries_behind():
    """search.parallel pickles contexts for its workers: what is kept (rules, whose predicates
    are lambdas, among it) stays behind and is computed again there."""
    from autoplan.layout import LayoutBatch, resolve_layout
    from autoplan.rules import legality_codes

    training = build_training(8, 4096, 64)
    ctx = build_context("llama3-8b", training)
    batch = LayoutBatch.from_layouts([resolve_layout({"tp": 2}, training)])
    codes = legality_codes(ctx, batch)  # keeps the rule context and its live rules
    _layers_plus(ctx, 3)
    CALLS.clear()
    copy = pickle.loads(pickle.dumps(ctx))
    assert _layers_plus(copy, 3) == 35 and CALLS == [3]
    assert (legality_codes(copy, batch) == codes).all()
