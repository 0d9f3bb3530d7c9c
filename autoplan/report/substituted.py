"""A cost term's formula with one layout's values substituted, as ``autoplan explain`` prints it:
``optimizer_states = 12 B × 4.54e9 / 32 = 1.58 GiB``. The formula and its intermediates are the
term's declaration (``cost.memory_formulas``, ``cost.time_formulas``), evaluated by the code.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass

from autoplan.cost.context import CostContext
from autoplan.cost.evaluate import CostTable
from autoplan.cost.formula import Formula, number
from autoplan.cost.memory_formulas import MEMORY_FORMULAS
from autoplan.cost.terms import Term
from autoplan.cost.time_formulas import TIME_FORMULAS
from autoplan.layout import LayoutBatch
from autoplan.units import GiB, MiB

WIDTH = 100  # columns of explain's output


def formula_of(t: Term) -> Formula | None:
    """The declared formula of a memory or time term (None for totals, rates and flags)."""
    if t.kind == "memory" and t.stage and t.adds_to:
        return MEMORY_FORMULAS.get(t.term)
    if t.kind == "time" and t.adds_to:
        return TIME_FORMULAS.get(t.term)
    return None


def quantity_text(value: float, unit: str) -> str:
    """A value with its unit as explain prints it: bytes in GiB or MiB, seconds in s, ms or µs."""
    if unit == "B" and abs(value) >= MiB:
        return f"{value / GiB:.4g} GiB" if abs(value) >= GiB else f"{value / MiB:.4g} MiB"
    if unit == "s" and value:
        for scale, name in ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs")):
            if abs(value) >= scale or name == "µs":
                return f"{value / scale:.4g} {name}"
    return number(value) + {"B": " B", "params": " params", "layers": " layers"}.get(unit, "")


def value_text(t: Term, value: float) -> str:
    return quantity_text(value, {"bytes": "B", "s": "s"}.get(t.unit, t.unit))


@dataclass(frozen=True)
class Substituted:
    """One term of one layout: its formula in general form, with the values, and the values."""

    term: Term
    value: float
    general: str
    substituted: str
    values: dict[str, float]
    texts: dict[str, str]


def substitute(ctx: CostContext, table: CostTable, i: int, t: Term) -> Substituted | None:
    """``t``'s formula for layout ``i`` of ``table`` (None where ``t`` declares none)."""
    formula = formula_of(t)
    if formula is None:
        return None
    one = LayoutBatch.from_layouts([table.batch.layout(i)])
    values = {k: float(v[0]) for k, v in formula.intermediates(ctx, one, t.stage).items()}
    texts = {q.name: quantity_text(values[q.name], q.unit) for q in formula.quantities}
    return Substituted(t, float(table[t.column][i]), formula.general(), formula.substituted(values, texts),
                       values, texts)


def wrapped(text: str, indent: str = "  ", width: int = WIDTH) -> list[str]:
    """``text`` wrapped at ``width`` columns, continuation lines indented two more."""
    return textwrap.wrap(text, width=width, initial_indent=indent, subsequent_indent=indent + "    ",
                         break_on_hyphens=False) or [indent]


def one_line(s: Substituted, label: str) -> list[str]:
    """``label = substituted = value`` wrapped at WIDTH."""
    result = value_text(s.term, s.value)
    return wrapped(f"{label} = {result}" if s.substituted == result else f"{label} = {s.substituted} = {result}")
