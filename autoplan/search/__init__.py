"""Search: find the layouts that fit, reach the global batch and train fastest.

``search(ctx, space, options)`` runs one sampler and returns a ``SearchResult``: the best
``options.keep_rows`` layouts it evaluated, ranked by the recipe (:mod:`autoplan.search.recipe`),
the stage counts of every layout, and the Optuna study that holds the trials (for
``--storage``, resume and optuna-dashboard).

Samplers: ``exhaustive`` (every layout, the exact reference, streamed in chunks with bounded
memory: :mod:`autoplan.search.exhaustive`), ``tpe`` and ``random`` (Optuna, single objective
tokens/s/GPU), ``nsga2`` (Optuna, tokens/s/GPU and memory headroom; its result is the Pareto
front) and ``auto`` (exhaustive when the space holds at most ``AUTO_EXHAUSTIVE_LIMIT`` layouts,
about a minute of evaluation on one core, else tpe). The exhaustive sampler walks the whole
product of the space (``space.size``, before layouts whose dp is not an integer are dropped),
so a product above ``EXHAUSTIVE_LIMIT`` is refused up front.

``workers > 1`` runs that many processes on one study through the storage
(:mod:`autoplan.search.parallel`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from autoplan.cost.context import CostContext
from autoplan.cost.evaluate import CostTable, evaluate
from autoplan.errors import AutoplanError, NoFeasiblePlanError, UnknownNameError
from autoplan.search import recipe
from autoplan.search.recipe import RecipeCounts
from autoplan.search.study import open_store
from autoplan.search.topk import DEFAULT_KEEP_ROWS
from autoplan.space import SearchSpace, check_not_empty
from autoplan.specs.training import TrainingSpec

SAMPLERS = ("auto", "exhaustive", "tpe", "nsga2", "random")
# Streamed, the exhaustive sampler's memory does not grow with the space, only its time: ~1 min
# for 10^8 layouts on one core (most of a large product has a non-integer dp or breaks a rule,
# and is counted without being costed).
AUTO_EXHAUSTIVE_LIMIT = 100_000_000
EXHAUSTIVE_LIMIT = 1_000_000_000


@dataclass(frozen=True)
class SearchOptions:
    """How to search. ``trials`` counts the study's finished trials, resumed ones included."""

    sampler: str = "auto"
    trials: int = 1000
    timeout_s: float | None = None
    seed: int | None = 0
    storage: str | None = None
    study_name: str | None = None
    allow_uneven_pp: bool = True
    workers: int = 1  # processes sharing the study (needs a storage when > 1)
    keep_rows: int = DEFAULT_KEEP_ROWS  # the best rows kept (plans.csv); counts cover every layout

    def __post_init__(self) -> None:
        if self.sampler not in SAMPLERS:
            raise UnknownNameError("sampler", self.sampler, SAMPLERS)
        if self.trials < 1:
            raise AutoplanError(f"trials must be >= 1, got {self.trials}")
        if self.timeout_s is not None and not self.timeout_s > 0:
            raise AutoplanError(f"timeout must be > 0 seconds, got {self.timeout_s}")
        if isinstance(self.workers, bool) or not isinstance(self.workers, int) or self.workers < 1:
            raise AutoplanError(f"workers must be an integer >= 1, got {self.workers!r}")
        if isinstance(self.keep_rows, bool) or not isinstance(self.keep_rows, int) or self.keep_rows < 1:
            raise AutoplanError(f"keep_rows must be an integer >= 1, got {self.keep_rows!r}")
        if self.workers > 1 and not self.storage:
            raise AutoplanError(f"--workers {self.workers} needs --storage, the study the workers share: "
                                "e.g. --storage sqlite:///results/study.db (or a journal file "
                                "results/study.log; postgresql://user@host/db across machines)")


@dataclass
class SearchResult:
    """The best evaluated layouts, ranked (row 0 is the best plan), with the recipe's counts of
    every layout and the closest misses (why nothing is feasible, when nothing is)."""

    ctx: CostContext
    space: SearchSpace
    options: SearchOptions
    sampler: str  # the sampler that ran (auto resolved)
    table: CostTable
    reasons: np.ndarray  # per row: '' when feasible, else why not (see recipe.reasons)
    counts: RecipeCounts
    elapsed_s: float
    store: Any = None  # StudyStore, or None until ``study`` is first asked for (exhaustive)
    misses: CostTable | None = None  # ranked; the closest misses (None: ``table`` holds every row)

    @property
    def num_ranked(self) -> int:
        """Layouts assessed and ranked in all, of which ``table`` holds the best."""
        return max(self.counts.assessed, len(self.table))

    @property
    def training(self) -> TrainingSpec:
        return self.ctx.training

    @property
    def feasible(self) -> np.ndarray:
        return self.table["feasible"]

    def plan_rows(self, k: int | None = None) -> np.ndarray:
        """Rows of the best plans: the feasible ones in rank order (nsga2: the Pareto front)."""
        rows = np.flatnonzero(self.table["pareto"] if self.sampler == "nsga2" else self.feasible)
        return rows if k is None else rows[:k]

    def top_records(self, k: int) -> list[dict[str, Any]]:
        """The best ``k`` plans as flat records: rank, layout fields, seq_len, gbs_seqs and
        every prediction (with the full memory breakdown, re-evaluated for these few)."""
        rows = self.plan_rows(k)
        full = evaluate(self.ctx, self.table.batch.take(rows), allow_uneven=self.options.allow_uneven_pp)
        records = []
        for j, row in enumerate(rows):
            rec: dict[str, Any] = {"rank": int(row) + 1, **self.table.batch.layout(int(row)).to_record(self.training)}
            for source in (full.columns, self.table.columns):
                for name, values in source.items():
                    index = j if source is full.columns else row
                    rec[name] = _plain(values[index])
            rec["infeasible_reason"] = self.reasons[row]
            for internal in ("reason_code", "stage"):
                rec.pop(internal, None)
            records.append(rec)
        return records

    def to_frame(self, rows: int | None = None):
        """Every evaluated layout (or the first ``rows``), ranked, as a DataFrame (plans.csv)."""
        table = self.table
        if rows is not None and rows < len(table):
            table = recipe.take(table, np.arange(rows))
        frame = table.to_frame()
        frame["infeasible_reason"] = self.reasons[:len(frame)]
        frame.insert(0, "rank", np.arange(1, len(frame) + 1))
        return frame.drop(columns=["reason_code", "stage"])

    def check_feasible(self) -> None:
        """Raise ``NoFeasiblePlanError`` (exit code 1) saying why when no plan is feasible."""
        if not self.feasible.any():
            misses = self.misses if self.misses is not None else self.table
            raise NoFeasiblePlanError(recipe.infeasible_message(
                self.ctx, misses, self.counts, self.space.values))

    @property
    def study(self):
        """The Optuna study holding every trial (built on first use for the exhaustive sampler
        without storage)."""
        if self.store is None:
            self.store = _store_exhaustive(self, open_store(self.ctx, self.space, self.options,
                                                            "exhaustive"))
        return self.store.study


