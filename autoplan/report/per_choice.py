"""The best plan for each value of a strategy knob that a search compared.

When a search spans several values of a knob that names a strategy rather than a degree (the
pipeline schedule, the optimizer, the offload), the ranked list shows only the winners; a user weighing DualPipe
against 1F1B wants the best plan of each next to the other, with its rank and its distance
from the overall best. A value with no feasible plan names the rule that sets its layouts apart.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from autoplan.layout import CODE_FIELDS

STRATEGY_KNOBS = ("pp_schedule", "optimizer", "offload")  # hsdp is a degree: the table shows it


@dataclass(frozen=True)
class ChoiceBest:
    """The best plan of one knob value: its rank (twins folded) and tokens/s per GPU, or the
    reason that sets its ranked layouts apart (``rank`` None)."""

    knob: str
    value: str
    rank: int | None
    tokens_per_s_per_gpu: float
    reason: str = ""

    def text(self, best_tokens_per_s: float) -> str:
        if self.rank is None:
            return f"{self.value}: no feasible plan{f' ({self.reason})' if self.reason else ''}"
        if self.rank == 1:
            return f"{self.value} {self.tokens_per_s_per_gpu:,.0f} (rank 1)"
        gap = self.tokens_per_s_per_gpu / best_tokens_per_s - 1.0
        return f"{self.value} {self.tokens_per_s_per_gpu:,.0f} (rank {self.rank}, {gap:+.1%})"


def best_per_choice(result) -> dict[str, list[ChoiceBest]]:
    """Per strategy knob the search spanned with two or more values: the best plan of each value,
    best first (a ``SearchResult`` ranked feasible-first)."""
    out: dict[str, list[ChoiceBest]] = {}
    plans = np.flatnonzero(result.feasible)  # ranked; a twin of a plan shares its rank
    tokens = result.table["tokens_per_s_per_gpu"]
    for knob in STRATEGY_KNOBS:
        searched = tuple(result.space.values.get(knob, ()))
        if len(searched) < 2:
            continue
        names = CODE_FIELDS[knob]
        codes = np.asarray(getattr(result.table.batch, knob))
        found, missing = [], []
        for value in searched:
            code = names.index(value)
            rows = plans[codes[plans] == code]
            if len(rows):
                row = int(rows[0])
                found.append(ChoiceBest(knob, value, int(result.ranks[row]), float(tokens[row])))
            else:
                missing.append(ChoiceBest(knob, value, None, float("nan"), _telling_reason(result.reasons, codes == code)))
        out[knob] = sorted(found, key=lambda c: c.rank) + missing
    return out


def _telling_reason(reasons: np.ndarray, mine: np.ndarray) -> str:
    """The reason that sets this value's failed rows apart: the one whose share among them most
    exceeds its share among all rows (a rule only this value breaks beats a common one)."""
    reasons = np.asarray(reasons)
    names, counts = np.unique(reasons[mine], return_counts=True)
    if not len(names):
        return ""
    overall = {n: np.mean(reasons == n) for n in names}
    excess = [c / mine.sum() - overall[n] for n, c in zip(names, counts)]
    return str(names[int(np.argmax(excess))])


def per_choice_summary(result) -> dict[str, list[dict]]:
    """``best_per_choice`` for plans.json / the JSON output."""
    return {knob: [{"value": c.value, "rank": c.rank,
                    "tokens_per_s_per_gpu": None if c.rank is None else c.tokens_per_s_per_gpu,
                    **({"reason": c.reason} if c.rank is None and c.reason else {})} for c in choices]
            for knob, choices in best_per_choice(result).items()}


def per_choice_lines(result) -> list[str]:
    """One line per compared strategy knob, e.g. ``Best per pp_schedule (tokens/s/GPU):
    default 736 (rank 1); dualpipev 675 (rank 6, -8.3%)``."""
    lines = []
    for knob, choices in best_per_choice(result).items():
        ranked = [c for c in choices if c.rank is not None]
        if not ranked:
            continue
        best = ranked[0].tokens_per_s_per_gpu
        lines.append(f"Best per {knob} (tokens/s/GPU): " + "; ".join(c.text(best) for c in choices))
    return lines
