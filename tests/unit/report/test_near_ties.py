"""Near-tied plans: which plans overlap the best one's interval, and their robustness order
(a stable re-ordering of those plans only)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from autoplan.api import build_context, build_training
from autoplan.calibration.uncertainty import ErrorBand
from autoplan.report import near_ties as nt
from autoplan.search import SearchOptions, ranking as rk, search
from autoplan.search.recipe import take
from autoplan.space import load_space

WIDE = ErrorBand("megatron/hopper/dense", True, 12, 0.8, 1.2, 0.9, 1.1)
UNMEASURED = ErrorBand("megatron/blackwell/dense", False, 0, 0.8, 1.2, 0.9, 1.1)


def speed_ranked(result):
    """A search's result before its robustness order: the re-ordered head back in tokens/s order."""
    moved = result.table["robust_moved"]
    k = int(np.flatnonzero(moved).max()) + 1 if moved.any() else 0
    perm = np.concatenate([np.argsort(-result.table["tokens_per_s_per_gpu"][:k], kind="stable"),
                           np.arange(k, len(result.table))])
    table = take(result.table, perm)
    del table.columns["robust_moved"]
    return dataclasses.replace(result, table=table, reasons=result.reasons[perm])


@pytest.fixture(scope="module")
def searched():
    ctx = build_context("8b", build_training(64, 8192, 512, hardware="h100-sxm"), trainer="megatron")
    return search(ctx, load_space("default"), SearchOptions(sampler="exhaustive"))


@pytest.fixture(scope="module")
def result(searched):
    return speed_ranked(searched)


def test_the_library_search_returns_the_recipes_order_with_moved_rows_marked():
    """The robustness order ran in the CLI only, so autoplan.search, capacity and the per-trainer
    searches of an export could put another plan first than `autoplan search`. The headline
    search (70B on 512 H100) re-orders its first four plans."""
    ctx = build_context("70b", build_training(512, 8192, 512, hardware="h100-sxm"), trainer="megatron")
    searched = search(ctx, load_space("default"), SearchOptions(sampler="exhaustive"))
    again = rk.robust_order(speed_ranked(searched))
    np.testing.assert_array_equal(searched.table["tokens_per_s_per_gpu"], again.table["tokens_per_s_per_gpu"])
    np.testing.assert_array_equal(searched.table["robust_moved"], again.table["robust_moved"])
    moved = searched.table["robust_moved"]
    assert moved.any()  # this search re-orders (its plans within 5% differ in headroom)
    tokens = searched.table["tokens_per_s_per_gpu"]
    # an unmoved row above a faster one is impossible: only moved rows break the tokens/s order
    for a in np.flatnonzero(~moved[:-1]):
        if not moved[a + 1] and searched.feasible[a + 1]:
            assert tokens[a] >= tokens[a + 1]
    # idempotent: ordering the ordered result changes nothing
    np.testing.assert_array_equal(rk.robust_order(searched).table["tokens_per_s_per_gpu"], tokens)


def test_near_tied_count_is_the_overlap_with_the_best():
    # overlap when t · 1.1 >= 100 · 0.9 = 90, i.e. t >= 81.8: 100 and 95, not 80
    band = ErrorBand("x/y/dense", True, 5, 0.9, 1.1, 0.9, 1.1)
    assert nt.near_tied_count(np.array([100.0, 95.0, 80.0, 60.0]), band) == 2
    assert nt.near_tied_count(np.array([100.0, 99.0]), band) == 2
    assert nt.near_tied_count(np.array([]), band) == 0


def test_reordered_count_stops_at_the_first_plan_beyond_the_margin():
    # within 5% of 100: 100, 97, 95.5; 94 is not, and 96 after it is not reached
    tokens = np.array([100.0, 97.0, 95.5, 94.0, 96.0, 50.0])
    assert rk.reordered_count(tokens, 5) == 3
    assert rk.reordered_count(tokens, 2) == 2  # never beyond the near-tied plans
    assert rk.reordered_count(tokens, 1) == 1


