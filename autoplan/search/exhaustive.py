"""The exhaustive sampler: every layout of the space, evaluated in vectorised chunks, streamed.

It is the exact reference the other samplers are measured against (benchmarks/speed.py). The
product of the space is walked in flat-index chunks of ``CHUNK_SIZE``; each chunk becomes one
``LayoutBatch``, is assessed by the recipe, counted, and folded into a
:class:`~autoplan.search.topk.RunningTop` that keeps the best ``keep`` rows, the Pareto front and
the closest misses, so memory stays bounded whatever the size of the space. Chunk boundaries
are fixed and every merge is exact, so the result does not depend on timing, nor on how
``--workers`` deal the chunks out (:mod:`autoplan.search.parallel`).

Pruning before costing, where it is exact (:mod:`autoplan.search.prune`): a layout that breaks
a rule is counted (by rule) without being costed, and costed in a second walk only if fewer than
``keep`` layouts are legal; once the best ``keep`` rows all fit, a layout whose model states
alone exceed the memory can never enter them, so it is counted as out of memory uncosted.
With a storage every evaluated layout is added to the study in bulk, once per chunk
(:func:`store_layouts`).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable

import numpy as np

from autoplan.cost.context import CostContext
from autoplan.cost.evaluate import CostTable
from autoplan.rules import legality_codes
from autoplan.search import caps, recipe
from autoplan.search.prune import bound_is_exact, model_states_exceed_memory
from autoplan.search.recipe import ILLEGAL, OUT_OF_MEMORY, RecipeCounts
from autoplan.search.topk import DEFAULT_KEEP_ROWS, RunningTop
from autoplan.space import SearchSpace, axes_to_values, layouts_from_values

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
                  deadline: float | None = None, sink: ChunkSink | None = None,
                  prune: bool | None = None) -> tuple[RunningTop, RecipeCounts]:
    """The running best and the counts of chunks ``numbers`` of the product (chunk k holds the
    flat indices [k·chunk_size, (k+1)·chunk_size)), the first one even past the deadline.
    ``sink`` receives every chunk's whole assessed table (the study's bulk add).

    ``prune`` (default: without a sink, on a space larger than the rows kept) counts layouts
    whose stage is known before costing (:mod:`autoplan.search.prune`) without costing them:
    illegal ones always (costed in a second walk only if fewer than ``keep`` layouts are legal),
    those out of memory by their model states alone once the best rows kept all fit.
    """
    numbers = list(numbers)
    prune = sink is None and space.size > keep if prune is None else prune
    total = sum(min(chunk_size, space.size - k * chunk_size) for k in numbers)
    top, counts = RunningTop(keep), RecipeCounts()
    done, illegal_left = 0, []
    for k in numbers:
        if deadline is not None and done and time.monotonic() > deadline:
            break
        chunk = _Chunk(ctx, space, k, chunk_size, allow_uneven)
        counts.add(chunk.counts())
        cost = _rows_to_cost(ctx, chunk, top, counts) if prune else np.ones(len(chunk.order), dtype=bool)
        if prune and (chunk.codes > 0).any():
            illegal_left.append(k)  # costed later if fewer than ``keep`` layouts are legal
        table = chunk.assess(ctx, cost, allow_uneven)
        counts.add(recipe.count(table))
        top.add(table, chunk.order[cost])
        if sink is not None:
            sink(table)
        done += chunk.size
        if progress is not None:
            progress(done, total)
    for k in illegal_left if not top.full_below(ILLEGAL) else ():  # too few legal layouts
        if deadline is not None and time.monotonic() > deadline:
            break
        chunk = _Chunk(ctx, space, k, chunk_size, allow_uneven)
        illegal = chunk.codes > 0
        top.add(chunk.assess(ctx, illegal, allow_uneven), chunk.order[illegal])
    return top, counts


def _rows_to_cost(ctx: CostContext, chunk: _Chunk, top: RunningTop, counts: RecipeCounts) -> np.ndarray:
    """The chunk's layouts that may still enter the best rows (a mask over ``chunk.batch``): the
    legal ones, less those out of memory by their model states once the best rows all fit. The
    others are counted here, by the rule they break or as out of memory."""
    cost = chunk.codes == 0
    counts.add(recipe.count_illegal(chunk.codes[~cost]))
    if top.full_below(OUT_OF_MEMORY) and bound_is_exact(ctx):
        over = np.zeros_like(cost)
        over[cost] = model_states_exceed_memory(ctx, chunk.batch.take(np.flatnonzero(cost)))
        num_over = int(over.sum())
        counts.add(RecipeCounts(candidates=num_over, legal=num_over,
                                reasons=Counter({"out_of_memory": num_over} if num_over else {})))
        cost &= ~over
    return cost


class _Chunk:
    """Chunk ``k`` of the product: its layouts with an integer dp (``batch``), where each
    reaches the batch, its place in the enumeration (``order``) and its legality codes."""

    def __init__(self, ctx: CostContext, space: SearchSpace, k: int, chunk_size: int, allow_uneven: bool):
        self.space = space
        self.index = np.arange(k * chunk_size, min((k + 1) * chunk_size, space.size), dtype=np.int64)
        self.axes = np.unravel_index(self.index, space.shape)
        self.batch, self.kept, self.reaches = layouts_from_values(axes_to_values(space, self.axes),
                                                                  ctx.training)
        self.order = self.index[self.kept]
        self.codes = legality_codes(ctx, self.batch, allow_uneven=allow_uneven)

    @property
    def size(self) -> int:
        return len(self.index)

    def counts(self) -> RecipeCounts:
        """The layouts dropped for a non-integer dp, and the knob tallies of the whole chunk."""
        dropped = int((~self.kept).sum())
        codes = np.full(len(self.index), caps.DEGREES, dtype=np.int64)
        codes[self.kept] = self.codes
        return RecipeCounts(candidates=dropped, reasons=Counter({"degrees": dropped} if dropped else {}),
                            tallies=caps.tally(self.space, self.index, codes, self.axes))

    def assess(self, ctx: CostContext, rows: np.ndarray, allow_uneven: bool) -> CostTable:
        """The recipe's table of the layouts ``rows`` (a mask over ``batch``)."""
        if rows.all():
            return recipe.compact(recipe.assess(ctx, self.batch, self.reaches, allow_uneven=allow_uneven,
                                                codes=self.codes))
        take = np.flatnonzero(rows)
        return recipe.compact(recipe.assess(ctx, self.batch.take(take), self.reaches[take],
                                            allow_uneven=allow_uneven, codes=self.codes[take]))


