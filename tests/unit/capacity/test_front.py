"""The Pareto front, the limits and the chosen point: exact cases and properties (a longer
deadline never costs more, more budget never takes longer, a strictly faster GPU type at the
same price is never dominated)."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest

from autoplan.capacity import run_capacity
from autoplan.capacity.front import choose, chosen_row, pareto_mask, rank_points
from autoplan.paths import data_dir
from tests.unit.capacity.conftest import small_query, small_setup


def points(days, cost, hardware=None):
    n = len(days)
    return pd.DataFrame({"hardware": hardware or ["x"] * n, "gpus": np.arange(1, n + 1) * 8,
                         "train_days": np.asarray(days, float), "cost_usd": np.asarray(cost, float),
                         "feasible": np.isfinite(days), "infeasible_reason": ["" if np.isfinite(d) else "oom"
                                                                              for d in days]})


def test_pareto_mask_small_case():
    # (1, 5) and (2, 3) and (4, 1) trade off; (3, 4) is beaten by (2, 3); (2, 3) twice: both kept
    mask = pareto_mask(np.array([1, 2, 3, 4, 2, np.nan]), np.array([5, 3, 4, 1, 3, 0]))
    assert mask.tolist() == [True, True, False, True, True, False]


def test_pareto_mask_equals_brute_force():
    rng = np.random.default_rng(0)
    days, cost = rng.integers(1, 20, 200).astype(float), rng.integers(1, 20, 200).astype(float)
    brute = [not any((days[j] <= days[i]) and (cost[j] <= cost[i]) and (days[j] < days[i] or cost[j] < cost[i])
                     for j in range(200)) for i in range(200)]
    assert pareto_mask(days, cost).tolist() == brute


def test_limits_and_reasons():
    ranked = rank_points(points([10, 20, 40, np.nan], [9, 5, 4, np.nan]), deadline_days=30, budget_usd=8)
    # 40 days misses the deadline; 9 $ breaks the budget; the cheapest within both is 20 days, 5 $
    assert chosen_row(ranked)["train_days"] == 20
    reasons = dict(zip(ranked["train_days"].fillna(-1), ranked["constraint_reason"]))
    assert reasons[40] == "misses the deadline: 40.0 days > 30 days"
    assert reasons[10].startswith("over budget: $0.00M > $0.00M")
    assert reasons[-1] == "infeasible: oom"
    assert ranked["rank"].tolist() == [1, 2, 3, 4] and ranked.iloc[-1]["feasible"] == np.False_


def test_prefer_time_picks_the_fastest_within_the_limits():
    ranked = rank_points(points([10, 20, 40], [9, 5, 4]), deadline_days=None, budget_usd=6, prefer="time")
    assert chosen_row(ranked)["train_days"] == 20
    assert chosen_row(rank_points(points([10, 20, 40], [9, 5, 4]), None, 6))["train_days"] == 40
    assert chosen_row(rank_points(points([10, 20], [9, 5]), None, 1)) is None


def chosen(frame, deadline, budget, prefer):
    days, cost = frame["train_days"].to_numpy(), frame["cost_usd"].to_numpy()
    index = choose(days, cost, deadline, budget, prefer)
    return (np.inf, np.inf) if index is None else (days[index], cost[index])


def limit_grid(values):
    return [None, *np.quantile(values[np.isfinite(values)], np.linspace(0, 1, 9))]


@pytest.mark.parametrize("prefer", ["cost", "time"])
@pytest.mark.parametrize("seed", range(10))
def test_longer_deadline_never_costs_more_and_more_budget_never_takes_longer_random(seed, prefer):
    rng = np.random.default_rng(seed)
    gpus = rng.integers(1, 64, 30)
    days = 1000 / gpus * rng.uniform(1, 1.5, 30)
    frame = points(days, days * gpus * rng.uniform(1, 2, 30))
    check_monotone(frame, prefer)


@pytest.mark.parametrize("prefer", ["cost", "time"])
def test_properties_hold_on_a_real_run(small_run, prefer):
    check_monotone(small_run.points.drop(columns=["rank", "on_front", "on_type_front", "constraint_reason",
                                                  "chosen"]), prefer)


def check_monotone(frame, prefer):
    deadlines, budgets = limit_grid(frame["train_days"].to_numpy()), limit_grid(frame["cost_usd"].to_numpy())
    for budget in budgets:  # a longer deadline never costs more (None = no deadline, the longest)
        costs = [chosen(frame, d, budget, prefer)[1] for d in [*deadlines[1:], None]]
        assert all(b <= a for a, b in itertools.pairwise(costs)), (budget, costs)
    for deadline in deadlines:  # more budget never takes longer
        days = [chosen(frame, deadline, b, prefer)[0] for b in [*budgets[1:], None]]
        assert all(b <= a for a, b in itertools.pairwise(days)), (deadline, days)


def test_a_strictly_faster_gpu_at_the_same_price_is_never_dominated(tmp_path):
    """A twin of the H100 with 1.5x the compute and HBM bandwidth, priced the same, must take every
    place on the front: each H100 point is beaten at its own GPU count on days and on cost."""
    text = (data_dir("hardware_db") / "gpus" / "h100-sxm.yaml").read_text()
    text = text.replace("name: h100-sxm", "name: h100-fast").replace("aliases: [h100, h100-sxm5, h100-80gb]",
                                                                     "aliases: []")
    text = text.replace("peak_bf16: 989 TFLOP/s", "peak_bf16: 1483 TFLOP/s").replace(
        "hbm_bandwidth: 3.35 TB/s", "hbm_bandwidth: 5.0 TB/s")
    (tmp_path / "h100-fast.yaml").write_text(text)
    query = small_query(("h100-sxm", str(tmp_path / "h100-fast.yaml")), overrides={"*": 2.69})
    ranked = run_capacity(small_setup(), query).points
    by_type = ranked.pivot_table(index="gpus", columns="hardware", values="train_days").dropna()
    assert len(by_type) >= 3 and (by_type["h100-fast"] < by_type["h100-sxm"]).all()  # the premise: strictly faster at every count
    front = ranked[ranked["on_front"]]
    assert len(front) and set(front["hardware"]) == {"h100-fast"}


def test_pessimistic_limits_use_the_slow_end_of_the_error_band(small_run):
    unranked = small_run.points.drop(columns=["rank", "chosen", "on_front", "on_type_front", "constraint_reason"])
    assert "days_high" in unranked  # the run carries the cost model's error band
    deadline = float(np.nanmedian(unranked["days_high"]))
    ranked = rank_points(unranked, deadline, None, pessimistic=True)
    chosen = chosen_row(ranked)
    assert chosen is not None and chosen["days_high"] <= deadline
    assert chosen["cost_usd"] == ranked.loc[ranked["days_high"] <= deadline, "cost_usd"].min()
    point_only = ranked[(ranked["train_days"] <= deadline) & (ranked["days_high"] > deadline)]
    assert len(point_only) and point_only["constraint_reason"].str.startswith(
        "misses the deadline at the slow end of the error band").all()
    # the properties hold with pessimistic limits too
    days, cost = unranked["train_days"].to_numpy(), unranked["cost_usd"].to_numpy()
    high_days, high_cost = unranked["days_high"].to_numpy(), unranked["cost_high_usd"].to_numpy()
    costs = [cost[i] if (i := choose(days, cost, d, None, "cost", high_days, high_cost)) is not None else np.inf
             for d in np.quantile(high_days[np.isfinite(high_days)], np.linspace(0, 1, 9))]
    assert all(b <= a for a, b in itertools.pairwise(costs))
