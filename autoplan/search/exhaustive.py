"""The exhaustive sampler: every layout of the space, evaluated in vectorised chunks, streamed.

It is the exact reference the other samplers are measured against (benchmarks/speed.py). The
product of the space is walked in flat-index chunks of ``CHUNK_SIZE``; each chunk becomes one
``LayoutBatch``, is assessed by the recipe, counted, and folded into a
:class:`~autoplan.search.topk.RunningTop` that keeps the best ``keep`` rows, the Pareto front and
the closest misses, so memory stays bounded whatever the size of the space. Chunk boundaries
are fixed and every merge is exact, so the result does not depend on timing, nor on how
``--workers`` deal the chunks out (:mod:`autoplan.search.parallel`).

Pruning before costing, where it is exact: once the best ``keep`` rows are all legal, a layout
that breaks a rule can never enter them, so it is counted (by rule) without being costed.
With a storage every evaluated layout is added to the study in bulk.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable

import numpy as np

from autoplan.cost.context import CostContext
from autoplan.cost.evaluate import CostTable
from autoplan.layout import LayoutBatch
from autoplan.rules import legality_codes
from autoplan.search import caps, recipe
from autoplan.search.recipe import RecipeCounts
from autoplan.search.topk import DEFAULT_KEEP_ROWS, RunningTop
from autoplan.space import SearchSpace, indices_to_values, layouts_from_values

CHUNK_SIZE = 1 << 16

Progress = Callable[[int, int], None]
ChunkSink = Callable[[CostTable], None]


def run_exhaustive(ctx: CostContext, space: SearchSpace, *,
                   allow_uneven: bool = True, chunk_size: int = CHUNK_SIZE,
                   keep: int = DEFAULT_KEEP_ROWS, progress: Progress | None = None,
                   deadline: float | None = None) -> tuple[CostTable, CostTable, RecipeCounts]:
    """Assess every layout of ``space`` (until ``deadline``, a ``time.monotonic()`` value).

    Returns the best ``keep`` assessed layouts ranked (with the ``pareto`` column), the closest
    misses (ranked; for :func:`autoplan.search.recipe.infeasible_message`) and the recipe counts
    of every layout.
    """
    top, counts = assess_chunks(ctx, space, range(num_chunks(space, chunk_size)),
                                chunk_size=chunk_size, allow_uneven=allow_uneven, keep=keep,
                                progress=progress, deadline=deadline)
    return finish(ctx, space, [(top, counts)])


def num_chunks(space: SearchSpace, chunk_size: int = CHUNK_SIZE) -> int:
    return -(-space.size // chunk_size)


def assess_chunks(ctx: CostContext, space: SearchSpace, numbers: Iterable[int], *,
                  chunk_size: int = CHUNK_SIZE, allow_uneven: bool = True,
                  keep: int = DEFAULT_KEEP_ROWS, progress: Progress | None = None,
                  deadline: float | None = None,
                  sink: ChunkSink | None = None) -> tuple[RunningTop, RecipeCounts]:
    """The running best and the counts of chunks ``numbers`` of the product (chunk k holds the
    flat indices [k·chunk_size, (k+1)·chunk_size)), the first one even past the deadline.
    ``sink`` receives every chunk's whole assessed table (the study's bulk add)."""
    numbers = list(numbers)
    total = sum(min(chunk_size, space.size - k * chunk_size) for k in numbers)
    top, counts = RunningTop(keep), RecipeCounts()
    done = 0
    for k in numbers:
        if deadline is not None and done and time.monotonic() > deadline:
            break
        index = np.arange(k * chunk_size, min((k + 1) * chunk_size, space.size), dtype=np.int64)
        batch, kept, reaches = layouts_from_values(indices_to_values(space, index), ctx.training)
        dropped = int((~kept).sum())
        counts.add(RecipeCounts(candidates=dropped, reasons=Counter({"degrees": dropped} if dropped else {})))
        codes = np.full(len(index), caps.DEGREES, dtype=np.int64)
        order = index[kept]
        if sink is None and top.full_of_better_than_illegal:
            codes[kept] = legality_codes(ctx, batch, allow_uneven=allow_uneven)
            batch, reaches, order = _drop_illegal(batch, reaches, order, codes[kept], counts)
            table = recipe.compact(recipe.assess(ctx, batch, reaches, allow_uneven=allow_uneven))
        else:
            table = recipe.compact(recipe.assess(ctx, batch, reaches, allow_uneven=allow_uneven))
            codes[kept] = table["reason_code"].astype(np.int64)
        counts.add(recipe.count(table))
        counts.add(RecipeCounts(tallies=caps.tally(space, index, codes)))
        top.add(table, order)
        if sink is not None:
            sink(table)
        done += len(index)
        if progress is not None:
            progress(done, total)
    return top, counts


def _drop_illegal(batch: LayoutBatch, reaches, order, codes: np.ndarray, counts: RecipeCounts):
    """The legal layouts of the chunk; the others (``codes`` > 0) are counted by the rule they
    break."""
    legal = codes == 0
    counts.add(recipe.count_illegal(codes[~legal]))
    keep = np.flatnonzero(legal)
    return batch.take(keep), reaches[keep], order[keep]


def finish(ctx: CostContext, space: SearchSpace, parts: Iterable[tuple[RunningTop, RecipeCounts]]
           ) -> tuple[CostTable, CostTable, RecipeCounts]:
    """Merge the running bests and counts of several passes (processes) into one result, the
    same whichever pass assessed which chunk."""
    parts = list(parts)
    top = RunningTop(parts[0][0].limit)
    counts = RecipeCounts(space_size=space.size)
    for part_top, part_counts in parts:
        top.add_kept(part_top)
        counts.add(part_counts)
    best, misses = top.result(_empty_table(ctx))
    return best, misses, counts


def _empty_table(ctx: CostContext) -> CostTable:
    """An assessed table of no layouts (the columns a result has when nothing was assessed)."""
    from autoplan.space import KNOBS

    empty = {k: np.zeros(0) for k in KNOBS}
    batch, _, reaches = layouts_from_values(empty, ctx.training)
    return recipe.compact(recipe.assess(ctx, batch, reaches))


def store_layouts(store, space: SearchSpace, tables: Iterable[CostTable]) -> None:
    """Add the assessed layouts of ``tables`` that the study does not hold yet, in bulk."""
    from autoplan.search.storage import bulk_add
    from autoplan.search.trials import frozen_trials
    from autoplan.space import KNOBS

    study = store.persistent if store.persistent is not None else store.working
    existing = {tuple(t.params.get(k) for k in KNOBS) for t in study.get_trials(deepcopy=False)}
    for table in tables:
        rows = missing_rows(table, existing)
        bulk_add(study, frozen_trials(space, recipe.take(table, rows), 1))


def missing_rows(table: CostTable, existing: set[tuple]) -> np.ndarray:
    """Rows of ``table`` whose knob values are not among ``existing`` (tuples in KNOBS order)."""
    from autoplan.space import KNOBS

    if not existing:
        return np.arange(len(table))
    keys = [tuple(recipe.describe_knob(k, getattr(table.batch, k)[i]) for k in KNOBS)
            for i in range(len(table))]
    return np.array([i for i, key in enumerate(keys) if key not in existing], dtype=np.int64)
