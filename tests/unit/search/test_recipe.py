"""The recipe's Pareto front: one array implementation, used by the nsga2 result and the plots."""

import numpy as np

from autoplan.api import build_context, build_training
from autoplan.search import SearchOptions, recipe, search
from autoplan.space import load_space


def test_pareto_indices():
    memory = np.array([10.0, 20.0, 15.0, 30.0, 20.0])
    throughput = np.array([1.0, 3.0, 0.5, 2.0, 2.5])
    # 10 GiB/1.0 and 20 GiB/3.0 are not beaten; 15/0.5, 30/2.0 and 20/2.5 are.
    assert recipe.pareto_indices(memory, throughput).tolist() == [0, 1]
    # of identical points the first only; none from no points
    assert recipe.pareto_indices(np.array([5.0, 5.0]), np.array([1.0, 1.0])).tolist() == [0]
    assert recipe.pareto_indices(np.zeros(0), np.zeros(0)).tolist() == []


def test_the_front_of_a_table_is_its_feasible_rows_that_no_feasible_row_dominates():
    ctx = build_context("8b", build_training(64, 8192, 256))
    space = load_space("default").with_overrides(tp=(1, 2, 4), pp=(1, 2), vpp=(1,), mbs=(1, 2))
    table = search(ctx, space, SearchOptions(sampler="exhaustive")).table
    tps, room, feasible = table["tokens_per_s_per_gpu"], table["memory_headroom_gib"], table["feasible"]
    front = recipe.pareto_front(table)
    assert front.any() and not (front & ~feasible).any()
    rows = np.arange(len(table))
    for i in np.flatnonzero(feasible):
        beaten = feasible & (tps >= tps[i]) & (room >= room[i]) & ((tps > tps[i]) | (room > room[i]))
        earlier_twin = feasible & (tps == tps[i]) & (room == room[i]) & (rows < i)
        assert front[i] == (not beaten.any() and not earlier_twin.any())
