"""Near-tied plans: which plans overlap the best one's interval, and their robustness order
(a stable re-ordering of those plans only)."""

from __future__ import annotations

import numpy as np
import pytest

from autoplan.api import build_context, build_training
from autoplan.calibration.uncertainty import ErrorBand
from autoplan.report import near_ties as nt
from autoplan.search import SearchOptions, search
from autoplan.space import load_space

WIDE = ErrorBand("megatron/hopper/dense", True, 12, 0.8, 1.2, 0.9, 1.1)
UNMEASURED = ErrorBand("megatron/blackwell/dense", False, 0, 0.8, 1.2, 0.9, 1.1)


@pytest.fixture(scope="module")
def result():
    ctx = build_context("8b", build_training(64, 8192, 512, hardware="h100-sxm"), trainer="megatron")
    return search(ctx, load_space("default"), SearchOptions(sampler="exhaustive"))


def test_near_tied_count_is_the_overlap_with_the_best():
    # overlap when t · 1.1 >= 100 · 0.9 = 90, i.e. t >= 81.8: 100 and 95, not 80
    band = ErrorBand("x/y/dense", True, 5, 0.9, 1.1, 0.9, 1.1)
    assert nt.near_tied_count(np.array([100.0, 95.0, 80.0, 60.0]), band) == 2
    assert nt.near_tied_count(np.array([100.0, 99.0]), band) == 2
    assert nt.near_tied_count(np.array([]), band) == 0


def test_reordered_count_stops_at_the_first_plan_beyond_the_margin():
    # within 5% of 100: 100, 97, 95.5; 94 is not, and 96 after it is not reached
    tokens = np.array([100.0, 97.0, 95.5, 94.0, 96.0, 50.0])
    assert nt.reordered_count(tokens, 5) == 3
    assert nt.reordered_count(tokens, 2) == 2  # never beyond the near-tied plans
    assert nt.reordered_count(tokens, 1) == 1


def test_robust_order_reorders_only_the_near_tied_plans(result, monkeypatch):
    monkeypatch.setattr(nt, "result_band", lambda r: WIDE)
    monkeypatch.setattr(nt, "REORDER_WITHIN", 1.0)  # the whole near-tied group
    n = nt.near_ties(result).num_plans
    tokens = result.table["tokens_per_s_per_gpu"]
    assert n >= 2 and np.all(tokens[:n] * WIDE.tokens_high_factor >= tokens[0] * WIDE.tokens_low_factor)
    assert tokens[n] * WIDE.tokens_high_factor < tokens[0] * WIDE.tokens_low_factor
    robust = nt.robust_order(result)
    # the same rows after the group, in the same order
    np.testing.assert_array_equal(robust.table["tokens_per_s_per_gpu"][n:], tokens[n:])
    np.testing.assert_array_equal(robust.reasons[n:], result.reasons[n:])
    # the group: a permutation, sorted by (tight headroom, cross-node dims), stable in rank
    np.testing.assert_array_equal(np.sort(robust.table["tokens_per_s_per_gpu"][:n]), np.sort(tokens[:n]))
    usable = result.ctx.cluster.gpu.usable_memory_bytes / 2**30
    tight = (robust.table["memory_headroom_gib"][:n] < nt.HEADROOM_MARGIN * usable).astype(int)
    crossing = nt.cross_node_dims(robust, np.arange(n))
    keys = list(zip(tight, crossing))
    assert keys == sorted(keys)
    for a in range(n - 1):  # equal keys keep their predicted order (tokens/s descending)
        if keys[a] == keys[a + 1]:
            assert robust.table["tokens_per_s_per_gpu"][a] >= robust.table["tokens_per_s_per_gpu"][a + 1]


def test_robust_order_never_ranks_a_plan_beyond_the_margin_first(result, monkeypatch):
    monkeypatch.setattr(nt, "result_band", lambda r: ErrorBand("megatron/hopper/dense", True, 12, 0.5, 2.0, 0.9, 1.1))
    robust = nt.robust_order(result)
    best = result.table["tokens_per_s_per_gpu"][0]
    assert robust.table["tokens_per_s_per_gpu"][0] >= (1 - nt.REORDER_WITHIN) * best


def test_cross_node_dims_counts_groups_beyond_the_domain(result):
    b = result.table.batch
    # a row with tp=8 and dp > 1 on 8-GPU nodes: tp inside the node, dp across nodes
    rows = np.flatnonzero((b.tp == 8) & (b.pp == 1) & (b.cp == 1) & (b.dp > 1))[:1]
    assert len(rows) == 1
    assert nt.cross_node_dims(result, rows)[0] == 1


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
