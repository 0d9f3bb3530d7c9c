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
Ctrl-C or an error this process terminates them. A worker holds a lease on this process from
its first instruction (:func:`hold_lease`): on Linux the kernel kills it when this process dies
(``prctl(PR_SET_PDEATHSIG)``), and it checks at once that this process is still its parent (it
may have died while the worker was importing); elsewhere a thread polls the parent every
``LEASE_POLL_S``. So a ``kill -9`` of the search, even while its workers are starting, leaves no
worker behind. A batch is written whole or not at all, so a killed worker loses at
most the batch it was evaluating; the search stops with one line naming the worker (it is not
waited for, nor restarted), and the same command resumes the study.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace

from autoplan.cost.context import CostContext
from autoplan.cost.evaluate import CostTable
from autoplan.errors import AutoplanError
from autoplan.search.recipe import RecipeCounts
from autoplan.search.storage_faults import StorageError, guard
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
    with _workers(jobs, deadline) as pool:
        ask_and_tell(ctx, space, store, sampler=sampler, trials=options.trials, quota=share[0],
                     allow_uneven=options.allow_uneven_pp, progress=pool.watch(progress),
                     deadline=deadline)
        pool.results()
    return finish(ctx, space, store, sampler=sampler, allow_uneven=options.allow_uneven_pp)


def _optuna_worker(ctx, space, options, sampler: str, index: int, quota: int,
                   timeout_s: float | None) -> int:
    from autoplan.search.optuna_search import ask_and_tell
    from autoplan.search.study import open_store

    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    seed = None if options.seed is None else options.seed + index
    with guard(options.storage):
        store = open_store(ctx, space, replace(options, seed=seed), sampler)
        return ask_and_tell(ctx, space, store, sampler=sampler, trials=options.trials, quota=quota,
                            baselines_first=False, allow_uneven=options.allow_uneven_pp,
                            deadline=deadline)


def run_exhaustive_parallel(ctx: CostContext, space: SearchSpace, options, store, *,
                            chunk_size: int | None = None, progress: Progress | None = None,
                            deadline: float | None = None):
    """Deal the chunks of the product to ``options.workers`` processes (this one included);
    each adds its layouts to the study of ``store``. Returns what ``run_exhaustive`` returns."""
    from autoplan.search import exhaustive

    chunk_size = chunk_size or exhaustive.CHUNK_SIZE
    count = exhaustive.num_chunks(space, chunk_size)
    workers = min(options.workers, count)
    jobs = [(_exhaustive_worker, (ctx, space, options, range(i, count, workers), chunk_size,
                                  _left(deadline))) for i in range(1, workers)]
    with _workers(jobs, deadline) as pool:
        parts = [_assess_and_store(ctx, space, store, range(0, count, workers), chunk_size,
                                   options, pool.watch(progress), deadline)]
        parts += pool.results()
    if progress is not None:
        progress(space.size, space.size)
    return exhaustive.finish(ctx, space, parts)


def _exhaustive_worker(ctx, space, options, numbers: range, chunk_size: int,
                       timeout_s: float | None):
    from autoplan.search.study import open_store

    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    with guard(options.storage):
        store = open_store(ctx, space, options, "exhaustive")
        return _assess_and_store(ctx, space, store, numbers, chunk_size, options, None, deadline)


def _assess_and_store(ctx, space, store, numbers, chunk_size, options, progress, deadline):
    """(running best, counts) of the chunks ``numbers``, every layout added to the study (a
    chunk that another process stored already is not stored again)."""
    from autoplan.search.exhaustive import assess_chunks, store_layouts

    def sink(table: CostTable) -> None:  # stored as it comes: memory stays one chunk's
        store_layouts(store, space, table, chunk_size)

    return assess_chunks(ctx, space, numbers, chunk_size=chunk_size, allow_uneven=options.allow_uneven_pp,
                         keep=options.keep_rows, progress=progress, deadline=deadline, sink=sink)


def _left(deadline: float | None) -> float | None:
    """Seconds to ``deadline`` (a worker's clock is its own), at least a moment."""
    return None if deadline is None else max(1e-3, deadline - time.monotonic())


# After the deadline a worker ends its batch and returns; past this grace it is stopped.
DEADLINE_GRACE_S = 30.0


