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
    folded, their_leader = feasible[is_twin], leader[is_twin]
    twin[folded] = True
    by_leader = np.argsort(their_leader, kind="stable")  # twins of one leader together, in rank order
    leaders, starts = np.unique(their_leader[by_leader], return_index=True)
    for row, members in zip(leaders, np.split(folded[by_leader], starts[1:])):
        variants[row] = _describe_variants(table, int(row), members)
    return twin, variants


def _describe_variants(table: CostTable, leader: int, members: np.ndarray) -> str:
    """'cp=2 dp=8 mbs=2; ...': each twin by the fields in which it differs from the leader."""
    b = table.batch
    texts = []
    for row in members[:MAX_VARIANTS_NAMED]:
        diff = [f"{k}={describe_knob(k, getattr(b, k)[row])}" for k in SHOWN_FIELDS
                if getattr(b, k)[row] != getattr(b, k)[leader]]
        texts.append(" ".join(diff))
    more = len(members) - MAX_VARIANTS_NAMED
    return "; ".join(texts) + (f"; and {more} more" if more > 0 else "")
