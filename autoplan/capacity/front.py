"""From phase rows to capacity points: days, GPU-hours and dollars of a run, the Pareto front of
days vs cost, the deadline and budget, and the chosen point.

Days and GPU-hours of each phase come from :func:`autoplan.report.html.add_cost_columns` (the
same arithmetic as ``autoplan search --train-tokens``) with the phase's tokens and the
throughput per *rented* GPU; a run's figures are the sums over its phases, and its cost is
GPU-hours × the GPU's price.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from autoplan.capacity.points import PhaseBest
from autoplan.errors import AutoplanError
from autoplan.report.html import add_cost_columns

PREFER = ("cost", "time")  # cheapest (then fastest) or fastest (then cheapest) within the limits


def phase_frame(rows: list[PhaseBest]) -> pd.DataFrame:
    """One row per (GPU type, rented GPUs, phase), with the phase's days and GPU-hours."""
    frame = pd.DataFrame({
        "hardware": [r.gpu for r in rows], "gpus": [r.rented_gpus for r in rows],
        "phase": [r.phase for r in rows], "phase_tokens": [r.phase_tokens for r in rows],
        "gbs_seqs": [r.gbs_seqs for r in rows], "job_gpus": [r.job_gpus for r in rows],
        "job_tokens_per_s_per_gpu": [r.tokens_per_s_per_gpu for r in rows],
        "tokens_per_s_per_gpu": [r.tokens_per_s_per_rented_gpu for r in rows],
        "job_mfu": [r.mfu for r in rows], "layout": [r.layout for r in rows],
        "infeasible_reason": [r.reason for r in rows]})
    parts = [add_cost_columns(part, gpu_hour_price_usd=None, train_tokens=float(part["phase_tokens"].iloc[0]))
             for _, part in frame.groupby("phase", sort=True)] if len(frame) else [frame]
    return pd.concat(parts).sort_index()


def point_frame(phases: pd.DataFrame, prices_usd: dict[str, float]) -> pd.DataFrame:
    """One row per (GPU type, rented GPUs): the run's days, GPU-hours, cost, throughput per rented
    GPU (train tokens over GPU-seconds), MFU on the rented GPUs (time-weighted over phases: total
    model FLOPs over total GPU time at peak), the layouts of the phases and why it is infeasible."""
    phases = phases.assign(
        rented_mfu=phases["job_mfu"] * phases["job_gpus"] / phases["gpus"],
        weighted_mfu=lambda f: f["rented_mfu"] * f["train_days"])
    grouped = phases.groupby(["hardware", "gpus"], sort=False)
    points = grouped.agg(train_days=("train_days", "sum"), gpu_hours=("gpu_hours", "sum"),
                         train_tokens=("phase_tokens", "sum"), weighted_mfu=("weighted_mfu", "sum"),
                         job_gpus=("job_gpus", _joined), layout=("layout", " | ".join),
                         infeasible_reason=("infeasible_reason", _first_reason)).reset_index()
    # A sum over NaN days (an infeasible phase) must stay NaN, not 0.
    feasible = grouped["train_days"].apply(lambda s: bool(np.isfinite(s).all())).to_numpy()
    points["feasible"] = feasible
    for name in ("train_days", "gpu_hours", "weighted_mfu"):
        points[name] = points[name].where(feasible)
    points["usd_per_gpu_hour"] = points["hardware"].map(prices_usd).astype(float)
    points["cost_usd"] = points["gpu_hours"] * points["usd_per_gpu_hour"]
    points["tokens_per_s_per_gpu"] = points["train_tokens"] / (points["gpu_hours"] * 3600.0)
    points["mfu"] = points["weighted_mfu"] / points["train_days"]
    return points.drop(columns=["weighted_mfu"])


def _joined(values: pd.Series) -> str:
    unique = list(dict.fromkeys(int(v) for v in values))
    return "|".join(str(v) for v in unique)


def _first_reason(values: pd.Series) -> str:
    return next((f"phase {i}: {v}" if len(values) > 1 else v for i, v in enumerate(values, start=1) if v), "")


def pareto_mask(days: np.ndarray, cost: np.ndarray) -> np.ndarray:
    """True where no other point is at least as fast and as cheap and strictly better in one
    (NaN points are never on the front). Pairwise over all points: O(n²), n is ~100."""
    days, cost = np.asarray(days, dtype=float), np.asarray(cost, dtype=float)
    valid = np.isfinite(days) & np.isfinite(cost)
    d_other, c_other = days[None, :], cost[None, :]
    d_self, c_self = days[:, None], cost[:, None]
    dominates = (d_other <= d_self) & (c_other <= c_self) & ((d_other < d_self) | (c_other < c_self))
    dominates &= valid[None, :]
    return valid & ~dominates.any(axis=1)


def limit_columns(points: pd.DataFrame, pessimistic: bool) -> tuple[str, str, str]:
    """(days column, cost column, wording) the deadline and budget are checked against: the
    point predictions, or with ``pessimistic`` the slow end of the error band (days_high,
    cost_high_usd; an error when the points have no band)."""
    if not pessimistic:
        return "train_days", "cost_usd", ""
    if "days_high" not in points.columns:
        raise AutoplanError("pessimistic limits need the cost model's error bands (autoplan/calibration/"
                            "error_bands.yaml); regenerate them with `python benchmarks/accuracy.py --write-bands`")
    return "days_high", "cost_high_usd", " at the slow end of the error band"


