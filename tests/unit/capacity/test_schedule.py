"""The batch schedule '2M:100B,4M:1T,16M' and the capacity query's parsers."""

from __future__ import annotations

import pytest

from autoplan.capacity.query import parse_budget_usd, parse_duration_days
from autoplan.capacity.schedule import BatchPhase, parse_gbs_schedule
from autoplan.errors import AutoplanError

M = 2**20  # batch sizes are binary (the field's convention); run token counts decimal


def test_phases_cover_the_run():
    phases = parse_gbs_schedule("2M:100B,4M:1T,16M", 15e12)
    # 100B, then 1T - 100B = 900B, then 15T - 1T = 14T
    assert phases == (BatchPhase(2 * M, 100e9), BatchPhase(4 * M, 900e9), BatchPhase(16 * M, 14e12))
    assert sum(p.tokens for p in phases) == 15e12


@pytest.mark.parametrize("text, match", [
    ("2M:100B,4M", None), ("2M", None),
    ("2M:100B,4M:1T", "last phase"), ("2M,4M", "needs :UNTIL"),
    ("2M:1T,4M:100B,8M", "must grow"), ("2M:20T,4M", "must grow"), ("2M:15T,4M", "must grow"),
    ("2X:1T,4M", "global batch"), ("2M:soon,4M", "token count")])
def test_schedule_rules(text, match):
    if match is None:
        assert parse_gbs_schedule(text, 15e12)
        return
    with pytest.raises(AutoplanError, match=match):
        parse_gbs_schedule(text, 15e12)


@pytest.mark.parametrize("text, days", [("90d", 90), ("90", 90), ("12w", 84), ("2160h", 90), ("1.5 days", 1.5)])
def test_durations(text, days):
    assert parse_duration_days(text) == pytest.approx(days)


@pytest.mark.parametrize("text", ["soon", "-3d", "0d", "3y"])
def test_bad_durations(text):
    with pytest.raises(AutoplanError, match="--deadline"):
        parse_duration_days(text)


def test_budget_is_decimal_dollars():
    assert parse_budget_usd("20M") == 20e6 and parse_budget_usd("$2.5e7") == 2.5e7
    with pytest.raises(AutoplanError, match="--budget"):
        parse_budget_usd("lots")