def _plain(value: Any) -> Any:
    if isinstance(value, (np.bool_, bool)):
        return bool(value)
    value = float(value)
    return value if np.isfinite(value) else None


def search(ctx: CostContext, space: SearchSpace, options: SearchOptions = SearchOptions(),
           progress: Callable[[int, int], None] | None = None) -> SearchResult:
    """Run the recipe with ``options.sampler``; see the module docstring."""
    start = time.monotonic()
    enumerable = check_not_empty(space, ctx.training)
    sampler = choose_sampler(options.sampler, space, enumerable)
    deadline = start + options.timeout_s if options.timeout_s else None
    ranked, misses, counts, store = _run(ctx, space, options, sampler, progress, deadline)
    result = SearchResult(ctx=ctx, space=space, options=options, sampler=sampler,
                          table=ranked, reasons=recipe.reasons(ranked), counts=counts,
                          elapsed_s=0.0, store=store, misses=misses)
    if sampler == "exhaustive" and options.storage:
        result.study  # noqa: B018 - writes the trials to the storage now
    result.elapsed_s = time.monotonic() - start
    return result


def choose_sampler(sampler: str, space: SearchSpace, enumerable: int) -> str:
    """The sampler to run: ``auto`` resolved by the size of the product the exhaustive sampler
    would walk; an explicit ``exhaustive`` above ``EXHAUSTIVE_LIMIT`` raises ``AutoplanError``."""
    if sampler == "auto":
        small = max(enumerable, space.size) <= AUTO_EXHAUSTIVE_LIMIT
        return "exhaustive" if small else "tpe"
    if sampler == "exhaustive" and space.size > EXHAUSTIVE_LIMIT:
        raise AutoplanError(
            f"--sampler exhaustive: the space holds {space.size:.3g} layouts, more than the "
            f"{EXHAUSTIVE_LIMIT:.3g} it can walk: use --sampler tpe (or auto), or a smaller space "
            "(fewer --tp/--pp/--mbs values)")
    return sampler


def _run(ctx, space, options: SearchOptions, sampler: str, progress, deadline):
    """(ranked table, closest misses, counts, store) of ``sampler``: in this process, or in
    ``options.workers``."""
    from autoplan.search import parallel

    if sampler == "exhaustive" and options.workers == 1:
        from autoplan.search.exhaustive import run_exhaustive

        return (*run_exhaustive(ctx, space, allow_uneven=options.allow_uneven_pp, keep=options.keep_rows,
                                progress=progress, deadline=deadline), None)
    if sampler == "exhaustive":
        store = open_store(ctx, space, options, sampler)
        return (*parallel.run_exhaustive_parallel(ctx, space, options, store, progress=progress,
                                                  deadline=deadline), store)
    table, counts, store = _run_optuna(ctx, space, options, sampler, progress, deadline)
    table.columns["pareto"] = recipe.pareto_front(table)
    ranked = recipe.take(table, recipe.rank_order(table))
    return ranked, None, counts, store


def _run_optuna(ctx, space, options: SearchOptions, sampler: str, progress, deadline):
    """(table, counts, store) of an Optuna sampler."""
    from autoplan.search import parallel
    from autoplan.search.optuna_search import run_optuna

    store = open_store(ctx, space, options, sampler)
    if options.workers > 1:
        table, counts = parallel.run_optuna_parallel(ctx, space, options, store, sampler=sampler,
                                                     progress=progress, deadline=deadline)
    else:
        table, counts = run_optuna(ctx, space, store, sampler=sampler, trials=options.trials,
                                   allow_uneven=options.allow_uneven_pp, progress=progress,
                                   deadline=deadline)
    return table, counts, store


def _store_exhaustive(result: SearchResult, store):
    """Add the exhaustive result's layouts to the study, skipping those it already holds."""
    from autoplan.search.exhaustive import store_layouts

    store_layouts(store, result.space, [result.table])
    return store
