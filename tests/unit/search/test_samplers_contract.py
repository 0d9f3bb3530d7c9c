"""One contract every sampler must pass (Optuna's ``pytest_samplers`` pattern): only legal and
fitting plans come out, top-k is honoured, a seed fixes the result, the global batch is met."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from autoplan.api import build_context, build_training
from autoplan.cost.evaluate import evaluate
from autoplan.errors import NoFeasiblePlanError
from autoplan.layout import LayoutBatch
from autoplan.search import SAMPLERS, SearchOptions, search
from autoplan.space import load_space

TRIALS = 48  # three ask/tell batches of 16
TARGET = build_training(64, 8192, 256)
# 4·3·2·2·3·2·3 = 1,728 layouts: small enough for exhaustive, large enough for the samplers to miss.
SPACE = load_space("default").with_overrides(pp=(1, 2, 4), vpp=(1, 2), mbs=(1, 2))


@pytest.fixture(scope="module")
def ctx():
    return build_context("8b", TARGET)


@pytest.fixture(scope="module")
def results(ctx):
    """Each sampler's result with seed 0, computed once."""
    cache = {}

    def run(sampler: str):
        if sampler not in cache:
            cache[sampler] = search(ctx, SPACE, SearchOptions(sampler=sampler, trials=TRIALS, seed=0))
        return cache[sampler]
    return run


@pytest.fixture(scope="module")
def optimum(results):
    return results("exhaustive").table["tokens_per_s_per_gpu"][0]


@pytest.mark.parametrize("sampler", SAMPLERS)
def test_only_legal_fitting_plans_that_reach_the_batch(ctx, results, sampler):
    result = results(sampler)
    rows = result.plan_rows()
    assert len(rows) > 0
    layouts = [result.table.batch.layout(int(i)) for i in rows]
    again = evaluate(ctx, LayoutBatch.from_layouts(layouts))
    assert (again["reason_code"] == 0).all()
    assert again["fits"].all()
    assert (again["peak_memory_bytes"] <= ctx.cluster.gpu.usable_memory_bytes).all()
    for layout in layouts:
        assert layout.dp * layout.mbs * layout.grad_acc == TARGET.gbs_seqs
        assert layout.dp * layout.tp * layout.pp * layout.cp == TARGET.gpus


@pytest.mark.parametrize("sampler", SAMPLERS)
@pytest.mark.parametrize("k", [1, 3])
def test_top_k_is_honoured(results, sampler, k):
    records = results(sampler).top_records(k)
    assert 1 <= len(records) <= k
    assert all(r["feasible"] and r["infeasible_reason"] == "" for r in records)
    for field in ("tp", "pp", "dp", "grad_acc", "seq_len", "gbs_seqs", "tokens_per_s_per_gpu", "mfu"):
        assert field in records[0]


@pytest.mark.parametrize("sampler", SAMPLERS)
def test_deterministic_for_a_seed(ctx, results, sampler):
    first = results(sampler).to_frame()
    second = search(ctx, SPACE, SearchOptions(sampler=sampler, trials=TRIALS, seed=0)).to_frame()
    assert first.equals(second)


@pytest.mark.parametrize("sampler", ["auto", "exhaustive", "tpe", "random"])
def test_ranked_by_throughput(results, sampler):
    result = results(sampler)
    tps = result.table["tokens_per_s_per_gpu"][result.plan_rows()]
    assert (np.diff(tps) <= 0).all()
    assert result.study.best_value == pytest.approx(tps[0])


def test_nsga2_returns_a_pareto_front(results):
    result = results("nsga2")
    rows = result.plan_rows()
    tps = result.table["tokens_per_s_per_gpu"][rows]
    room = result.table["memory_headroom_gib"][rows]
    for i in range(len(rows)):
        dominated = (tps >= tps[i]) & (room >= room[i]) & ((tps > tps[i]) | (room > room[i]))
        assert not dominated.any()


def test_tpe_reaches_the_exhaustive_optimum_here(results, optimum):
    # TPE plus its local polish (autoplan.search.polish) on a 1,728-layout space.
    assert results("tpe").table["tokens_per_s_per_gpu"][0] >= 0.995 * optimum


def test_auto_is_exhaustive_on_a_small_space(results):
    assert results("auto").sampler == "exhaustive"
    assert results("auto").counts.candidates == SPACE.size


def test_gbs_tolerance_accepts_a_nearby_batch(ctx):
    # tp·pp·cp <= 8·2·1 = 16 keeps dp >= 4, and 250 = 2·125 is no multiple of 4: no exact batch.
    space = SPACE.with_overrides(pp=(1, 2), cp=(1,))
    loose = search(replace(ctx, training=build_training(64, 8192, 250, gbs_tolerance=0.05)), space)
    assert loose.feasible.any()
    for i in loose.plan_rows():
        layout = loose.table.batch.layout(int(i))
        assert layout.gbs_seqs == layout.dp * layout.mbs * layout.grad_acc
        assert abs(layout.gbs_seqs - 250) <= 0.05 * 250
    strict = search(replace(ctx, training=build_training(64, 8192, 250, gbs_tolerance=0.0)), space)
    assert not strict.feasible.any()
    with pytest.raises(NoFeasiblePlanError, match="--gbs-tolerance"):
        strict.check_feasible()


@pytest.mark.parametrize("sampler", ["exhaustive", "tpe"])
def test_nothing_fits_explains_why(sampler):
    ctx = build_context("405b", build_training(8, 8192, 64))
    result = search(ctx, load_space("default"),
                    SearchOptions(sampler=sampler, trials=16))
    with pytest.raises(NoFeasiblePlanError) as info:
        result.check_feasible()
    message = str(info.value)
    assert "the peak memory per GPU must fit" in message and "smallest peak" in message and "GiB >" in message
    assert "\n" not in message
    assert info.value.exit_code == 1


def test_a_closest_miss_beyond_the_card_only_by_the_cache_says_it_may_run_with_retries():
    """The Ultra-Scale Playbook sweep's ok run at tp 1, pp 4, micro-batch 2 (8B, 32 H100s): nothing
    else in the space, its reserved peak over the card, its firm peak under it."""
    ctx = build_context("usp-8b", build_training(32, 4096, 256, hardware="p5"), trainer="nanotron")
    space = load_space("default").with_overrides(tp=(1,), pp=(4,), vpp=(1,), cp=(1,), mbs=(2,), zero=(1,),
                                                 recompute=("none",))
    result = search(ctx, space)
    with pytest.raises(NoFeasiblePlanError) as info:
        result.check_feasible()
    assert "without the allocator's cache" in str(info.value) and "may run in the free-and-retry regime" in str(info.value)