def constraint_reasons(points: pd.DataFrame, deadline_days: float | None, budget_usd: float | None,
                       pessimistic: bool = False) -> list[str]:
    """Per point: '' when it meets the deadline and the budget, else which it misses and by how
    much (an infeasible point: its search's reason)."""
    days_column, cost_column, where = limit_columns(points, pessimistic)
    out = []
    for days, cost, feasible, reason in zip(points[days_column], points[cost_column], points["feasible"],
                                            points["infeasible_reason"]):
        if not feasible:
            out.append(f"infeasible: {reason}")
            continue
        misses = []
        if deadline_days is not None and days > deadline_days:
            misses.append(f"misses the deadline{where}: {days:,.1f} days > {deadline_days:g} days")
        if budget_usd is not None and cost > budget_usd:
            misses.append(f"over budget{where}: ${cost / 1e6:,.2f}M > ${budget_usd / 1e6:,.2f}M")
        out.append("; ".join(misses))
    return out


def choose(days: np.ndarray, cost: np.ndarray, deadline_days: float | None, budget_usd: float | None,
           prefer: str = "cost", limit_days: np.ndarray | None = None, limit_cost: np.ndarray | None = None) -> int | None:
    """The index of the chosen point: among the feasible points within the deadline and the
    budget, the cheapest (ties: the fastest), or with ``prefer='time'`` the fastest (ties: the
    cheapest); None when no point is within both. The objective does not depend on which limits
    are given, so a longer deadline never costs more and more budget never takes longer.
    ``limit_days``/``limit_cost`` (default: ``days``/``cost``) are what the limits are checked
    against (the slow end of the error band for pessimistic limits)."""
    if prefer not in PREFER:
        raise AutoplanError(f"prefer must be one of {', '.join(PREFER)}, got {prefer!r}")
    days, cost = np.asarray(days, dtype=float), np.asarray(cost, dtype=float)
    limit_days = days if limit_days is None else np.asarray(limit_days, dtype=float)
    limit_cost = cost if limit_cost is None else np.asarray(limit_cost, dtype=float)
    within = np.isfinite(days) & np.isfinite(cost)
    if deadline_days is not None:
        within &= limit_days <= deadline_days
    if budget_usd is not None:
        within &= limit_cost <= budget_usd
    index = np.flatnonzero(within)
    if len(index) == 0:
        return None
    primary, secondary = (cost, days) if prefer == "cost" else (days, cost)
    return int(index[np.lexsort((secondary[index], primary[index]))[0]])


def rank_points(points: pd.DataFrame, deadline_days: float | None, budget_usd: float | None,
                prefer: str = "cost", pessimistic: bool = False) -> pd.DataFrame:
    """``points`` with on_front (the front of every type together), on_type_front (the front of
    the point's own GPU type), constraint_reason, chosen (:func:`choose`) and rank; rank 1 is the
    chosen point when one meets the deadline and the budget. Order: feasible, meeting the limits,
    on the front, on its type's front, then the preferred objective (cost or days) and the other."""
    out = points.copy().reset_index(drop=True)
    days_column, cost_column, _ = limit_columns(out, pessimistic)
    chosen = choose(out["train_days"].to_numpy(), out["cost_usd"].to_numpy(), deadline_days, budget_usd, prefer,
                    out[days_column].to_numpy(), out[cost_column].to_numpy())
    out["chosen"] = out.index == chosen
    out["on_front"] = pareto_mask(out["train_days"].to_numpy(), out["cost_usd"].to_numpy())
    out["on_type_front"] = False
    for _, rows in out.groupby("hardware", sort=False):
        out.loc[rows.index, "on_type_front"] = pareto_mask(rows["train_days"].to_numpy(), rows["cost_usd"].to_numpy())
    out["constraint_reason"] = constraint_reasons(out, deadline_days, budget_usd, pessimistic)
    keys = ["cost_usd", "train_days"] if prefer == "cost" else ["train_days", "cost_usd"]
    out["_infeasible"] = ~out["feasible"]
    out["_misses"] = out["constraint_reason"] != ""
    out["_off_front"] = ~out["on_front"]
    out["_off_type_front"] = ~out["on_type_front"]
    helpers = ["_infeasible", "_misses", "_off_front", "_off_type_front"]
    out = out.sort_values([*helpers, *keys, "hardware", "gpus"], kind="stable")
    out = out.drop(columns=helpers).reset_index(drop=True)
    out.insert(0, "rank", np.arange(1, len(out) + 1))
    if out["chosen"].any() and not out["chosen"].iloc[0]:
        raise AssertionError(f"the chosen point must rank first, got rank {int(out.loc[out['chosen'], 'rank'].iloc[0])}")
    return out


def chosen_row(ranked: pd.DataFrame) -> pd.Series | None:
    """The chosen point, or None when no point meets the deadline and the budget."""
    rows = ranked[ranked["chosen"]]
    return None if rows.empty else rows.iloc[0]
