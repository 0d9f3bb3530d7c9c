"""Per-term breakdowns of one evaluated layout, with the formula and source of each term.

Formulas, units and sources come from the term definitions (``autoplan/cost/terms.py``); the
formula is rendered for the layout and profile at hand, with the values of the parameters it
names.
"""

from __future__ import annotations

from typing import Any

from autoplan.cost.context import CostContext
from autoplan.cost.evaluate import CostTable
from autoplan.cost.term_text import formula_text, parameter_value
from autoplan.cost.terms import STAGES, Term, memory_terms, term, time_terms
from autoplan.units import GiB

DISPLAY_UNITS = {"bytes": ("GiB", GiB)}  # unit of a term -> (unit shown, divisor)


def _parameter_values(ctx: CostContext, t: Term) -> str:
    """'grad_bytes=4, zero_shards_over_cp=True' for the scalar parameters the formula names."""
    parts = []
    for name in t.parameters:
        value = parameter_value(ctx, name)
        if isinstance(value, bool) or isinstance(value, str):
            parts.append(f"{name}={value}")
        elif isinstance(value, (int, float)):
            parts.append(f"{name}={value:.4g}")
    return ", ".join(parts)


def _row(ctx: CostContext, table: CostTable, i: int, t: Term) -> dict[str, Any]:
    unit, divisor = DISPLAY_UNITS.get(t.unit, (t.unit, 1.0))
    return {"kind": t.kind, "stage": t.stage or "step", "term": t.term,
            "value": float(table[t.column][i]) / divisor, "unit": unit,
            "formula": formula_text(t, ctx, table.batch.layout(i)),
            "parameters": _parameter_values(ctx, t), "source": t.source}


def explain_terms(ctx: CostContext, table: CostTable, i: int) -> list[dict[str, Any]]:
    """Every memory term (per stage) and time term of layout ``i`` with formula and source.

    The memory rows of a stage add up to its total, the time rows to the step time. Under
    offload a last row (stage 'host') gives the model states held in host memory per GPU.
    """
    stages = [s for s in STAGES if s != "middle" or table.batch.pp[i] >= 3]  # rank 1 is interior from pp 3
    rows = [_row(ctx, table, i, t) for stage in stages for t in memory_terms(stage)]
    rows += [_row(ctx, table, i, t) for t in time_terms()]
    if table.batch.layout(i).offload != "none":
        rows.append({**_row(ctx, table, i, term("host_memory_bytes")), "stage": "host"})
    return rows


def bottleneck(table: CostTable, i: int) -> str:
    """The largest non-compute share of the step, named."""
    step = float(table["step_time_s"][i])
    others = [t for t in time_terms() if t.term != "compute"]
    worst = max(others, key=lambda t: float(table[t.column][i]))
    return f"{worst.meaning}: {float(table[worst.column][i]) / step:.0%} of the step"
