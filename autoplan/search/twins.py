"""Equivalent plans: layouts predicted the same, collapsed into one row with their variants.

Symmetric knobs give the same prediction: cp=2 with a micro-batch of 2 sequences moves the same
tokens through the same GPUs as cp=1 with a micro-batch of 1 at twice the data parallelism, and
the cost model sees the same work, traffic and memory. Half of a top 10 can be such twins. Two
feasible plans are twins when tokens/s per GPU and peak memory agree to ``DIGITS`` significant
digits and they train the same batch on the same GPUs; the best-ranked of a group (the smaller
knobs, by the ranking's tie-break) stands for it, and its ``variants`` column lists the others
by the knobs in which they differ (``cp=2 dp=8 mbs=2``).
"""

from __future__ import annotations

import numpy as np

from autoplan.cost.evaluate import CostTable
from autoplan.layout import FIELDS
from autoplan.search.recipe import describe_knob

DIGITS = 9
# Fields told in a variant (sp follows tp; the others are knobs or derived degrees).
SHOWN_FIELDS = tuple(f for f in FIELDS if f != "sp")
MAX_VARIANTS_NAMED = 8


def significant(values: np.ndarray, digits: int = DIGITS) -> np.ndarray:
    """``values`` rounded to ``digits`` significant digits (NaN and 0 kept)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        scale = 10.0 ** (np.floor(np.log10(np.abs(values))) - (digits - 1))
        rounded = np.round(values / scale) * scale
    return np.where(np.isfinite(rounded), rounded, values)


def group_twins(table: CostTable) -> tuple[np.ndarray, np.ndarray]:
    """(``twin``: rows folded into a better-ranked twin; ``variants``: per row, the text of the
    rows folded into it, '' for none). ``table`` is ranked; only feasible rows are grouped."""
    n = len(table)
    feasible = np.flatnonzero(table["feasible"])
    twin, variants = np.zeros(n, dtype=bool), np.full(n, "", dtype=object)
    if len(feasible) < 2:
        return twin, variants
    idle = table.columns.get("idle_gpus", np.zeros(n))
    keys = np.stack([significant(table["tokens_per_s_per_gpu"][feasible]),
                     significant(table["peak_memory_bytes"][feasible]),
                     table.batch.gbs_seqs[feasible], idle[feasible]], axis=1)
    _, first, group = np.unique(keys, axis=0, return_index=True, return_inverse=True)
    leader = feasible[first[group.ravel()]]  # the best-ranked row of each row's group
    is_twin = leader != feasible
    twin[feasible[is_twin]] = True
    by_leader = np.argsort(leader[is_twin], kind="stable")  # a leader's twins together, in rank order
    folded, their_leader = feasible[is_twin][by_leader], leader[is_twin][by_leader]
    texts = _differences(table, folded, their_leader)
    leaders, starts, sizes = np.unique(their_leader, return_index=True, return_counts=True)
    for row, start, size in zip(leaders.tolist(), starts.tolist(), sizes.tolist()):
        more = f"; and {size - MAX_VARIANTS_NAMED} more" if size > MAX_VARIANTS_NAMED else ""
        variants[row] = "; ".join(texts[start:start + min(size, MAX_VARIANTS_NAMED)]) + more
    return twin, variants


def _differences(table: CostTable, rows: np.ndarray, leaders: np.ndarray) -> list[str]:
    """'cp=2 dp=8 mbs=2' per row: the fields in which it differs from its leader."""
    b = table.batch
    parts = []
    for k in SHOWN_FIELDS:
        values = getattr(b, k)
        mine = values[rows]
        differs = mine != values[leaders]
        codes, index = np.unique(mine, return_inverse=True)
        names = np.array([f"{k}={describe_knob(k, c)}" for c in codes] + [""], dtype=object)
        parts.append(names[np.where(differs, index.ravel(), len(codes))])
    return [" ".join(p for p in row if p) for row in zip(*parts)]
