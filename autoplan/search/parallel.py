"""``--workers N``: N processes on one study, through its storage.

Optuna samplers (tpe, random, nsga2): this process and N-1 spawned ones each ask and tell their
share of the remaining trials on a working study of their own, write every batch to the shared
study and copy in the trials the others wrote before the next batch
(:meth:`~autoplan.search.storage.StudyStore.sync`), so every sampler learns from all trials.
Worker i samples with seed + i (one worker is the seeded, reproducible run). This process then
assesses every stored trial (tpe adds its polish), as a one-process run does. The same command
started on other machines with the same ``--storage`` and ``--study-name`` joins the study:
every worker stops once the study holds ``--trials`` finished trials (overshooting by less than
one batch of 16 per worker).

Exhaustive: the fixed chunks of the product are dealt round-robin to the workers; each assesses
its chunks and adds their layouts to the study, and this process puts the chunks back in order,
so the result and ``plans.csv`` are byte-identical to a one-process run.

Workers are started with ``spawn`` (no inherited database connections) and ignore SIGINT: on
Ctrl-C or an error this process terminates them, and a worker whose parent was killed stops
after its current batch. A batch is written whole or not at all, so a killed worker loses at
most the batch it was evaluating.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import replace

from autoplan.cost.context import CostContext
from autoplan.cost.evaluate import CostTable
from autoplan.errors import AutoplanError
from autoplan.search.recipe import RecipeCounts
from autoplan.space import SearchSpace

Progress = Callable[[int, int], None]


class WorkerError(AutoplanError):
    """A worker process failed; the message is its error."""


def shares(total: int, workers: int) -> list[int]:
    """``total`` split into ``workers`` parts differing by at most one, larger ones first."""
    return [total // workers + (i < total % workers) for i in range(workers)]


def run_optuna_parallel(ctx: CostContext, space: SearchSpace, options, store, *,
                        sampler: str, progress: Progress | None = None,
                        deadline: float | None = None) -> tuple[CostTable, RecipeCounts]:
    """Run ``options.workers`` processes on the study of ``store`` (this one included) until it
    holds ``options.trials`` finished trials; returns what ``run_optuna`` returns."""
    import optuna

    from autoplan.search.optuna_search import ask_and_tell, finish

    complete = (optuna.trial.TrialState.COMPLETE,)
    done = len(store.working.get_trials(deepcopy=False, states=complete))
    share = shares(max(0, options.trials - done), options.workers)
    jobs = [(_optuna_worker, (ctx, space, options, sampler, i, share[i], _left(deadline)))
            for i in range(1, options.workers) if share[i]]
    with _workers(jobs) as results:
        ask_and_tell(ctx, space, store, sampler=sampler, trials=options.trials, quota=share[0],
                     allow_uneven=options.allow_uneven_pp, progress=progress, deadline=deadline)
        results()
    return finish(ctx, space, store, sampler=sampler, allow_uneven=options.allow_uneven_pp)


def _optuna_worker(ctx, space, options, sampler: str, index: int, quota: int,
                   timeout_s: float | None) -> int:
    from autoplan.search.optuna_search import ask_and_tell
    from autoplan.search.study import open_store

    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    seed = None if options.seed is None else options.seed + index
    store = open_store(ctx, space, replace(options, seed=seed), sampler)
    return ask_and_tell(ctx, space, store, sampler=sampler, trials=options.trials, quota=quota,
                        baselines_first=False, allow_uneven=options.allow_uneven_pp,
                        progress=_stop_if_orphaned(), deadline=deadline)


def run_exhaustive_parallel(ctx: CostContext, space: SearchSpace, options, store, *,
                            chunk_size: int | None = None, progress: Progress | None = None,
                            deadline: float | None = None) -> tuple[CostTable, RecipeCounts]:
    """Deal the chunks of the product to ``options.workers`` processes (this one included);
    each adds its layouts to the study of ``store``. Returns what ``run_exhaustive`` returns."""
    from autoplan.search import exhaustive

    chunk_size = chunk_size or exhaustive.CHUNK_SIZE
    count = exhaustive.num_chunks(space, chunk_size)
    workers = min(options.workers, count)
    jobs = [(_exhaustive_worker, (ctx, space, options, range(i, count, workers), chunk_size,
                                  _left(deadline))) for i in range(1, workers)]
    with _workers(jobs) as results:
        parts = _assess_and_store(ctx, space, store, range(0, count, workers), chunk_size,
                                  options.allow_uneven_pp, progress, deadline)
        for more in results():
            parts += more
    if progress is not None:
        progress(space.size, space.size)
    return exhaustive.combine(space, parts)


def _exhaustive_worker(ctx, space, options, numbers: range, chunk_size: int,
                       timeout_s: float | None) -> list:
    from autoplan.search.study import open_store

    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    store = open_store(ctx, space, options, "exhaustive")
    return _assess_and_store(ctx, space, store, numbers, chunk_size, options.allow_uneven_pp,
                             _stop_if_orphaned(), deadline)


def _assess_and_store(ctx, space, store, numbers, chunk_size, allow_uneven, progress, deadline):
    from autoplan.search.exhaustive import assess_chunks, store_layouts

    parts = assess_chunks(ctx, space, numbers, chunk_size=chunk_size, allow_uneven=allow_uneven,
                          progress=progress, deadline=deadline)
    store_layouts(store, space, [table for _, table, _ in parts])
    return parts


def _stop_if_orphaned() -> Progress:
    """A progress callback that stops a worker whose parent process is gone (killed): what it
    has written stays in the study."""
    parent = os.getppid()

    def check(done: int, total: int) -> None:
        if os.getppid() != parent:
            raise WorkerError("the search process that started this worker is gone")
    return check


def _left(deadline: float | None) -> float | None:
    """Seconds to ``deadline`` (a worker's clock is its own), at least a moment."""
    return None if deadline is None else max(1e-3, deadline - time.monotonic())


@contextlib.contextmanager
def _workers(jobs: list[tuple]) -> Iterator[Callable[[], list]]:
    """Start one spawned process per (function, args) job; yields a function that waits for
    them and returns their results in job order. Leaving the block terminates the processes."""
    if not jobs:
        yield list
        return
    import multiprocessing

    with multiprocessing.get_context("spawn").Pool(len(jobs), initializer=_ignore_sigint) as pool:
        pending = [pool.apply_async(_call, job) for job in jobs]
        yield lambda: [p.get() for p in pending]


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _call(func, args):
    """Run ``func(*args)`` in a worker; any error comes back as a one-line ``WorkerError``
    (always picklable)."""
    try:
        return func(*args)
    except Exception as exc:  # noqa: BLE001 - reported by the parent as one line
        raise WorkerError(f"search worker failed: {type(exc).__name__}: "
                          f"{' '.join(str(exc).split())}") from None
