"""The accuracy report's record (``Figure``) and the error statistics every section shares: the
median, p90 or mean absolute % error of a source's rows on the fit, held-out and all subsets
(``split_figures``). ``calibration.accuracy_report`` assembles the sections."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from autoplan.calibration.accuracy import abs_pct_errors
from autoplan.calibration.rows import Row

SUBSETS = ("fit", "held-out", "all")


@dataclass(frozen=True)
class Figure:
    """One reported number: ``value`` over ``n`` rows of ``subset``, and its target if any."""

    section: str
    figure: str
    subset: str
    n: int
    value: float
    unit: str = "%"
    target: str = ""
    met: bool | None = None

    def record(self) -> dict:
        return {"section": self.section, "figure": self.figure, "subset": self.subset, "n": self.n,
                "value": self.value, "unit": self.unit, "target": self.target, "met": self.met}


def statistic(errors: np.ndarray, kind: str) -> float:
    if not len(errors):
        return math.nan
    return {"median": float(np.median(errors)), "p90": float(np.percentile(errors, 90)),
            "mean": float(np.mean(errors))}[kind]


def split_figures(section: str, figure: str, rows: Sequence[Row], predicted: np.ndarray, measured: np.ndarray,
                   fit_ids: set[str], kind: str, limit: float | None) -> list[Figure]:
    """``kind`` (median, p90, mean) of |error| % on the fit, held-out and all rows; the target
    ``<= limit`` is judged on the held-out rows."""
    fitted = np.array([r.row_id in fit_ids for r in rows], dtype=bool)
    out = []
    for subset, mask in zip(SUBSETS, (fitted, ~fitted, np.ones_like(fitted))):
        e = abs_pct_errors(predicted[mask], measured[mask])
        value = statistic(e, kind)
        judged = limit is not None and subset == "held-out"
        out.append(Figure(section, figure, subset, len(e), value, target=f"<= {limit:g}" if judged else "",
                          met=bool(value <= limit) if judged else None))
    return out
