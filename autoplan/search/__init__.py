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
from functools import cached_property
from typing import Any

import numpy as np

from autoplan.cost.context import CostContext
from autoplan.cost.evaluate import CostTable, evaluate
from autoplan.errors import AutoplanError, NoFeasiblePlanError, UnknownNameError
from autoplan.search import recipe
from autoplan.search.recipe import RecipeCounts
from autoplan.search.study import open_store
from autoplan.search.ranking import robust_order
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
    allow_idle_gpus: bool = False  # also plan on fewer GPUs than the job's (autoplan.search.idle)

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
    gpu_counts: tuple[int, ...] = ()  # with allow_idle_gpus: the GPU counts planned for

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

    @cached_property
    def _twins(self) -> tuple[np.ndarray, np.ndarray]:
        from autoplan.search.twins import group_twins

        return group_twins(self.table)

    @property
    def twin(self) -> np.ndarray:
        """Per row: True when it is folded into a better-ranked twin (:mod:`autoplan.search.twins`)."""
        return self._twins[0]

    @property
    def variants(self) -> np.ndarray:
        """Per row: the twins folded into it, as text ('' for none)."""
        return self._twins[1]

    @property
    def ranks(self) -> np.ndarray:
        """Per row: its rank once twins are folded (1 = the best plan; a twin has its leader's)."""
        return np.cumsum(~self.twin)

    def plan_rows(self, k: int | None = None) -> np.ndarray:
        """Rows of the best plans: the feasible ones in rank order (nsga2: the Pareto front),
        twins folded into the best-ranked of them."""
        rows = np.flatnonzero((self.table["pareto"] if self.sampler == "nsga2" else self.feasible) & ~self.twin)
        return rows if k is None else rows[:k]

    def top_records(self, k: int) -> list[dict[str, Any]]:
        """The best ``k`` plans as flat records: rank, layout fields, seq_len, gbs_seqs and
        every prediction (with the full memory breakdown, re-evaluated for these few)."""
        rows = self.plan_rows(k)
        full = self.evaluate_rows(rows)
        records = []
        for j, row in enumerate(rows):
            training = self.row_context(int(row)).training
            rec: dict[str, Any] = {"rank": int(self.ranks[row]), **self.table.batch.layout(int(row)).to_record(training)}
            for source in (full.columns, self.table.columns):
                for name, values in source.items():
                    index = j if source is full.columns else row
                    rec[name] = _plain(values[index])
            rec["infeasible_reason"] = self.reasons[row]
            rec["variants"] = self.variants[row]
            for internal in ("reason_code", "stage"):
                rec.pop(internal, None)
            records.append(rec)
        return records

    def row_context(self, row: int) -> CostContext:
        """The cost context of row ``row``'s plan: the job's, or with --allow-idle-gpus one of
        the GPUs the plan uses."""
        from autoplan.search.idle import context_for, used_gpus

        used = int(used_gpus(recipe.take(self.table, np.array([row])))[0])
        return self.ctx if used == self.training.gpus else context_for(self.ctx, used)

    def evaluate_rows(self, rows: np.ndarray) -> CostTable:
        """Every prediction (the full memory breakdown included) of ``rows``, each evaluated for
        the GPUs its plan uses."""
        from autoplan.search.idle import per_job_gpu, used_gpus

        used = used_gpus(recipe.take(self.table, rows))
        parts = []
        distinct = np.unique(used, return_counts=True)[0]  # a bare np.unique imports numpy.ma (~20 ms)
        for count in distinct:
            ctx = self.row_context(int(rows[np.argmax(used == count)]))
            part = evaluate(ctx, self.table.batch.take(rows[used == count]), allow_uneven=self.options.allow_uneven_pp)
            parts.append(per_job_gpu(part, self.training) if ctx is not self.ctx else part)
        if len(parts) <= 1:
            return parts[0] if parts else evaluate(self.ctx, self.table.batch.take(rows))
        order = np.argsort(np.concatenate([np.flatnonzero(used == c) for c in distinct]), kind="stable")
        return recipe.take(recipe.concat([_common(p, parts) for p in parts]), order)

    def kept_rows(self, rows: int | None = None) -> np.ndarray:
        """The rows plans.csv holds, of the first ``rows`` (all): every kept row but twins."""
        count = len(self.table) if rows is None else min(rows, len(self.table))
        return np.flatnonzero(~self.twin[:count])

    def columns_of(self, rows: np.ndarray) -> dict[str, np.ndarray]:
        """Rows ``rows`` of the ranked table as results columns
        (:func:`autoplan.search.columns.result_columns`)."""
        from autoplan.search.columns import result_columns

        return result_columns(recipe.take(self.table, rows), ranks=self.ranks[rows],
                              reasons=self.reasons[rows], variants=self.variants[rows])

    def to_frame(self, rows: int | None = None):
        """Every kept layout (or those of the first ``rows`` rows), ranked, twins folded, as a
        DataFrame (the rows of plans.csv)."""
        return self.frame_of(self.kept_rows(rows))

    def plans_frame(self, k: int | None = None):
        """The best ``k`` plans (:meth:`plan_rows`) as a DataFrame."""
        return self.frame_of(self.plan_rows(k))

    def frame_of(self, rows: np.ndarray):
        """:meth:`columns_of` as a pandas DataFrame."""
        import pandas as pd

        return pd.DataFrame(self.columns_of(rows))

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


