"""The running best of a streamed search: what is kept of the layouts while chunks are assessed.

An exhaustive search over 10^8 layouts cannot hold them all (about 0.8 KB each), and needs not:
plans.csv keeps the best ``limit`` rows in rank order (:func:`autoplan.search.recipe.rank_order`,
a total order, since the knobs tie-break), so the best ``limit`` of the union of chunks is the
best ``limit`` of (the best ``limit`` so far) ∪ (the next chunk). ``RunningTop`` keeps that,
plus the two small sets whose answer depends on every layout, not on the best ones:

* the Pareto front of tokens/s/GPU against memory headroom (the ``pareto`` column): the front of
  a union is the front of the fronts, kept in the order the layouts were enumerated, so that of
  identical points the first enumerated wins as in one pass over the whole table;
* the closest misses (:func:`autoplan.search.recipe.infeasible_message`): per chunk, the layout
  nearest the batch among those that miss only the batch, the smallest peak among those out of
  memory, and the first illegal layout in rank order.

``order`` (the layout's place in the enumeration, e.g. its flat index in the product) goes with
every kept row, so fronts and misses merge in enumeration order, whichever process assessed
which chunk. Every merge gives the same rows as ranking the whole table once (tested).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from autoplan.cost.evaluate import CostTable
from autoplan.search import recipe
from autoplan.search.recipe import ILLEGAL, NO_BATCH, OUT_OF_MEMORY

# plans.csv keeps the best this many rows by default; every count covers all layouts.
DEFAULT_KEEP_ROWS = 100_000


@dataclass
class Kept:
    """A ranked table and each row's place in the enumeration."""

    table: CostTable
    order: np.ndarray  # int64

    def __len__(self) -> int:
        return len(self.table)

    def take(self, index: np.ndarray) -> Kept:
        return Kept(recipe.take(self.table, index), self.order[index])


def merge(parts: list[Kept | None]) -> Kept | None:
    """The parts concatenated (None parts skipped)."""
    parts = [p for p in parts if p is not None and len(p)]
    if not parts:
        return None
    if len(parts) == 1:
        return parts[0]
    return Kept(recipe.concat([p.table for p in parts]), np.concatenate([p.order for p in parts]))


class RunningTop:
    """The best ``limit`` assessed layouts in rank order, the Pareto front and the closest misses."""

    def __init__(self, limit: int = DEFAULT_KEEP_ROWS):
        if limit < 1:
            raise ValueError(f"limit >= 1 must hold, got limit={limit}")
        self.limit = limit
        self.best: Kept | None = None
        self.pending: list[Kept] = []  # candidates not merged yet (merged once they are ``limit``)
        self.front: Kept | None = None
        self.misses: Kept | None = None

    def full_below(self, stage: int) -> bool:
        """True when a layout of recipe stage ``stage`` or later can no longer enter the best rows
        (so it need not be costed): ``limit`` rows are kept, the worst of an earlier stage."""
        kept = len(self.best) if self.best is not None else 0
        if kept < self.limit and kept + sum(len(p) for p in self.pending) >= self.limit:
            self._flush()  # once, when the pending rows first fill the best rows
        return (self.best is not None and len(self.best) == self.limit
                and self.best.table["stage"][-1] < stage)

    def add(self, table: CostTable, order: np.ndarray) -> None:
        """Fold an assessed chunk (rows in enumeration order) into the running sets."""
        if len(table) == 0:
            return
        chunk = Kept(table, np.asarray(order, dtype=np.int64))
        self.pending.append(self._candidates(chunk))
        if sum(len(p) for p in self.pending) >= self.limit:
            self._flush()
        self.front = _front(merge([self.front, chunk.take(np.flatnonzero(table["feasible"]))]))
        self.misses = merge([self.misses, chunk.take(_miss_rows(table))])

    def add_kept(self, other: RunningTop) -> None:
        """Fold another ``RunningTop`` in (chunks assessed by another process)."""
        other._flush()
        if other.best is not None:
            self.pending.append(other.best)
            self._flush()
        self.front = _front(merge([self.front, other.front]))
        self.misses = merge([self.misses, other.misses])

    def _candidates(self, chunk: Kept) -> Kept:
        """The chunk's rows that may still enter the best rows: none ranks after the worst
        merged row once ``limit`` rows are merged (stage first, then tokens/s)."""
        if self.best is None or len(self.best) < self.limit:
            return chunk
        worst = self.best.table
        stage, tps = worst["stage"][-1], _tps(worst)[-1]
        chunk_stage, chunk_tps = chunk.table["stage"], _tps(chunk.table)
        maybe = (chunk_stage < stage) | ((chunk_stage == stage) & (chunk_tps >= tps))
        return chunk.take(np.flatnonzero(maybe))

    def _flush(self) -> None:
        """Merge the pending candidates into the best rows (one ranking for many chunks)."""
        both = merge([self.best, *self.pending])
        self.pending = []
        if both is not None:
            self.best = both.take(recipe.rank_order(both.table)[:self.limit])

    def result(self, template: Callable[[], CostTable]) -> tuple[CostTable, CostTable]:
        """(the best rows ranked, with the ``pareto`` column; the closest misses ranked).
        ``template()`` gives the columns of an empty result (called only when no row was kept)."""
        self._flush()
        best = self.best.table if self.best is not None else recipe.take(template(), np.arange(0))
        front = self.front.order if self.front is not None else np.zeros(0, dtype=np.int64)
        order = self.best.order if self.best is not None else np.zeros(0, dtype=np.int64)
        best.columns["pareto"] = np.isin(order, front)
        misses = self.misses.table if self.misses is not None else best
        return best, recipe.take(misses, recipe.rank_order(misses))


def _tps(table: CostTable) -> np.ndarray:
    """tokens/s/GPU as ranked: a missing value ranks last."""
    return np.nan_to_num(table["tokens_per_s_per_gpu"], nan=-np.inf, posinf=-np.inf)


def _front(kept: Kept | None) -> Kept | None:
    """The Pareto front of ``kept``'s rows, in enumeration order."""
    if kept is None:
        return None
    kept = kept.take(np.argsort(kept.order, kind="stable"))
    t = kept.table
    rows = recipe.pareto_indices(-t["memory_headroom_gib"], t["tokens_per_s_per_gpu"])
    return kept.take(np.sort(rows))


def _miss_rows(table: CostTable) -> np.ndarray:
    """Rows of the chunk's closest misses (:func:`recipe.closest_rows`)."""
    return recipe.closest_rows(table, table["stage"].astype(np.int64), (NO_BATCH, OUT_OF_MEMORY, ILLEGAL))