class _Pool:
    """Started worker processes: ``results()`` waits for them, ``watch(progress)`` wraps this
    process's progress callback so that a dead worker stops the search between its batches."""

    def __init__(self, started: list, deadline: float | None) -> None:
        self.started, self.deadline = started, deadline
        self.received: dict[int, object] = {}

    def results(self) -> list:
        """The workers' results in order; ``WorkerError`` when one dies without a result or
        they outlive the deadline by ``DEADLINE_GRACE_S``."""
        from multiprocessing.connection import wait

        while len(self.received) < len(self.started):
            waiting = [i for i in range(len(self.started)) if i not in self.received]
            limit = None if self.deadline is None else self.deadline + DEADLINE_GRACE_S - time.monotonic()
            if limit is not None and limit <= 0:
                raise WorkerError(f"{len(waiting)} search worker(s) still running {DEADLINE_GRACE_S:.0f} s "
                                  "after --timeout; stopped them (the study keeps every batch they wrote)")
            wait([self.started[i][1] for i in waiting] + [self.started[i][0].sentinel for i in waiting], limit)
            self.check()
        return [self.received[i] for i in range(len(self.started))]

    def check(self) -> None:
        """Take the results that came; ``WorkerError`` for a worker that failed or died."""
        for i, (process, receive) in enumerate(self.started):
            if i in self.received:
                continue
            if receive.poll():  # a result, or the end of a dead worker's pipe
                try:
                    status, value = receive.recv()
                except (EOFError, OSError):
                    process.join(1)
                    raise WorkerError(_died(i, process)) from None
                if status == "error":
                    raise WorkerError(value)
                self.received[i] = value
            elif not process.is_alive():
                raise WorkerError(_died(i, process))

    def watch(self, progress: Progress | None) -> Progress:
        def check(done: int, total: int) -> None:
            self.check()
            if progress is not None:
                progress(done, total)
        return check


@contextlib.contextmanager
def _workers(jobs: list[tuple], deadline: float | None = None) -> Iterator[_Pool]:
    """Start one spawned process per (function, args) job and yield them as a ``_Pool``. A
    worker that dies (killed, or failed to start) raises ``WorkerError`` instead of being
    waited for; leaving the block terminates the processes still running."""
    import multiprocessing

    spawn = multiprocessing.get_context("spawn")
    started: list = []
    try:
        for func, args in jobs:
            receive, send = spawn.Pipe(duplex=False)
            # The job travels as bytes, unpickled once the worker holds its lease (_run_job).
            process = spawn.Process(target=_run_job, args=(os.getpid(), send, pickle.dumps((func, args))),
                                    daemon=True)
            process.start()
            send.close()
            started.append((process, receive))
        yield _Pool(started, deadline)
    finally:
        for process, receive in started:
            if process.is_alive():
                process.terminate()
            process.join(5)
            receive.close()


def _died(index: int, process) -> str:
    process.join(1)
    code = process.exitcode
    how = f"killed by signal {-code}" if code is not None and code < 0 else f"exit code {code}"
    return (f"search worker {index + 1} (pid {process.pid}) stopped without a result ({how}); "
            "the study keeps every batch written: rerun the same command to resume")


def _run_job(parent_pid: int, send, job: bytes) -> None:
    """A worker process: take the lease on ``parent_pid``, run the pickled (function, args)
    ``job``, send ("ok", result) or ("error", one line)."""
    hold_lease(parent_pid)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        send.send(_call(*pickle.loads(job)))
    except WorkerError as exc:
        send.send(("error", str(exc)))
    finally:
        send.close()


def _call(func, args):
    """Run ``func(*args)`` in a worker: ("ok", its result); any error becomes a one-line
    ``WorkerError``."""
    try:
        return "ok", func(*args)
    except StorageError as exc:  # one line already, naming the storage
        raise WorkerError(str(exc)) from None
    except Exception as exc:  # noqa: BLE001 - reported by the parent as one line
        raise WorkerError(f"search worker failed: {type(exc).__name__}: "
                          f"{' '.join(str(exc).split())}") from None


PR_SET_PDEATHSIG = 1  # <linux/prctl.h>: the signal this process gets when its parent dies
LEASE_POLL_S = 0.5  # without prctl: how often a worker looks for its parent
ORPHANED_EXIT_CODE = 75  # a worker that found its parent gone (nobody reads it)


def hold_lease(parent_pid: int) -> None:
    """Make this process end when ``parent_pid`` (the search that started it) does.

    Linux: ``prctl(PR_SET_PDEATHSIG, SIGKILL)``, the kernel's own lease (prctl(2)); then the
    parent is checked once, since it may have died before the call (the worker was importing),
    when the signal would never come. Elsewhere a daemon thread polls ``os.getppid()``."""
    if not (sys.platform.startswith("linux") and _set_death_signal(signal.SIGKILL)):
        threading.Thread(target=_watch_parent, args=(parent_pid,), daemon=True).start()
    if os.getppid() != parent_pid:
        os._exit(ORPHANED_EXIT_CODE)


def _set_death_signal(signum: int) -> bool:
    """True when the kernel took ``prctl(PR_SET_PDEATHSIG, signum)``."""
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_PDEATHSIG, int(signum), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _watch_parent(parent_pid: int) -> None:
    while os.getppid() == parent_pid:
        time.sleep(LEASE_POLL_S)
    os._exit(ORPHANED_EXIT_CODE)
