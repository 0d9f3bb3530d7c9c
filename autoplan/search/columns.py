"""The columns of a search's results (plans.csv, the DataFrame of ``SearchResult``), as arrays.

Built without pandas, so a search that writes plans.csv (:mod:`autoplan.report.csv_text`) never
imports it; ``SearchResult.frame_of`` wraps the same columns in a DataFrame for callers that
want one. Order: rank, the record fields (``layout.RECORD_FIELDS``: setup and layout, categorical
knobs by name), the predictions, the reason a row is not feasible, its folded twins.
"""

from __future__ import annotations

import numpy as np

from autoplan.cost.evaluate import CostTable
from autoplan.layout import CODE_FIELDS, RECORD_FIELDS
from autoplan.recompute_modules import modules_texts

INTERNAL_COLUMNS = ("reason_code", "stage")  # the recipe's own bookkeeping, not written


def record_column(table: CostTable, name: str) -> np.ndarray:
    """One record field over the table: integers as int64, sp as bool, codes as their names."""
    if name in ("gpus", "seq_len"):
        return np.full(len(table), getattr(table.training, name), dtype=np.int64)
    values = getattr(table.batch, name)
    if name in CODE_FIELDS:
        return np.asarray(CODE_FIELDS[name], dtype=object)[values.astype(np.int64)]
    if name == "recompute_modules":
        return modules_texts(values)
    return values > 0 if name == "sp" else values.astype(np.int64)


def result_columns(table: CostTable, *, ranks: np.ndarray, reasons: np.ndarray,
                   variants: np.ndarray) -> dict[str, np.ndarray]:
    """Every results column of ``table``'s rows (``ranks``, ``reasons`` and ``variants`` given
    per row), in file order."""
    out: dict[str, np.ndarray] = {"rank": np.asarray(ranks, dtype=np.int64)}
    out.update({name: record_column(table, name) for name in RECORD_FIELDS})
    out.update({k: v for k, v in table.columns.items() if k not in INTERNAL_COLUMNS})
    out["infeasible_reason"] = np.asarray(reasons, dtype=object)
    out["variants"] = np.asarray(variants, dtype=object)
    return out
