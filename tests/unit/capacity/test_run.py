"""The capacity run end to end in the library: phases summed with their own layouts, the chosen
point, the files (capacity.csv parses back; plans.json is what `autoplan export` reads)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from autoplan.capacity.files import read_capacity_csv, write_capacity
from autoplan.capacity.front import chosen_row, rank_points
from autoplan.export import read_plans, select_plan
from autoplan.layout_records import layout_from_record
from autoplan.specs.training import TrainingSpec


def test_days_are_the_sum_of_each_phases_time_with_its_own_layout(small_run):
    for (hardware, gpus), bests in small_run.bests.items():
        row = small_run.points[(small_run.points["hardware"] == hardware) & (small_run.points["gpus"] == gpus)].iloc[0]
        if not row["feasible"]:
            continue
        # days = sum over phases of tokens / (tokens/s per GPU of the job x GPUs of the job) / 86400
        expected = sum(b.phase_tokens / (b.tokens_per_s_per_gpu * b.job_gpus) for b in bests) / 86_400
        assert row["train_days"] == pytest.approx(expected, rel=1e-12)
        assert row["gpu_hours"] == pytest.approx(expected * 24 * gpus, rel=1e-12)
        assert row["cost_usd"] == pytest.approx(row["gpu_hours"] * small_run.query.prices[hardware].usd_per_gpu_hour)
        assert [b.gbs_seqs for b in bests] == [128, 256]  # 1M and 2M tokens of 8192-token sequences


def test_every_point_has_a_layout_or_a_reason(small_run):
    points = small_run.points
    assert points["feasible"].any()
    assert (points.loc[points["feasible"], "layout"] != "").all()
    assert (points.loc[~points["feasible"], "constraint_reason"].str.startswith("infeasible: ")).all()


def test_chosen_point_is_on_the_front_within_the_limits_and_ranked_first(small_run):
    days = float(np.nanmedian(small_run.points["train_days"]))
    unranked = small_run.points.drop(columns=["rank", "chosen", "on_front", "on_type_front", "constraint_reason"])
    ranked = rank_points(unranked, deadline_days=days, budget_usd=None)
    chosen = chosen_row(ranked)
    assert chosen is not None and chosen["rank"] == 1 and chosen["on_front"]
    assert chosen["train_days"] <= days and chosen["constraint_reason"] == ""
    within = ranked[ranked["train_days"] <= days]
    assert chosen["cost_usd"] == within["cost_usd"].min()
    assert chosen_row(rank_points(unranked, deadline_days=1e-3, budget_usd=None)) is None
    # without limits the run chose the cheapest of all
    assert small_run.chosen["cost_usd"] == small_run.points["cost_usd"].min()


def test_capacity_csv_parses_back_and_plans_json_exports(small_run, tmp_path):
    inputs = {"model": "llama3-8b"}
    written = write_capacity(small_run, tmp_path, inputs=inputs, command_line=["autoplan", "capacity"])
    assert written == ["capacity.csv", "plans.json", "manifest.json"]
    back = read_capacity_csv(tmp_path / "capacity.csv")
    points = small_run.points
    assert back["hardware"].tolist() == points["hardware"].tolist() and back["gpus"].tolist() == points["gpus"].tolist()
    np.testing.assert_allclose(back["train_days"], points["train_days"], rtol=1e-8)
    assert back["chosen"].dtype == bool and back["chosen"].tolist() == points["chosen"].tolist()
    assert back["constraint_reason"].tolist() == points["constraint_reason"].tolist()
    plans = read_plans(tmp_path / "plans.json")
    chosen = small_run.chosen
    assert plans["hardware"] == chosen["hardware"] and len(plans["plans"]) == 2  # one record per phase
    assert plans["setup"] == small_run.setup.settings  # the trainer settings export reads back
    for phase, best in enumerate(small_run.phase_bests(chosen["hardware"], chosen["gpus"]), start=1):
        record = select_plan(plans["plans"], phase)
        assert record["gbs_seqs"] == best.gbs_seqs and record["gpus"] == best.job_gpus
        training = best.result.training
        assert isinstance(training, TrainingSpec)
        assert layout_from_record(record, training).describe() == best.layout
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["prices"][chosen["hardware"]]["source"]


@pytest.mark.parametrize("deadline_days", [20.0, 40.0])
def test_a_looser_batch_tolerance_never_gives_a_dearer_answer(deadline_days):
    """`capacity -m 70b --train-tokens 15T --gbs-tokens 4M --deadline 60d` chose 2,304 GB200 for
    $9.85M at --gbs-tolerance 0 and 4,176 for $11.06M at 0.05 (2,304 dropped out of its grid); the
    tolerant run now searches the exact-batch grid too and every count around the cheapest one."""
    import dataclasses

    from autoplan.capacity import run_capacity

    from tests.unit.capacity.conftest import small_query, small_setup

    costs = {}
    for tolerance in (0.0, 0.05):
        setup = dataclasses.replace(small_setup(), gbs_tolerance=tolerance)
        chosen = chosen_row(run_capacity(setup, small_query(deadline_days=deadline_days)).points)
        assert chosen is not None
        costs[tolerance] = float(chosen["cost_usd"])
    assert costs[0.05] <= costs[0.0], costs


def test_the_counts_around_the_cheapest_point_within_the_limits_are_all_tried():
    """Days and cost saw-tooth from one count to the next: every usable count within a factor √2 of
    the cheapest point meeting the deadline is searched (at most 16)."""
    import dataclasses

    from autoplan.capacity import run_capacity
    from autoplan.capacity.grid import GRID_RATIO

    from tests.unit.capacity.conftest import small_query, small_setup

    result = run_capacity(dataclasses.replace(small_setup(), gbs_tolerance=0.05), small_query(deadline_days=20.0))
    chosen = chosen_row(result.points)
    tried = sorted(gpus for hardware, gpus in result.bests if hardware == chosen["hardware"])
    nearby = [n for n in range(64, 1025, 8) if chosen["gpus"] / GRID_RATIO <= n <= chosen["gpus"] * GRID_RATIO]
    assert len(set(nearby) & set(tried)) >= min(len(nearby), 16), (chosen["gpus"], tried)


def test_a_gpu_type_with_no_point_within_the_limits_does_not_stop_the_run():
    """With four GPU types and a budget, `capacity` crashed (KeyError: 'h200') when one type had no
    point within the limits to search around."""
    import dataclasses

    from autoplan.capacity import run_capacity

    from tests.unit.capacity.conftest import small_query, small_setup

    setup = dataclasses.replace(small_setup(), gbs_tolerance=0.05)
    result = run_capacity(setup, small_query(overrides={"h200": 1e6}, budget_usd=1e9))
    chosen = chosen_row(result.points)
    assert chosen is not None and chosen["hardware"] == "h100-sxm"
