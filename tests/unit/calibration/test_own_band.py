"""The error band of a user's own calibration: a prediction interval of its cross-validated
errors (calibration.own_band), carried by the --profile file and used by search and estimate."""

from __future__ import annotations

import math

import numpy as np
import pytest
import yaml

from autoplan.api import build_context, build_training
from autoplan.calibration.own_band import own_band, prediction_band, student_t_quantile
from autoplan.calibration.profile_file import apply_profile_file
from autoplan.errors import SpecError
from autoplan.profiles import load_profile
from autoplan.search.ranking import context_band


@pytest.mark.parametrize("p, df, table", [(0.975, 4, 2.776), (0.975, 10, 2.228), (0.95, 5, 2.015), (0.995, 2, 9.925)])
def test_student_t_quantiles_match_the_printed_table(p, df, table):
    # Student's t table (e.g. NIST/SEMATECH e-Handbook 1.3.6.7.2), three decimals
    assert student_t_quantile(p, df) == pytest.approx(table, abs=5e-4)


def test_prediction_band_by_hand():
    # r = 0, ±0.1, ±0.05: mean 0, s = sqrt(0.025/4) = 0.0790569; at 95%: t(0.975, 4) = 2.7764,
    # half = 2.7764 · 0.0790569 · sqrt(1.2) = 0.24044 -> [exp(-0.24044), exp(0.24044)]
    band = prediction_band(np.array([0.0, 0.1, -0.1, 0.05, -0.05]), 0.95)
    assert band == pytest.approx([math.exp(-0.24044), math.exp(0.24044)], abs=2e-4)
    # all over-predicted by 20%: the band sits below 1 and is clipped to hold it
    low, high = prediction_band(np.log(np.full(6, 0.8)) + np.array([0, 0.01, -0.01, 0.02, -0.02, 0]), 0.85)
    assert low < 0.8 < high == 1.0


def test_fewer_runs_give_wider_bands_and_too_few_give_none():
    errors = np.tile([0.05, -0.05, 0.02, -0.02, 0.0], 8)  # the same spread at every n
    widths = [np.log(np.divide(*prediction_band(errors[:n], 0.85)[::-1])) for n in (5, 10, 40)]
    assert widths[0] > widths[1] > widths[2]
    measured = {"tokens_per_s_per_gpu": np.full(4, 100.0), "peak_memory_bytes": np.full(4, np.nan)}
    predicted = {"tokens_per_s_per_gpu": np.full(4, 101.0), "peak_memory_bytes": np.full(4, 1.0)}
    assert own_band(measured, predicted) is None  # 4 < MIN_ROWS runs: the shipped band stays


def _profile_file(tmp_path, band):
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump({"trainer": "megatron", "hardware": "h100-sxm",
                                    "physical_efficiency": {"gemm_efficiency_max": 0.7}, "band": band}))
    return path


def test_a_profile_with_its_own_band_gives_it_to_search_and_estimate(tmp_path):
    band = {"tokens_per_s": [0.95, 1.04], "rows": 12, "memory_rows": 3, "rule": "test"}
    profile = apply_profile_file(load_profile("megatron"), "h100-sxm", _profile_file(tmp_path, band))
    ctx = build_context("llama3-8b", build_training(64, 8192, 512), trainer="megatron")
    shipped = context_band(ctx)
    mine = context_band(ctx.__class__(**{**ctx.__dict__, "profile": profile}))
    assert (mine.tokens_low_factor, mine.tokens_high_factor, mine.num_heldout_rows) == (0.95, 1.04, 12)
    assert "your calibration" in mine.group
    # too few memory runs (3 < 5): the memory band stays the shipped one
    assert (mine.memory_low_factor, mine.memory_high_factor) == (shipped.memory_low_factor, shipped.memory_high_factor)


@pytest.mark.parametrize("band, message", [
    ({"tokens_per_s": [1.1, 1.2], "rows": 5}, "0 < low <= 1 <= high"),
    ({"tokens_per_s": [0.9], "rows": 5}, "0 < low <= 1 <= high"),
    ({"tokens_per_s": [0.9, 1.1], "rows": 0}, "rows must be a positive integer"),
    ({"rows": 5}, "tokens_per_s"),
    ("wide", "expected a mapping"),
])
def test_a_malformed_band_is_refused_with_the_rule(tmp_path, band, message):
    with pytest.raises(SpecError, match=message.replace("(", r"\(")):
        apply_profile_file(load_profile("megatron"), "h100-sxm", _profile_file(tmp_path, band))