def _common(part: CostTable, parts: list[CostTable]) -> CostTable:
    """``part`` with the columns every one of ``parts`` has."""
    names = set.intersection(*(set(p.columns) for p in parts))
    return CostTable(batch=part.batch, columns={k: v for k, v in part.columns.items() if k in names},
                     training=part.training)


def _plain(value: Any) -> Any:
    if isinstance(value, (np.bool_, bool)):
        return bool(value)
    value = float(value)
    return value if np.isfinite(value) else None


def search(ctx: CostContext, space: SearchSpace, options: SearchOptions = SearchOptions(),
           progress: Callable[[int, int], None] | None = None) -> SearchResult:
    """Run the recipe with ``options.sampler``; see the module docstring. A storage failure
    raises a one-line ``StorageError`` (:func:`autoplan.search.storage_faults.guard`)."""
    from autoplan.search.storage_faults import guard

    with guard(options.storage):
        return _search(ctx, space, options, progress)


def _search(ctx: CostContext, space: SearchSpace, options: SearchOptions, progress) -> SearchResult:
    start = time.monotonic()
    deadline = start + options.timeout_s if options.timeout_s else None
    if options.allow_idle_gpus:
        sampler, ranked, misses, counts, store, gpu_counts = _run_idle(ctx, space, options, progress, deadline)
    else:
        sampler = choose_sampler(options.sampler, space, check_not_empty(space, ctx.training))
        ranked, misses, counts, store = _run(ctx, space, options, sampler, progress, deadline)
        gpu_counts = ()
    result = SearchResult(ctx=ctx, space=space, options=options, sampler=sampler,
                          table=ranked, reasons=recipe.reasons(ranked), counts=counts,
                          elapsed_s=0.0, store=store, misses=misses, gpu_counts=gpu_counts)
    if sampler == "exhaustive" and options.storage:
        result.study  # noqa: B018 - writes the trials to the storage now
    result = robust_order(result)  # the recipe's order, for every caller (search/ranking.py)
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


def _run_idle(ctx, space, options: SearchOptions, progress, deadline):
    """(sampler, ranked, misses, counts, store, gpu counts) of the search on every GPU count
    :func:`autoplan.search.idle.gpu_counts` gives, merged and ranked per GPU of the job."""
    from autoplan.search import idle

    tp, pp, cp = (space.code_values(k) for k in ("tp", "pp", "cp"))
    products = (tp[:, None, None] * pp[None, :, None] * cp[None, None, :]).ravel()
    counts_used = idle.gpu_counts(products, ctx.training.gpus, ctx.cluster.gpus_per_node,
                                  ctx.training.gbs_seqs)
    if not counts_used:
        check_not_empty(space, ctx.training)  # raises: no tp·pp·cp fits in the GPUs
    ranked, misses, samplers = [], [], []
    counts, store = RecipeCounts(), None
    for used in counts_used:
        sub = idle.context_for(ctx, used)
        sampler = choose_sampler(options.sampler, space, check_not_empty(space, sub.training))
        part, part_misses, part_counts, store = _run(sub, space, options, sampler, progress, deadline)
        ranked.append(idle.per_job_gpu(part, ctx.training))
        misses.append(idle.per_job_gpu(part_misses if part_misses is not None else part, ctx.training))
        part_counts.tallies = {}  # knob caps differ by GPU count: told for one count only
        counts.add(part_counts)
        counts.space_size += part_counts.space_size
        samplers.append(sampler)
    table, near = recipe.concat(ranked), recipe.concat(misses)
    table = recipe.take(table, recipe.rank_order(table)[:options.keep_rows])
    table.columns["pareto"] = recipe.pareto_front(table)  # per GPU of the job, over the kept rows
    sampler = samplers[0] if len(set(samplers)) == 1 else "+".join(dict.fromkeys(samplers))
    return sampler, table, recipe.take(near, recipe.rank_order(near)), counts, store, tuple(counts_used)


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

    store_layouts(store, result.space, result.table)
    return store