def test_robust_order_reorders_only_the_near_tied_plans(result, monkeypatch):
    monkeypatch.setattr(nt, "result_band", lambda r: WIDE)
    monkeypatch.setattr(rk, "result_band", lambda r: WIDE)
    monkeypatch.setattr(rk, "REORDER_WITHIN", 1.0)  # the whole near-tied group
    n = nt.near_ties(result).num_plans
    tokens = result.table["tokens_per_s_per_gpu"]
    assert n >= 2 and np.all(tokens[:n] * WIDE.tokens_high_factor >= tokens[0] * WIDE.tokens_low_factor)
    assert tokens[n] * WIDE.tokens_high_factor < tokens[0] * WIDE.tokens_low_factor
    robust = rk.robust_order(result)
    # the same rows after the group, in the same order
    np.testing.assert_array_equal(robust.table["tokens_per_s_per_gpu"][n:], tokens[n:])
    np.testing.assert_array_equal(robust.reasons[n:], result.reasons[n:])
    # the group: a permutation, sorted by (tight headroom, cross-node dims), stable in rank
    np.testing.assert_array_equal(np.sort(robust.table["tokens_per_s_per_gpu"][:n]), np.sort(tokens[:n]))
    usable = result.ctx.cluster.gpu.usable_memory_bytes / 2**30
    tight = (robust.table["memory_headroom_gib"][:n] < rk.HEADROOM_MARGIN * usable).astype(int)
    crossing = rk.cross_node_dims(robust, np.arange(n))
    keys = list(zip(tight, crossing))
    assert keys == sorted(keys)
    for a in range(n - 1):  # equal keys keep their predicted order (tokens/s descending)
        if keys[a] == keys[a + 1]:
            assert robust.table["tokens_per_s_per_gpu"][a] >= robust.table["tokens_per_s_per_gpu"][a + 1]


def test_robust_order_never_ranks_a_plan_beyond_the_margin_first(result, monkeypatch):
    monkeypatch.setattr(rk, "result_band", lambda r: ErrorBand("megatron/hopper/dense", True, 12, 0.5, 2.0, 0.9, 1.1))
    robust = rk.robust_order(result)
    best = result.table["tokens_per_s_per_gpu"][0]
    assert robust.table["tokens_per_s_per_gpu"][0] >= (1 - rk.REORDER_WITHIN) * best


def test_cross_node_dims_counts_groups_beyond_the_domain(result):
    b = result.table.batch
    # a row with tp=8 and dp > 1 on 8-GPU nodes: tp inside the node, dp across nodes
    rows = np.flatnonzero((b.tp == 8) & (b.pp == 1) & (b.cp == 1) & (b.dp > 1))[:1]
    assert len(rows) == 1
    assert rk.cross_node_dims(result, rows)[0] == 1


def test_tie_line_names_the_knobs_and_an_unmeasured_pair(result, monkeypatch):
    monkeypatch.setattr(nt, "result_band", lambda r: UNMEASURED)
    ties = nt.near_ties(result)
    line = ties.line()
    assert line.startswith(f"The top {ties.num_plans} plans are within the model's uncertainty (±20% tokens/s, "
                           "megatron/blackwell/dense, unmeasured pair); they differ in ")
    assert set(ties.differing_knobs) <= {"tp", "pp", "vpp", "cp", "ep", "etp", "zero", "mbs", "recompute",
                                         "recompute_layers", "offload_layers", "precision", "placement",
                                         "recompute_modules"}
    assert ties.differing_knobs


def test_a_zero_width_band_ties_only_equal_predictions(result, monkeypatch):
    monkeypatch.setattr(nt, "result_band", lambda r: ErrorBand("x/y/dense", True, 5, 1.0, 1.0, 1.0, 1.0))
    n = nt.near_ties(result).num_plans
    tokens = result.table["tokens_per_s_per_gpu"]
    assert n >= 1 and np.all(tokens[:n] == tokens[0]) and tokens[n] < tokens[0]
