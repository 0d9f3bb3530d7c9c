"""The record that defines one output column of ``evaluate()`` (``Term``), and the names
the definitions share: the stages, the step time and the papers most terms cite.

The definitions themselves are ``cost.memory_columns``' (memory) and ``cost.terms``' (time, rates
and flags); ``cost.terms`` gathers them and is where readers look a column up.
"""

from __future__ import annotations

from dataclasses import dataclass

KINDS = ("memory", "time", "rate", "ratio", "count", "flag", "code")
STAGES = ("first", "middle", "last")  # rank 0, an interior rank (pp >= 3, else 0), rank pp − 1
STEP_TIME = "step_time_s"

ZERO = "ZeRO (Rajbhandari et al. 2020) Sec. 3, Fig. 1"
SC21 = "Narayanan et al. SC'21"
KORTHIKANTI = "Korthikanti et al. 2022"


@dataclass(frozen=True)
class Term:
    """One output column of ``evaluate()``.

    ``term`` is the short name explain shows (``weights``, ``tp_exposed``); ``unit`` is the
    column's unit ('bytes', 's', 'GiB', 'FLOPs', '1' for a plain ratio ...); ``parameters``
    are the names the formula uses; ``adds_to`` is the column this term is a summand of (a
    stage's memory total, or the step time); ``stage`` is 'first' or 'last' for the per-stage
    memory columns, whose definition is written once for both stages.
    """

    column: str
    term: str
    kind: str
    unit: str
    meaning: str
    formula: str
    source: str
    parameters: tuple[str, ...] = ()
    adds_to: str | None = None
    stage: str | None = None


def stage_memory_columns(term: str, meaning: str, formula: str, source: str, parameters: tuple[str, ...]) -> list[Term]:
    """The first- and last-stage columns of one memory term (summands of the stage total)."""
    return [Term(f"mem_{s}_{term}_bytes", term, "memory", "bytes", meaning, formula,
                 source, parameters, adds_to=f"mem_{s}_total_bytes", stage=s) for s in STAGES]
