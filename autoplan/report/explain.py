"""Per-term breakdowns of one evaluated layout, with the formula and source of each term.

Formulas, units and sources come from the term definitions (``autoplan/cost/terms.py``); the
formula is rendered for the layout and profile at hand, with the values of the parameters it
names.
"""

from __future__ import annotations

from dataclasses import fields, is_dataclass
from typing import Any

from autoplan.cost.context import CostContext
from autoplan.cost.evaluate import CostTable
from autoplan.cost.terms import BY_COLUMN as TERMS_BY_COLUMN
from autoplan.cost.terms import CONSTANTS, STAGES, Term, memory_terms, term, time_terms
from autoplan.profiles.profile import FLAT_NAMES
from autoplan.report.substituted import formula_of, one_line, substitute, value_text, wrapped
from autoplan.units import GiB

DISPLAY_UNITS = {"bytes": ("GiB", GiB)}  # unit of a term -> (unit shown, divisor)


def _field(obj: Any, name: str) -> tuple[bool, Any]:
    """(found, value) of field ``name`` of dataclass ``obj`` or of a dataclass nested in it."""
    for f in fields(obj):
        value = getattr(obj, f.name)
        if f.name == name:
            return True, value
        if is_dataclass(value) and not isinstance(value, type):
            found = _field(value, name)
            if found[0]:
                return found
    return False, None


def parameter_value(ctx: CostContext, name: str) -> Any:
    """The value of a parameter a term names: a field of the context (a trainer profile's grouped
    field by its flat name, ``profile.FLAT_NAMES``), or a module constant."""
    if name in FLAT_NAMES:
        group, field_name = FLAT_NAMES[name]
        return getattr(getattr(ctx.profile, group), field_name)
    for source in (ctx.efficiency, ctx.profile, ctx.cluster, ctx.cluster.gpu, ctx.training, ctx):
        found, value = _field(source, name)
        if found:
            return value
    if name in CONSTANTS:
        return CONSTANTS[name].value
    raise KeyError(f"parameter '{name}' is neither a field of the cost context nor in terms.CONSTANTS")


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


def _with_values(ctx: CostContext, table: CostTable, i: int, t: Term) -> str:
    """The term's formula with layout ``i``'s values, or its general form where it declares none."""
    s = substitute(ctx, table, i, t)
    return t.formula if s is None else f"{s.general} = {s.substituted}"


