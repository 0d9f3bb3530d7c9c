"""Trials from assessed layouts: what an Optuna study is told about each one.

Objective values (tokens/s/GPU, and memory headroom for nsga2), constraints (feasible when every
one is <= 0) and user attributes for every row of an assessed ``CostTable``, as arrays and as
finished trials. Used by the Optuna samplers (ask and tell) and by the exhaustive sampler (its
bulk add to a storage) alike.
"""

from __future__ import annotations

import numpy as np

from autoplan.cost.evaluate import CostTable
from autoplan.search import recipe
from autoplan.space import KNOBS, SearchSpace

ILLEGAL_VIOLATION = 1000.0  # GiB-equivalents: worse than any memory excess
ATTR_COLUMNS = ("dp", "grad_acc", "gbs_seqs")


def distributions(space: SearchSpace) -> dict:
    """Every knob as a categorical of the space's values (a static search space)."""
    from optuna.distributions import CategoricalDistribution

    return {k: CategoricalDistribution(list(space.values[k])) for k in KNOBS}


def outcomes(table: CostTable, n_objectives: int) -> dict[str, np.ndarray]:
    """Objective values and constraint values of every assessed layout, as arrays.

    Constraints (feasible when <= 0): ``legal`` (0, or ILLEGAL_VIOLATION when a rule is
    broken), ``memory_gib`` (peak - usable memory), ``batch_pct`` (|gbs reached - gbs| / gbs in
    percent, minus the tolerance).
    """
    legal = table["reason_code"] == 0
    tps = np.nan_to_num(table["tokens_per_s_per_gpu"], nan=0.0, posinf=0.0, neginf=0.0)
    room = np.nan_to_num(table["memory_headroom_gib"], nan=0.0, posinf=0.0, neginf=0.0)
    target = table.training
    miss = np.abs(table.batch.gbs_seqs - target.gbs_seqs) / target.gbs_seqs * 100.0
    out = {"value0": np.where(legal, tps, 0.0),
           "legal": np.where(legal, 0.0, ILLEGAL_VIOLATION),
           "memory_gib": np.where(legal, -room, 0.0),
           "batch_pct": np.where(legal, miss - 100.0 * target.gbs_tolerance, 0.0)}
    if n_objectives == 2:
        out["value1"] = np.where(legal, room, 0.0)
    return out


def trial_data(table: CostTable, n_objectives: int) -> list[tuple]:
    """(values, constraints, user_attrs) per row, as plain Python values."""
    out = outcomes(table, n_objectives)
    reasons = recipe.reasons(table)
    peak = np.round(np.nan_to_num(table["peak_memory_gib"], nan=-1.0), 3)
    attrs = {k: getattr(table.batch, k).astype(int) for k in ATTR_COLUMNS}
    rows = []
    for i in range(len(table)):
        values = [float(out[f"value{j}"][i]) for j in range(n_objectives)]
        constraints = {k: float(out[k][i]) for k in ("legal", "memory_gib", "batch_pct")}
        user = {k: int(attrs[k][i]) for k in ATTR_COLUMNS}
        user.update(reason=reasons[i], peak_memory_gib=float(peak[i]))
        rows.append((values, constraints, user))
    return rows


def degree_trial_data(n_objectives: int) -> tuple:
    """What a trial whose dp = gpus/(tp·pp·cp) is not an integer is told."""
    return ([0.0] * n_objectives, {"legal": ILLEGAL_VIOLATION, "memory_gib": 0.0, "batch_pct": 0.0},
            {"reason": "degrees"})


def frozen_trials(space: SearchSpace, table: CostTable, n_objectives: int,
                  system_attrs: dict | None = None) -> list:
    """Finished trials for the assessed layouts (bulk adds: the exhaustive sampler's layouts,
    tpe's polished improvements), each with ``system_attrs``."""
    import optuna

    dists = distributions(space)
    params = [{k: recipe.describe_knob(k, getattr(table.batch, k)[i]) for k in KNOBS}
              for i in range(len(table))]
    return [optuna.trial.create_trial(params=p, distributions=dists, values=values, user_attrs=user,
                                      system_attrs=dict(system_attrs or {}), constraints=constraints)
            for p, (values, constraints, user) in zip(params, trial_data(table, n_objectives))]
