"""The recipe: (1) fit in memory, (2) reach the global batch, (3) rank by throughput.

Every evaluated layout falls into the first stage it fails (``STAGES``): a broken legality rule,
out of memory, or a global batch it cannot reach; the rest are feasible and ranked by predicted
tokens/s/GPU, descending. Ties break on lower peak memory, then on the layout knobs in
``space.KNOBS`` order (smaller first), so identical inputs always give the identical order.
When nothing is feasible, :func:`infeasible_message` says why: the most common reasons with
counts and the closest miss.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from autoplan.cost.context import CostContext
from autoplan.cost.evaluate import CostTable, evaluate
from autoplan.layout import CODE_FIELDS, FIELDS, LayoutBatch
from autoplan.recompute_modules import modules_text
from autoplan.rules import REASON_CODES, REASON_MESSAGES, explain_reason
from autoplan.space import KNOBS
from autoplan.units import GiB

FEASIBLE, NO_BATCH, OUT_OF_MEMORY, ILLEGAL = 0, 1, 2, 3
EXPOSED_COMM_COLUMNS = ("time_tp_exposed_s", "time_cp_exposed_s", "time_ep_exposed_s",
                        "time_pp_exposed_s", "time_dp_exposed_s")


@dataclass
class RecipeCounts:
    """Layouts left after each stage, and the reasons the others were dropped."""

    space_size: int = 0  # the cartesian product of the space
    candidates: int = 0  # layouts examined (all of them for the exhaustive sampler)
    legal: int = 0
    fit: int = 0
    reach_batch: int = 0
    reasons: Counter = field(default_factory=Counter)
    batches: Counter = field(default_factory=Counter)  # feasible layouts per global batch (seqs)
    # exhaustive: per degree knob, layouts per (value, first broken rule): autoplan.search.caps
    tallies: dict = field(default_factory=dict)

    def add(self, other: RecipeCounts) -> None:
        self.candidates += other.candidates
        self.legal += other.legal
        self.fit += other.fit
        self.reach_batch += other.reach_batch
        self.reasons.update(other.reasons)
        self.batches.update(other.batches)
        for knob, counts in other.tallies.items():
            self.tallies[knob] = self.tallies[knob] + counts if knob in self.tallies else counts

    @property
    def assessed(self) -> int:
        """Layouts that got a recipe stage (those with a non-integer dp are only counted)."""
        return self.candidates - self.reasons.get("degrees", 0)

    def to_dict(self) -> dict:
        return {"space_size": self.space_size, "candidates": self.candidates, "legal": self.legal,
                "fit": self.fit, "reach_batch": self.reach_batch,
                "reasons": dict(self.reasons.most_common()),
                "batches_seqs": {str(k): v for k, v in sorted(self.batches.items())}}


def assess(ctx: CostContext, batch: LayoutBatch, reaches: np.ndarray, *,
           allow_uneven: bool = True, codes: np.ndarray | None = None) -> CostTable:
    """Evaluate ``batch`` and add the recipe columns: ``stage`` (0 feasible, 1 batch not
    reached, 2 out of memory, 3 illegal), ``feasible``, ``reaches_batch`` and
    ``exposed_comm_fraction`` (exposed communication time / step time). ``codes``: the batch's
    legality codes when the caller has them already."""
    table = evaluate(ctx, batch, allow_uneven=allow_uneven, codes=codes)
    legal = table["reason_code"] == 0
    stage = np.select([~legal, ~table["fits"], ~reaches], [ILLEGAL, OUT_OF_MEMORY, NO_BATCH], FEASIBLE)
    table.columns["reaches_batch"] = np.asarray(reaches, dtype=bool)
    table.columns["stage"] = stage.astype(np.float64)
    table.columns["feasible"] = stage == FEASIBLE
    tokens = batch.gbs_seqs * float(ctx.training.seq_len)
    table.columns["gbs_tokens"] = tokens
    with np.errstate(divide="ignore", invalid="ignore"):
        exposed = sum(table[c] for c in EXPOSED_COMM_COLUMNS)
        table.columns["exposed_comm_fraction"] = exposed / table["step_time_s"]
        table.columns["step_time_per_token_s"] = table["step_time_s"] / tokens
    return table


def reasons(table: CostTable) -> np.ndarray:
    """Per layout: '' when feasible, else the first broken rule, 'out_of_memory' or 'batch'
    (an object array of names)."""
    names = np.array([*REASON_CODES, "", "batch", "out_of_memory"], dtype=object)
    stage = table["stage"].astype(np.int64)
    index = np.where(stage == ILLEGAL, table["reason_code"].astype(np.int64), len(REASON_CODES) + stage)
    return names[index]


# The recipe's own reasons, stated like the rules' invariants (REASON_MESSAGES).
RECIPE_REASON_MESSAGES = {
    "batch": "dp·mbs·grad_acc must reach the global batch (within --gbs-tolerance)",
    "out_of_memory": "the peak memory per GPU must fit in the usable GPU memory",
}


def reason_message(name: str) -> str:
    """The invariant a layout broke, in words, for a name of :func:`reasons` (unknown names
    are returned as given)."""
    return REASON_MESSAGES.get(name) or RECIPE_REASON_MESSAGES.get(name) or name


def count(table: CostTable, dropped_degrees: int = 0) -> RecipeCounts:
    """Stage counts of an assessed table; ``dropped_degrees`` layouts had a non-integer dp."""
    stage = table["stage"]
    counts = RecipeCounts(candidates=len(table) + dropped_degrees, legal=int((stage < ILLEGAL).sum()),
                          fit=int((stage < OUT_OF_MEMORY).sum()), reach_batch=int((stage == FEASIBLE).sum()))
    names, numbers = np.unique(reasons(table).astype(str), return_counts=True)
    counts.reasons.update({str(n): int(c) for n, c in zip(names, numbers) if n})
    if dropped_degrees:
        counts.reasons["degrees"] += dropped_degrees
    batches, numbers = np.unique(table.batch.gbs_seqs[stage == FEASIBLE], return_counts=True)
    counts.batches.update({int(b): int(c) for b, c in zip(batches, numbers)})
    return counts


def count_illegal(codes: np.ndarray) -> RecipeCounts:
    """Counts of layouts that break a rule (``codes``: their reason codes, none 0), which a
    streamed search drops before costing them."""
    found, numbers = np.unique(codes.astype(np.int64), return_counts=True)
    counts = RecipeCounts(candidates=len(codes))
    counts.reasons.update({REASON_CODES[int(c)]: int(n) for c, n in zip(found, numbers)})
    return counts


def rank_order(table: CostTable) -> np.ndarray:
    """Row order: feasible first by tokens/s/GPU descending, then the others by stage.

    Ties: lower peak memory first, then the knobs in ``KNOBS`` order, smaller first.
    """
    tps = np.nan_to_num(table["tokens_per_s_per_gpu"], nan=-np.inf, posinf=-np.inf)
    peak = np.nan_to_num(table["peak_memory_bytes"], nan=np.inf)
    stage = table["stage"]
    order = np.lexsort((peak, -tps, stage))
    # Rows tied on (stage, tokens/s, peak) are few: only they are sorted again, by the knobs.
    s, t, p = stage[order], tps[order], peak[order]
    tie = (s[1:] == s[:-1]) & (t[1:] == t[:-1]) & (p[1:] == p[:-1])
    if not tie.any():
        return order
    tied = np.zeros(len(order), dtype=bool)
    tied[1:] |= tie
    tied[:-1] |= tie
    group = np.cumsum(np.concatenate([[True], ~tie]))[tied]  # consecutive ties share a group
    rows = order[tied]
    keys = [getattr(table.batch, k)[rows] for k in reversed(KNOBS)] + [group]
    order[tied] = rows[np.lexsort(keys)]
    return order


def take(table: CostTable, index: np.ndarray) -> CostTable:
    """The rows ``index`` of a table (layouts and columns)."""
    return CostTable(batch=table.batch.take(index), columns={k: v[index] for k, v in table.columns.items()},
                     training=table.training)


def compact(table: CostTable) -> CostTable:
    """Drop the per-stage memory breakdown (``mem_first_*``, ``mem_last_*`` except the totals),
    which a large search does not need to keep for every layout."""
    keep = {k: v for k, v in table.columns.items()
            if not (k.startswith(("mem_first_", "mem_last_")) and not k.endswith("_total_bytes"))}
    return CostTable(batch=table.batch, columns=keep, training=table.training)


def concat(tables: list[CostTable]) -> CostTable:
    """Tables one after the other (the columns they all have)."""
    if len(tables) == 1:
        return tables[0]
    batch = LayoutBatch({k: np.concatenate([getattr(t.batch, k) for t in tables]) for k in FIELDS})
    names = [k for k in tables[0].columns if all(k in t.columns for t in tables)]
    columns = {k: np.concatenate([t.columns[k] for t in tables]) for k in names}
    return CostTable(batch=batch, columns=columns, training=tables[0].training)


def pareto_front(table: CostTable) -> np.ndarray:
    """Feasible rows not dominated in (tokens/s/GPU, memory headroom), both maximised (a mask)."""
    feasible = np.flatnonzero(table["feasible"])
    front = np.zeros(len(table), dtype=bool)
    front[feasible[pareto_indices(-table["memory_headroom_gib"][feasible],
                                  table["tokens_per_s_per_gpu"][feasible])]] = True
    return front


def pareto_indices(lower: np.ndarray, higher: np.ndarray) -> np.ndarray:
    """Indices of the points that no other point beats on both axes (``lower`` smaller or equal
    and ``higher`` larger or equal), ordered by ``lower``; of identical points the first only.

    E.g. peak memory and tokens/s: sorted by memory (higher throughput first on ties), a point is
    on the front when its throughput exceeds that of every point before it.
    """
    order = np.lexsort((-higher, lower))
    best_before = np.concatenate([[-np.inf], np.fmax.accumulate(higher[order])[:-1]])
    return order[higher[order] > best_before]


def infeasible_message(ctx: CostContext, table: CostTable, counts: RecipeCounts,
                       space_values: dict) -> str:
    """One line: why nothing is feasible (reasons with counts) and the closest miss."""
    top = "; ".join(f"{n} x {reason_message(name)}" for name, n in counts.reasons.most_common(4))
    head = f"no feasible plan among {counts.candidates} candidate layouts (the most common reasons: {top})"
    return f"{head}; {_closest_miss(ctx, table, space_values)}"


def _closest_miss(ctx: CostContext, table: CostTable, space_values: dict) -> str:
    target = ctx.training
    stage = table["stage"] if len(table) else np.array([])
    capacity_gib = ctx.cluster.gpu.usable_memory_bytes / GiB
    if len(table) == 0:
        return "no tp·pp·cp in the space divides the GPU count: try other --tp/--pp/--cp or GPU counts"
    if (stage == NO_BATCH).any():
        i = _closest(table, stage == NO_BATCH, np.abs(table.batch.gbs_seqs - target.gbs_seqs))
        lay = table.batch.layout(i)
        tolerance = abs(lay.gbs_seqs - target.gbs_seqs) / target.gbs_seqs
        hint = (f"try --gbs-tolerance {tolerance:.3g} or another --gbs-seqs" if tolerance < 1.0  # (the option's range)
                else f"the batch is too small for {target.gpus} GPUs: try --gbs-seqs {lay.gbs_seqs} or fewer GPUs")
        return (f"layouts fit but none reaches gbs {target.gbs_seqs} seqs exactly (nearest "
                f"{lay.gbs_seqs} at {lay.describe()}): {hint}")
    if (stage == OUT_OF_MEMORY).any():
        i = _closest(table, stage == OUT_OF_MEMORY, table["peak_memory_bytes"])
        hints = [f"--recompute {m}" for m in ("full",) if m not in space_values["recompute"]]
        hints += [f"--zero {z}" for z in (3,)
                  if z not in space_values["zero"] and z in ctx.profile.capabilities.zero_stages]
        hints.append("more GPUs or a GPU with more memory")
        retries = (f" (without the allocator's cache {table['firm_peak_memory_bytes'][i] / GiB:.1f} GiB: it may "
                   "run in the free-and-retry regime, several times slower, or fail)"
                   if table["fits_with_retries"][i] else "")
        return (f"smallest peak {table['peak_memory_gib'][i]:.1f} GiB > {capacity_gib:.1f} GiB at "
                f"{table.batch.layout(i).describe()}{retries}: try {_either(hints)}")
    i = int(np.argmax(stage == ILLEGAL))
    return f"e.g. {explain_reason(ctx, table.batch, i, int(table['reason_code'][i]))}"


def closest_rows(table: CostTable, stage: np.ndarray, stages: tuple[int, ...]) -> np.ndarray:
    """Per stage of ``stages`` present, the row :func:`_closest_miss` would pick from the ranked
    table: nearest the batch (NO_BATCH), smallest peak (OUT_OF_MEMORY), best ranked (ILLEGAL);
    ties go to the first in rank order. Picking these per chunk and then again from the picks
    gives the pick over the whole table."""
    distance = {NO_BATCH: np.abs(table.batch.gbs_seqs - table.training.gbs_seqs),
                OUT_OF_MEMORY: np.nan_to_num(table["peak_memory_bytes"], nan=np.inf),
                ILLEGAL: -np.nan_to_num(table["tokens_per_s_per_gpu"], nan=-np.inf, posinf=-np.inf)}
    rows = []
    for s in stages:
        mask = stage == s
        if mask.any():
            tied = np.flatnonzero(mask & (distance[s] == distance[s][mask].min()))
            rows.append(tied[rank_order(take(table, tied))[0]])
    return np.array(sorted(rows), dtype=np.int64)


def _either(options: list[str]) -> str:
    """['a', 'b', 'c'] -> 'a, b or c'."""
    return options[0] if len(options) == 1 else f"{', '.join(options[:-1])} or {options[-1]}"


def _closest(table: CostTable, mask: np.ndarray, distance: np.ndarray) -> int:
    """The masked row with the smallest distance (first in rank order on ties)."""
    score = np.where(mask, np.nan_to_num(distance, nan=np.inf), np.inf)
    return int(np.argmin(score))


def describe_knob(knob: str, code: float) -> object:
    """A knob's code as the value the user writes (e.g. 2.0 -> 'full' for recompute)."""
    if knob == "recompute_modules":
        return modules_text(code)
    return CODE_FIELDS[knob][int(code)] if knob in CODE_FIELDS else int(code)
