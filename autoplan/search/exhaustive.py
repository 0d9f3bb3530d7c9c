"""The exhaustive sampler: every layout of the space, evaluated in vectorised chunks.

It is the exact reference the other samplers are measured against (benchmarks/speed.py). The
product of the space is walked in flat-index chunks (``space.chunks``), each chunk becomes one
``LayoutBatch`` and one ``evaluate`` call; chunk boundaries are fixed, so the result does not
depend on timing. With a storage URL every evaluated layout is added to the study in bulk.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from autoplan.cost.context import CostContext
from autoplan.cost.evaluate import CostTable
from autoplan.search import recipe
from autoplan.search.recipe import RecipeCounts
from autoplan.space import BatchTarget, SearchSpace, chunks, indices_to_values, layouts_from_values

CHUNK_SIZE = 1 << 16

Progress = Callable[[int, int], None]


def compact(table: CostTable) -> CostTable:
    """Drop the per-stage memory breakdown (``mem_first_*``, ``mem_last_*`` except the totals),
    which a large search does not need to keep for every layout."""
    keep = {k: v for k, v in table.columns.items()
            if not (k.startswith(("mem_first_", "mem_last_")) and not k.endswith("_total_bytes"))}
    return CostTable(batch=table.batch, columns=keep)


def run_exhaustive(ctx: CostContext, space: SearchSpace, target: BatchTarget, *,
                   allow_uneven: bool = False, chunk_size: int = CHUNK_SIZE,
                   progress: Progress | None = None,
                   deadline: float | None = None) -> tuple[CostTable, RecipeCounts]:
    """Assess every layout of ``space`` (until ``deadline``, a ``time.monotonic()`` value).

    Returns the assessed table (layouts with a non-integer dp are counted, not kept) and the
    recipe counts.
    """
    counts = RecipeCounts(space_size=space.size)
    tables: list[CostTable] = []
    done = 0
    for index in chunks(space, chunk_size):
        if deadline is not None and tables and time.monotonic() > deadline:
            break
        batch, kept, reaches = layouts_from_values(indices_to_values(space, index), target)
        table = recipe.assess(ctx, batch, reaches, allow_uneven=allow_uneven)
        counts.add(recipe.count(table, dropped_degrees=int((~kept).sum())))
        tables.append(compact(table))
        done += len(index)
        if progress is not None:
            progress(done, space.size)
    return recipe.concat(tables), counts


def missing_rows(table: CostTable, existing: set[tuple]) -> np.ndarray:
    """Rows of ``table`` whose knob values are not among ``existing`` (tuples in KNOBS order)."""
    from autoplan.space import KNOBS

    if not existing:
        return np.arange(len(table))
    keys = [tuple(recipe.describe_knob(k, getattr(table.batch, k)[i]) for k in KNOBS)
            for i in range(len(table))]
    return np.array([i for i, key in enumerate(keys) if key not in existing], dtype=np.int64)