def _row(ctx: CostContext, table: CostTable, i: int, t: Term) -> dict[str, Any]:
    unit, divisor = DISPLAY_UNITS.get(t.unit, (t.unit, 1.0))
    return {"kind": t.kind, "stage": t.stage or "step", "term": t.term,
            "value": float(table[t.column][i]) / divisor, "unit": unit,
            "formula": _with_values(ctx, table, i, t),
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


def _stages_of(table: CostTable, i: int) -> list[str]:
    return [s for s in STAGES if s != "middle" or table.batch.pp[i] >= 3]


def memory_rows(table: CostTable, i: int) -> list[tuple[str, list[float]]]:
    """(term, GiB per stage) of every memory term of layout ``i`` that is not 0 on some stage,
    then the stage totals ('total'): the memory part of the compact ``explain``."""
    stages = _stages_of(table, i)
    per_stage = [memory_terms(stage) for stage in stages]
    rows = []
    for k, t in enumerate(per_stage[0]):
        values = [float(table[terms[k].column][i]) / GiB for terms in per_stage]
        if any(values):
            rows.append((t.term, values))
    rows.append(("total", [float(table[f"mem_{stage}_total_bytes"][i]) / GiB for stage in stages]))
    return rows


def time_rows(table: CostTable, i: int) -> list[tuple[str, float]]:
    """(term, seconds) of every time term of layout ``i`` that is not 0, then 'step'."""
    rows = [(t.term, float(table[t.column][i])) for t in time_terms() if float(table[t.column][i])]
    return rows + [("step", float(table["step_time_s"][i]))]


def compact_lines(ctx: CostContext, table: CostTable, i: int) -> list[str]:
    """The default ``explain``: memory per stage, the peak stage's memory terms and the step's
    time terms with their formulas, this layout's values substituted (at most 100 columns; about
    50 lines; ``--full``: every term's formula, parameters, quantities and source)."""
    stages = _stages_of(table, i)
    lines = [f"{'memory per GPU, GiB':<28}" + "".join(f"{s:>10}" for s in stages)]
    lines += [f"  {name:<26}" + "".join(f"{v:>10.2f}" for v in values) for name, values in memory_rows(table, i)]
    peak, room = float(table["peak_memory_gib"][i]), float(table["memory_headroom_gib"][i])
    lines.append(f"  {'usable':<26}{peak + room:>10.2f}   (peak {peak:.2f} on rank {int(table['peak_stage'][i])} of "
                 f"the pipeline, {room:+.2f} left)")
    stage = peak_stage_name(table, i)
    lines += ["", f"{stage} stage, this layout's values:"]
    for t in memory_terms(stage):
        if float(table[t.column][i]):
            lines += one_line(substitute(ctx, table, i, t), t.term)
    step = float(table["step_time_s"][i])
    lines += ["", f"{'step time':<28}{'s':>10}{'share':>10}"]
    lines += [f"  {name:<26}{value:>10.3f}{value / step:>10.1%}" for name, value in time_rows(table, i)]
    lines += ["", "time terms, this layout's values:"]
    for t in time_terms():
        if float(table[t.column][i]):
            lines += one_line(substitute(ctx, table, i, t), t.term)
    return lines


def full_lines(ctx: CostContext, table: CostTable, i: int) -> list[str]:
    """``explain --full``: every term of every stage and every time term with its formula, the
    formula with this layout's values, each quantity's value, meaning and code, the parameters
    and the source, wrapped at 100 columns."""
    lines: list[str] = []
    described: set[str] = set()
    for stage, group in [*((s, memory_terms(s)) for s in _stages_of(table, i)), ("step", time_terms())]:
        lines += ["", f"{'memory per GPU, ' + stage + ' stage' if stage != 'step' else 'step time'}:"]
        for t in group:
            s = substitute(ctx, table, i, t)
            lines.append(f"{t.term} = {value_text(t, s.value)}: {t.meaning}")
            lines += wrapped(f"= {s.general}")
            lines += wrapped(f"= {s.substituted}")
            if t.term in described:
                continue
            described.add(t.term)
            for q in formula_of(t).quantities:
                lines += wrapped(f"{q.name} = {s.texts[q.name]}: {q.meaning} ({q.code})", "    ")
            if t.parameters:
                lines += wrapped(f"parameters: {_parameter_values(ctx, t)}", "    ")
            lines += wrapped(f"source: {t.source}", "    ")
    return lines[1:]


def peak_stage_name(table: CostTable, i: int) -> str:
    """The stage ('first', 'middle' or 'last') whose memory total is the largest."""
    return max(_stages_of(table, i), key=lambda stage: float(table[f"mem_{stage}_total_bytes"][i]))


def differences(this: CostTable, other: CostTable, i: int = 0, j: int = 0) -> list[tuple[str, str, float, float]]:
    """(section, term, this, other) of every term whose value differs between layout ``i`` of
    ``this`` and ``j`` of ``other``: the time terms (s), largest difference first, then the
    memory terms of each layout's heaviest stage (GiB), largest first. What ``explain --vs`` shows."""
    rows = [("time, s", t.term, float(this[t.column][i]), float(other[t.column][j]))
            for t in (*time_terms(), term("step_time_s"))]
    mine, theirs = peak_stage_name(this, i), peak_stage_name(other, j)
    where = f"memory, GiB ({mine} stage" + (f" vs {theirs})" if theirs != mine else ")")
    pairs = zip((*memory_terms(mine), term(f"mem_{mine}_total_bytes")),
                (*memory_terms(theirs), term(f"mem_{theirs}_total_bytes")))
    memory = [(where, a.term, float(this[a.column][i]) / GiB, float(other[b.column][j]) / GiB) for a, b in pairs]
    return [row for block in (rows, memory) for row in sorted(block, key=lambda r: -abs(r[3] - r[2]))
            if row[2] != row[3]]


VS_FORMULAS = 3  # the differing terms per section `explain --vs` shows with both sides' values substituted


def vs_formula_lines(ctx: CostContext, this: CostTable, other: CostTable, section: str, name: str) -> list[str]:
    """A differing term's formula with this layout's and the other's values (``explain --vs``);
    [] for a total."""
    if section.startswith("time"):
        columns = (f"time_{name}_s",) * 2
    else:
        columns = tuple(f"mem_{peak_stage_name(t, 0)}_{name}_bytes" for t in (this, other))
    if columns[0] not in TERMS_BY_COLUMN or formula_of(TERMS_BY_COLUMN[columns[0]]) is None:
        return []
    sides = [substitute(ctx, table, 0, TERMS_BY_COLUMN[c]) for table, c in zip((this, other), columns)]
    return [line for label, s in zip(("this", "other"), sides)
            for line in wrapped(f"{label}: {s.substituted} = {value_text(s.term, s.value)}", "      ")]
