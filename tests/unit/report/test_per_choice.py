"""The best plan per strategy knob value (pipeline schedule): rank, tokens/s and why a value
has no plan, checked against the ranked table itself."""

from __future__ import annotations

import numpy as np
import pytest

from autoplan.api import build_context, build_training
from autoplan.layout import PP_SCHEDULES
from autoplan.report.per_choice import best_per_choice, per_choice_lines, per_choice_summary
from autoplan.search import SearchOptions, search
from autoplan.space import load_space

SCHEDULES = ("default", "zb-v", "dualpipe")  # torchtitan runs zb-v; DualPipe in no trainer


@pytest.fixture(scope="module")
def result():
    ctx = build_context("8b", build_training(64, 8192, 512, hardware="h100-sxm"), trainer="torchtitan")
    space = load_space("default").with_overrides(pp=(1, 2, 4), vpp=(1, 2), pp_schedule=SCHEDULES)
    return search(ctx, space, SearchOptions(sampler="exhaustive"))


def test_each_value_gets_the_first_ranked_plan_with_that_value(result):
    (choices,) = best_per_choice(result).values()
    plans = np.flatnonzero(result.feasible)
    codes = result.table.batch.pp_schedule[plans]
    found = {c.value: c for c in choices if c.rank is not None}
    assert set(found) == {"default", "zb-v"}
    for value, choice in found.items():
        first = plans[codes == PP_SCHEDULES.index(value)][0]
        assert choice.rank == result.ranks[first]
        assert choice.tokens_per_s_per_gpu == result.table["tokens_per_s_per_gpu"][first]
    assert min(c.rank for c in found.values()) == 1
    ranks = [c.rank for c in choices if c.rank is not None]
    assert ranks == sorted(ranks)


def test_a_value_without_plans_says_why(result):
    (choices,) = best_per_choice(result).values()
    dual = [c for c in choices if c.value == "dualpipe"]
    assert dual and dual[0].rank is None and dual[0].reason == "trainer_pp_schedule"
    (line,) = per_choice_lines(result)
    assert line.startswith("Best per pp_schedule (tokens/s/GPU): ")
    assert "dualpipe: no feasible plan (trainer_pp_schedule)" in line and "(rank 1)" in line
    summary = per_choice_summary(result)["pp_schedule"]
    assert [c["value"] for c in summary][-1] == "dualpipe" and summary[-1]["rank"] is None


def test_nothing_is_said_when_one_value_was_searched():
    ctx = build_context("8b", build_training(64, 8192, 512, hardware="h100-sxm"), trainer="megatron")
    result = search(ctx, load_space("default").with_overrides(pp=(1, 2)), SearchOptions(sampler="exhaustive"))
    assert best_per_choice(result) == {} and per_choice_lines(result) == []
    assert np.all(result.table.batch.pp_schedule == 0)
