"""The column dictionary of a search's results (plans.csv, plans.json, ``--format json``).

Cost columns are described by their term definitions (``autoplan/cost/terms.py``); the layout
fields and the columns the search recipe adds are described here. ``columns.md`` in a results
folder and the ``columns`` entry of plans.json are both written from ``column_dictionary``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from autoplan.cost.terms import BY_COLUMN
from autoplan.knobs import KNOBS

# column -> (kind, unit, meaning) for the columns that are not cost terms
LAYOUT_COLUMNS = {
    "rank": ("count", "1", "rank of the layout (1 = the best plan)"),
    "gpus": ("count", "GPUs", "GPUs in the job"),
    "seq_len": ("count", "tokens", "sequence length"),
    "gbs_seqs": ("count", "sequences", "global batch size"),
    # every layout knob as the registry describes it (autoplan.knobs)
    **{knob.name: (knob.column_kind, knob.unit, knob.meaning) for knob in KNOBS},
}
SEARCH_COLUMNS = {
    "reaches_batch": ("flag", "bool", "the layout reaches the global batch within the tolerance"),
    "feasible": ("flag", "bool", "legal, fits in memory and reaches the batch"),
    "exposed_comm_fraction": ("ratio", "1", "exposed tp, cp, ep, pp and dp communication time / step_time_s"),
    "pareto": ("flag", "bool", "on the Pareto front of tokens/s per GPU against memory headroom"),
    # The batch a plan trains with (the nearest reachable within --gbs-tolerance), and its time
    # per token, the measure that compares plans of different batches.
    "gbs_tokens": ("count", "tokens", "global batch of this plan in tokens: gbs_seqs·seq_len"),
    "step_time_per_token_s": ("time", "s", "step time per token of the batch: step_time_s / gbs_tokens"),
    "variants": ("code", "text", "layouts predicted the same to 9 digits (step time and peak memory), "
                                 "collapsed into this row; ';'-separated"),
    "robust_moved": ("flag", "bool", "ranked here by robustness among the plans predicted within 5% of the best "
                                     "(memory headroom, then fewer cross-node collectives), not by its tokens/s"),
    "idle_gpus": ("count", "GPUs", "GPUs of the job this plan leaves idle (--allow-idle-gpus)"),
    "infeasible_reason": ("code", "text", "why the layout is not feasible ('' when it is)"),
    "train_days": ("time", "days", "days to train on --train-tokens (with --train-tokens)"),
    "gpu_hours": ("time", "GPU-hours", "GPU-hours to train on --train-tokens"),
    "cost_usd": ("rate", "USD", "cost of those GPU-hours at --price (with --price)"),
}

# The error band of every prediction (autoplan.calibration.uncertainty): point × the held-out
# error factors of the plan's (trainer, GPU generation, dense/MoE) group.
BAND_COLUMNS = {
    f"{column}_{side}": (kind, unit, (f"{meaning}: {side} end of the error band (the leave-one-source-out error "
                                      "of the trainer, GPU generation and dense/MoE group)"))
    for column, kind, unit, meaning in (
        ("tokens_per_s_per_gpu", "rate", "tokens/s", "tokens per second per GPU"),
        ("step_time_s", "time", "s", "time of one optimizer step"),
        ("peak_memory_bytes", "memory", "bytes", "peak memory per GPU"),
        ("peak_memory_gib", "memory", "GiB", "peak memory per GPU"))
    for side in ("low", "high")}


def describe_column(column: str) -> dict[str, str]:
    """Kind, unit, meaning and (for a cost term) formula and source of one column."""
    if column in BY_COLUMN:
        t = BY_COLUMN[column]
        meaning = f"{t.meaning} ({t.stage} pipeline stage)" if t.stage else t.meaning
        return {"kind": t.kind, "unit": t.unit, "meaning": meaning, "formula": t.formula,
                "source": t.source}
    kind, unit, meaning = (LAYOUT_COLUMNS | SEARCH_COLUMNS | BAND_COLUMNS).get(column, ("", "", ""))
    return {"kind": kind, "unit": unit, "meaning": meaning}


def column_dictionary(columns: Iterable[str]) -> dict[str, dict[str, str]]:
    """``{column: describe_column(column)}`` in the given order."""
    return {c: describe_column(c) for c in columns}


def columns_markdown(columns: Iterable[str]) -> str:
    """columns.md: one row per column of plans.csv, with unit and meaning (formulas below)."""
    entries = column_dictionary(columns)
    lines = ["# Columns of plans.csv and plans.json", "",
             "Generated from autoplan's term definitions (`autoplan/cost/terms.py`); "
             "docs/cost-model.md derives each cost term.", "",
             "| column | kind | unit | meaning |", "| --- | --- | --- | --- |"]
    lines += [f"| `{c}` | {d['kind']} | {d['unit']} | {d['meaning']} |" for c, d in entries.items()]
    lines += ["", "## Formulas", ""]
    lines += [f"* `{c}` = {d['formula']}  \n  source: {d['source']}" for c, d in entries.items() if "formula" in d]
    return "\n".join(lines) + "\n"


def plain_dictionary(columns: Iterable[str]) -> dict[str, Any]:
    """The dictionary for a JSON document: kind, unit and meaning of each column."""
    return {c: {k: d[k] for k in ("kind", "unit", "meaning")} for c, d in column_dictionary(columns).items()}
