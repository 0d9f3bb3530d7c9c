"""Equivalent plans are folded into the best-ranked of them, with their variants listed."""

from __future__ import annotations

import numpy as np
import pytest

from autoplan.api import build_context, build_training
from autoplan.search import SearchOptions, search
from autoplan.search.twins import group_twins, significant
from autoplan.space import load_space


@pytest.fixture(scope="module")
def result():
    ctx = build_context("70b", build_training(512, 8192, 512))
    return search(ctx, load_space("default"), SearchOptions(sampler="exhaustive"))


def test_significant_digits():
    values = np.array([123456789012.0, 0.000123456789987, 0.0, np.nan])
    got = significant(values)
    # 1.23456789|012e11 -> 1.23456789e11; 1.23456789|987e-4 rounds up to 1.23456790e-4
    np.testing.assert_allclose(got[:3], [123456789000.0, 0.000123456790, 0.0], rtol=1e-12)
    assert np.isnan(got[3])


def test_twins_are_predicted_the_same_as_their_leader(result):
    table, twin = result.table, result.twin
    assert twin.any(), "the headline has cp=2/mbs=2 twins of cp=1/mbs=1 plans"
    leaders = np.flatnonzero(result.variants != "")
    assert len(leaders) > 0
    for row in np.flatnonzero(twin):
        # its leader: the best-ranked earlier feasible row with the same predictions
        same = np.flatnonzero((np.abs(table["tokens_per_s_per_gpu"] - table["tokens_per_s_per_gpu"][row])
                               <= 1e-8 * table["tokens_per_s_per_gpu"][row])
                              & (table["peak_memory_bytes"] == table["peak_memory_bytes"][row])
                              & table["feasible"])
        assert same[0] < row and not twin[same[0]] and result.variants[same[0]]
        assert table["feasible"][row]


def test_plans_and_files_hold_no_twin(result):
    rows = result.plan_rows()
    assert not result.twin[rows].any()
    np.testing.assert_array_equal(result.ranks[rows], np.arange(1, len(rows) + 1))
    frame = result.to_frame()
    assert len(frame) == len(result.table) - int(result.twin.sum())
    assert list(frame["rank"]) == list(range(1, len(frame) + 1))
    record = result.top_records(len(rows))
    assert [r["rank"] for r in record] == list(range(1, len(rows) + 1))
    assert any(r["variants"] for r in record)


def test_a_variant_names_the_knobs_that_differ(result):
    row = int(np.flatnonzero(result.variants != "")[0])
    leader = result.table.batch.layout(row)
    first = result.variants[row].split("; ")[0]
    values = dict(item.split("=") for item in first.split())
    assert "cp" in values and int(values["cp"]) != leader.cp  # the symmetric knob
    assert "tp" not in values or int(values["tp"]) != leader.tp


def test_infeasible_rows_are_never_folded(result):
    twin, _ = group_twins(result.table)
    assert not twin[~result.table["feasible"]].any()
