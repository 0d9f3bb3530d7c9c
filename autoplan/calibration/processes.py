"""Run independent calibration tasks (cross-validation folds) in worker processes."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any


def map_in_processes(fn: Callable[[Any], Any], tasks: Sequence[Any], jobs: int) -> list:
    """``[fn(t) for t in tasks]``, in up to ``jobs`` processes where jobs > 1 (fork where the
    platform has it: workers inherit what is loaded; else spawn); the same results, in order.
    ``fn`` and the tasks must pickle."""
    if jobs <= 1 or len(tasks) <= 1:
        return [fn(task) for task in tasks]
    from concurrent.futures import ProcessPoolExecutor
    from multiprocessing import get_all_start_methods, get_context

    context = get_context("fork" if "fork" in get_all_start_methods() else "spawn")
    with ProcessPoolExecutor(min(jobs, len(tasks)), mp_context=context) as pool:
        return list(pool.map(fn, tasks))
