"""Optuna samplers (tpe, random, nsga2) over a static search space, asked and told in batches.

Every knob is a ``CategoricalDistribution`` of the space's values, so the search space is static
(Optuna's ``ask(fixed_distributions)``). Trials are asked ``batch_size`` at a time, their layouts
evaluated in ONE ``evaluate`` call, and told with ``trial.set_constraint`` for legality, memory
and batch (Optuna >= 5; feasible when every constraint is <= 0). TPE runs multivariate with the
constant liar so a batch spreads out; a few known-good layouts (TP inside a node, distributed
optimizer, selective or full recompute, each pipeline depth) are enqueued first.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable

import numpy as np

from autoplan.cost.context import CostContext
from autoplan.cost.evaluate import CostTable
from autoplan.search import recipe
from autoplan.search.recipe import RecipeCounts
from autoplan.search.storage import POLISH_ATTR, StudyStore
from autoplan.search.trials import (
    degree_trial_data,
    distributions,
    frozen_trials,
    trial_data,
)
from autoplan.space import KNOBS, SearchSpace, layouts_from_values, params_to_values

OBJECTIVES = {"exhaustive": ("maximize",), "tpe": ("maximize",), "random": ("maximize",),
              "nsga2": ("maximize", "maximize")}  # tokens/s/GPU (and memory headroom for nsga2)
BATCH_SIZE = 16


def make_sampler(name: str, seed: int | None):
    import optuna

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        if name == "tpe":
            return optuna.samplers.TPESampler(seed=seed, multivariate=True, constant_liar=True,
                                              n_startup_trials=2 * BATCH_SIZE)
        if name == "nsga2":
            return optuna.samplers.NSGAIISampler(seed=seed, population_size=4 * BATCH_SIZE)
        if name in ("random", "exhaustive"):
            return optuna.samplers.RandomSampler(seed=seed)
    raise AssertionError(f"no Optuna sampler for {name!r}")


def baselines(ctx: CostContext, space: SearchSpace) -> list[dict]:
    """Known-good layouts to try first: the largest TP inside a node that divides the heads,
    ZeRO-1 where available, selective or full recompute, each pipeline depth in the space."""
    v, m = space.values, ctx.model
    node = ctx.cluster.gpus_per_node
    tps = [t for t in v["tp"] if m.num_attention_heads % t == 0 and m.num_kv_heads % t == 0 and t <= node]
    experts = m.moe.num_experts if m.moe else 1
    eps = [e for e in v["ep"] if experts % e == 0]
    base = {k: v[k][0] for k in KNOBS}
    base.update(tp=max(tps or v["tp"][:1]), ep=max(eps or v["ep"][:1]),
                zero=1 if 1 in v["zero"] else v["zero"][0])
    modes = [r for r in ("selective", "full") if r in v["recompute"]] or [v["recompute"][0]]
    return [{**base, "pp": pp, "recompute": rc} for pp in v["pp"] for rc in modes]


def run_optuna(ctx: CostContext, space: SearchSpace, store: StudyStore, *,
               sampler: str, trials: int, allow_uneven: bool = True,
               progress: Callable[[int, int], None] | None = None,
               deadline: float | None = None) -> tuple[CostTable, RecipeCounts]:
    """Ask and tell until the study holds ``trials`` finished trials (resumed ones count) or the
    deadline passes; returns every layout the study has tried, assessed, and the counts."""
    ask_and_tell(ctx, space, store, sampler=sampler, trials=trials, allow_uneven=allow_uneven,
                 progress=progress, deadline=deadline)
    return finish(ctx, space, store, sampler=sampler, allow_uneven=allow_uneven)


def ask_and_tell(ctx: CostContext, space: SearchSpace, store: StudyStore, *,
                 sampler: str, trials: int, quota: int | None = None, baselines_first: bool = True,
                 allow_uneven: bool = True, progress: Callable[[int, int], None] | None = None,
                 deadline: float | None = None) -> int:
    """Ask, evaluate and tell trials in batches until the study holds ``trials`` finished
    trials, this process has asked ``quota`` of them, or the deadline passes. With a storage,
    each batch is written and the trials other processes wrote are copied in before the next
    one; the write keeps the study's sampled trials within ``trials`` whatever the number of
    processes (:func:`~autoplan.search.storage.bulk_add`), and a batch cut there ends the
    loop. Returns how many trials this process told."""
    import optuna

    n_obj = len(OBJECTIVES[sampler])
    work, dists = store.working, distributions(space)
    quota = trials if quota is None else quota
    if baselines_first and not work.get_trials(deepcopy=False):
        for params in baselines(ctx, space)[:min(trials, quota)]:
            work.enqueue_trial(params, skip_if_exists=True)
    complete = (optuna.trial.TrialState.COMPLETE,)
    done, told = len(work.get_trials(deepcopy=False, states=complete)), 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        while done < trials and told < quota and not (deadline is not None and done
                                                      and time.monotonic() > deadline):
            asked = [work.ask(dists) for _ in range(min(BATCH_SIZE, trials - done, quota - told))]
            try:
                _tell_batch(ctx, space, work, asked, n_obj, allow_uneven)
            except BaseException:
                _fail_unfinished(work, asked)
                store.flush()
                raise
            full = store.persistent is not None and store.flush(limit=trials) < len(asked)
            told += len(asked)
            done += len(asked) + store.sync()
            if progress is not None:
                progress(done, trials)
            if full:  # other processes filled the study to ``trials``: this batch was cut there
                break
    return told


def finish(ctx: CostContext, space: SearchSpace, store: StudyStore, *,
           sampler: str, allow_uneven: bool = True) -> tuple[CostTable, RecipeCounts]:
    """Assess every layout the study has tried; tpe adds its local polish (the improvements go
    into the study too)."""
    import optuna

    store.sync()
    complete = (optuna.trial.TrialState.COMPLETE,)
    tried = [t.params for t in store.working.get_trials(deepcopy=False, states=complete)]
    table, counts = assess_params(ctx, space, tried, allow_uneven=allow_uneven)
    if sampler != "tpe":
        return table, counts
    from autoplan.search.polish import polish

    found = polish(ctx, space, table, allow_uneven=allow_uneven)
    _add_improvements(space, store, table, found)
    final = recipe.concat([table, found])
    final_counts = recipe.count(final, dropped_degrees=counts.reasons.get("degrees", 0))
    final_counts.space_size = space.size
    return final, final_counts


def _add_improvements(space, store: StudyStore, table: CostTable, found: CostTable,
                      limit: int = 64) -> None:
    """Add the polished layouts that beat every trial (at most ``limit``) to the study."""
    best = table["tokens_per_s_per_gpu"][table["feasible"]].max(initial=-np.inf)
    tps = found["tokens_per_s_per_gpu"]
    better = np.flatnonzero(found["feasible"] & (tps > best))
    better = better[np.argsort(-tps[better], kind="stable")][:limit]
    if len(better):
        store.working.add_trials(frozen_trials(space, recipe.take(found, np.sort(better)), 1,
                                               system_attrs={POLISH_ATTR: True}))
        store.flush()


def _tell_batch(ctx, space, work, asked, n_obj, allow_uneven) -> None:
    batch, kept, reaches = layouts_from_values(params_to_values(space, [t.params for t in asked]), ctx.training)
    data = trial_data(recipe.assess(ctx, batch, reaches, allow_uneven=allow_uneven), n_obj)
    rows = iter(data)
    for trial, ok in zip(asked, kept):
        values, constraints, user = next(rows) if ok else degree_trial_data(n_obj)
        for key, value in constraints.items():
            trial.set_constraint(key, value)
        for key, value in user.items():
            trial.set_user_attr(key, value)
        work.tell(trial, values if n_obj > 1 else values[0])


def _fail_unfinished(work, asked) -> None:
    import optuna

    for trial in asked:
        work.tell(trial, state=optuna.trial.TrialState.FAIL, skip_if_finished=True)


def assess_params(ctx: CostContext, space: SearchSpace, params: list[dict], *,
                  allow_uneven: bool = True) -> tuple[CostTable, RecipeCounts]:
    """Assess the distinct layouts among ``params``, in a canonical order (so the numbers do
    not depend on the order trials came in)."""
    keys = sorted({tuple(p[k] for k in KNOBS) for p in params},
                  key=lambda key: tuple(space.values[k].index(x) for k, x in zip(KNOBS, key)))
    values = params_to_values(space, [dict(zip(KNOBS, key)) for key in keys])
    batch, kept, reaches = layouts_from_values(values, ctx.training)
    table = recipe.assess(ctx, batch, reaches, allow_uneven=allow_uneven)
    counts = recipe.count(table, dropped_degrees=int((~kept).sum()))
    counts.space_size = space.size
    return recipe.compact(table), counts
