"""Parameter counts of the presets against published numbers (cases in param_counts.yaml)."""

from __future__ import annotations


from pathlib import Path

import pytest
import yaml

from autoplan.cost.params import count_params
from autoplan.specs.models import list_models, load_model

CASES_PATH = Path(__file__).with_name("param_counts.yaml")
CASES = yaml.safe_load(CASES_PATH.read_text(encoding="utf-8"))
CASE_KEYS = {"model", "expected_total", "expected_active", "tolerance", "active_tolerance",
             "source"}


def _within(actual: int, expected: int, tolerance: float) -> bool:
    if tolerance == 0:
        return actual == expected
    return abs(actual - expected) <= tolerance * expected


@pytest.mark.parametrize("case", CASES, ids=[case["model"] for case in CASES])
def test_total_params(case):
    model = load_model(case["model"])
    assert _within(count_params(model).total, case["expected_total"], case["tolerance"]), (
        f"{case['model']}: {count_params(model).total:,} vs {case['expected_total']:,} "
        f"(tolerance {case['tolerance']}, source: {case['source']})")


@pytest.mark.parametrize("case", CASES, ids=[case["model"] for case in CASES])
def test_active_params(case):
    model = load_model(case["model"])
    expected = case.get("expected_active", case["expected_total"])
    tolerance = case.get("active_tolerance", case["tolerance"])
    assert _within(count_params(model).active, expected, tolerance), (
        f"{case['model']}: {count_params(model).active:,} vs {expected:,} "
        f"(tolerance {tolerance}, source: {case['source']})")


def test_cases_are_well_formed():
    for case in CASES:
        assert set(case) <= CASE_KEYS, set(case) - CASE_KEYS
        assert case["source"].strip()
        assert 0 <= case["tolerance"] < 0.05


def test_dense_presets_have_equal_total_and_active():
    for model in list_models():
        if not model.is_moe:
            assert count_params(model).active == count_params(model).total, model.name
        else:
            assert count_params(model).active < count_params(model).total, model.name
