"""The streamed exhaustive search keeps exactly what ranking the whole table once would keep.

The reference is the pre-streaming implementation written out here: enumerate every layout of
the space, assess them in one call, rank the whole table (``recipe.rank_order``) and mark the
Pareto front over the whole table. The streamed search must give the same rows in the same
order with the same values, whatever its chunk size and however few rows it keeps.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from autoplan.api import build_context, build_training
from autoplan.search import SearchOptions, recipe, search
from autoplan.search.exhaustive import run_exhaustive
from autoplan.search.ranking import robust_order
from autoplan.space import KNOBS, enumerate_space, load_space

CASES = {  # name: (model, gpus, gbs_seqs, space)
    "70b-512-default": ("70b", 512, 512, "default"),
    "8b-96-default": ("8b", 96, 512, "default"),
    "mixtral-64-moe": ("mixtral-8x7b", 64, 512, "moe"),
}


def reference(ctx, space):
    """The whole table assessed at once and ranked in one lexsort (stage, then tokens/s/GPU
    descending, then peak memory, then every knob in KNOBS order), with the Pareto front of the
    whole table."""
    batch, reaches = enumerate_space(space, ctx.training)
    table = recipe.assess(ctx, batch, reaches)
    table.columns["pareto"] = recipe.pareto_front(table)
    tps = np.nan_to_num(table["tokens_per_s_per_gpu"], nan=-np.inf, posinf=-np.inf)
    peak = np.nan_to_num(table["peak_memory_bytes"], nan=np.inf)
    keys = [getattr(batch, k) for k in reversed(KNOBS)] + [peak, -tps, table["stage"]]
    return recipe.take(table, np.lexsort(keys))


def same_rows(got, want, rows: int) -> None:
    assert len(got) == rows
    for knob in ("tp", "pp", "vpp", "cp", "ep", "dp", "mbs", "grad_acc", "zero", "recompute"):
        np.testing.assert_array_equal(getattr(got.batch, knob), getattr(want.batch, knob)[:rows], err_msg=knob)
    for name in ("tokens_per_s_per_gpu", "peak_memory_bytes", "stage", "pareto", "reason_code"):
        np.testing.assert_array_equal(got[name], want[name][:rows], err_msg=name)


@pytest.fixture(scope="module", params=sorted(CASES))
def case(request):
    model, gpus, gbs, space_name = CASES[request.param]
    ctx = build_context(model, build_training(gpus, 4096, gbs))
    space = load_space(space_name)
    return ctx, space, reference(ctx, space)


def test_streamed_ranking_equals_the_whole_table_ranked(case):
    """(then both put in the recipe's robustness order of near-tied plans, search/ranking.py)"""
    ctx, space, want = case
    result = search(ctx, space, SearchOptions(sampler="exhaustive"))
    want = robust_order(replace(result, table=want, reasons=recipe.reasons(want))).table
    same_rows(result.table, want, len(want))
    assert result.num_ranked == len(want)
    # the counts of every layout are those of the whole table
    assert result.counts.reach_batch == int(want["feasible"].sum())
    assert result.counts.legal == int((want["stage"] < recipe.ILLEGAL).sum())


@pytest.mark.parametrize("keep, chunk_size", [(37, 211), (400, 1000), (5, 4096)])
def test_keeping_few_rows_in_small_chunks_keeps_the_best_ones(case, keep, chunk_size):
    """Small chunks and a short list make every merge and the pruning of illegal layouts run."""
    ctx, space, want = case
    best, _, counts = run_exhaustive(ctx, space, keep=keep, chunk_size=chunk_size)
    same_rows(best, want, min(keep, len(want)))
    assert counts.assessed == len(want)
    assert counts.reasons == recipe.count(want, counts.reasons.get("degrees", 0)).reasons


def test_closest_misses_tell_the_same_story_as_the_whole_table():
    """Nothing fits (a 405B model on 8 GPUs): the message built from the misses kept while
    streaming equals the one built from the whole ranked table."""
    ctx = build_context("405b", build_training(8, 4096, 64))
    space = load_space("default")
    want = reference(ctx, space)
    result = search(ctx, space, SearchOptions(sampler="exhaustive", keep_rows=3))
    counts = result.counts
    assert not result.feasible.any()
    assert recipe.infeasible_message(ctx, result.misses, counts, space.values) == \
        recipe.infeasible_message(ctx, want, counts, space.values)


def test_batch_misses_agree_too():
    """A batch no layout reaches exactly (tolerance 0): the nearest-batch hint agrees."""
    ctx = build_context("8b", build_training(96, 4096, 500, gbs_tolerance=0.0))
    space = load_space("default")
    want = reference(ctx, space)
    _, misses, counts = run_exhaustive(ctx, space, keep=4, chunk_size=300)
    assert recipe.infeasible_message(ctx, misses, counts, space.values) == \
        recipe.infeasible_message(ctx, want, counts, space.values)


def test_keep_rows_must_be_positive():
    with pytest.raises(ValueError, match="keep_rows must be an integer >= 1"):
        replace(SearchOptions(), keep_rows=0)