def finish(ctx: CostContext, space: SearchSpace, parts: Iterable[tuple[RunningTop, RecipeCounts]]
           ) -> tuple[CostTable, CostTable, RecipeCounts]:
    """Merge the running bests and counts of several passes (processes) into one result, the
    same whichever pass assessed which chunk."""
    parts = list(parts)
    top = parts[0][0] if len(parts) == 1 else RunningTop(parts[0][0].limit)  # one pass: as it is
    counts = RecipeCounts(space_size=space.size)
    for part_top, part_counts in parts:
        if part_top is not top:
            top.add_kept(part_top)
        counts.add(part_counts)
    best, misses = top.result(lambda: _empty_table(ctx))  # assessed only when nothing was kept
    return best, misses, counts


def _empty_table(ctx: CostContext) -> CostTable:
    """An assessed table of no layouts (the columns a result has when nothing was assessed)."""
    from autoplan.space import KNOBS

    empty = {k: np.zeros(0) for k in KNOBS}
    batch, _, reaches = layouts_from_values(empty, ctx.training)
    return recipe.compact(recipe.assess(ctx, batch, reaches))


def store_layouts(store, space: SearchSpace, table: CostTable, chunk_size: int | None = None) -> int:
    """Add the assessed layouts of ``table`` to the study chunk by chunk of the product (chunk
    k: flat indices [k·chunk_size, (k+1)·chunk_size)), each chunk unless the study holds it
    already: a chunk is claimed with its trials in one transaction
    (:func:`autoplan.search.storage.bulk_add`), so any number of processes on one study store
    every layout once, and a resumed study reads which chunks it holds, not its trials (a study
    stored without claims: which layouts it holds, once, bounded: :mod:`autoplan.search.legacy`).
    Returns the trials added."""
    from autoplan.search.legacy import held_layouts, settle
    from autoplan.search.storage import CLAIM_PREFIX, bulk_add, claims
    from autoplan.search.trials import frozen_trials

    chunk_size = chunk_size or CHUNK_SIZE
    study = store.study
    held = claims(study)
    existing = held_layouts(store, space)
    index = flat_index(space, table.batch)
    chunk = index // chunk_size
    prefix = f"{CLAIM_PREFIX}chunk{chunk_size}:"
    added = 0
    for k in np.unique(chunk):
        if f"{prefix}{k}" not in held:
            rows = np.flatnonzero(chunk == k)
            rows = rows[~np.isin(index[rows], existing)]  # stored before chunks were claimed
            added += bulk_add(study, frozen_trials(space, recipe.take(table, rows), 1), claim=f"{prefix}{k}")
    claimed = {c for c in held if c.startswith(prefix)} | {f"{prefix}{k}" for k in np.unique(chunk)}
    if len(existing) and len(claimed) >= num_chunks(space, chunk_size):
        settle(study)  # a claim-less study now claimed whole: later resumes read claims only
    return added


def flat_index(space: SearchSpace, batch) -> np.ndarray:
    """Each layout's flat index in the product of ``space`` (the inverse of ``_Chunk``'s
    ``np.unravel_index``)."""
    from autoplan.space import KNOBS

    axes = []
    for k in KNOBS:
        codes = space.code_values(k)
        order = np.argsort(codes, kind="stable")
        axes.append(order[np.searchsorted(codes[order], getattr(batch, k))])
    return np.ravel_multi_index(axes, space.shape).astype(np.int64)
