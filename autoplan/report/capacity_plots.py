"""Figures of a capacity run: days vs cost with the Pareto front, and how throughput per GPU and
MFU fall as GPUs are added, one colour per GPU type.

Drawn from the ranked points of :func:`autoplan.capacity.front.rank_points` (columns hardware,
gpus, train_days, cost_usd, tokens_per_s_per_gpu, mfu, on_front, chosen, feasible and, when the
uncertainty of the cost model is known, days_low/days_high), with the conventions of
:mod:`autoplan.report.plots` (object API, Agg canvas, matplotlib imported inside).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from autoplan.report.plots import _new_figure, _save

PLOT_FILES = {"pareto": "capacity_pareto.png", "scaling": "capacity_scaling.png"}
GPU_COLOURS = ("#1f4e8c", "#d95f02", "#1b9e77", "#6a3d9a", "#e7298a", "#a6761d", "#666666", "#e6ab02")
USD_PER_MILLION = 1e6


def colours(hardware: list[str]) -> dict[str, str]:
    """One colour per GPU type, in the order given."""
    return {name: GPU_COLOURS[i % len(GPU_COLOURS)] for i, name in enumerate(hardware)}


def pareto_figure(points, hardware: list[str], deadline_days: float | None = None,
                  budget_usd: float | None = None):
    """Wall-clock days (log x) against total cost in million USD: every feasible point as a
    dot in its GPU type's colour (hollow when dominated), labelled with its rented GPU count;
    the Pareto front as a step line; the chosen point as a star; the deadline and the budget as
    dashed lines; when the cost model's error band is known, each point's interval as a segment
    from (days_low, cost_low) to (days_high, cost_high): throughput moves both together."""
    fig = _new_figure(10.0, 6.5)
    ax = fig.add_subplot()
    feasible = points[points["feasible"]]
    palette = colours(hardware)
    if {"days_low", "cost_low_usd"} <= set(points.columns) and not feasible.empty:
        ax.plot([], [], color="#888888", alpha=0.5, linewidth=1.5,
                label="interval of the cost model's error band (days and cost move together)")
    for name in hardware:
        rows = feasible[feasible["hardware"] == name]
        if rows.empty:
            ax.scatter([], [], color=palette[name], label=f"{name} (no feasible point)")
            continue
        days, cost = rows["train_days"].to_numpy(float), rows["cost_usd"].to_numpy(float) / USD_PER_MILLION
        front = rows["on_front"].to_numpy(bool)
        if {"days_low", "days_high", "cost_low_usd", "cost_high_usd"} <= set(rows.columns):
            # a slower run than predicted costs more too: the interval is a segment along both axes
            for segment in zip(rows["days_low"], rows["days_high"], rows["cost_low_usd"], rows["cost_high_usd"]):
                ax.plot(segment[:2], np.array(segment[2:]) / USD_PER_MILLION, color=palette[name], alpha=0.3,
                        linewidth=1.2, solid_capstyle="butt")
        ax.scatter(days[~front], cost[~front], s=36, facecolors="none", edgecolors=palette[name], alpha=0.7)
        ax.scatter(days[front], cost[front], s=48, color=palette[name], edgecolors="black", linewidths=0.6,
                   label=f"{name} ({len(rows)} points, {int(front.sum())} on the front)")
        own = rows[rows["on_type_front"]].sort_values("train_days")
        ax.step(own["train_days"], own["cost_usd"] / USD_PER_MILLION, where="post", color=palette[name],
                linewidth=0.8, alpha=0.5, linestyle=":")
        for d, c, gpus in zip(days, cost, rows["gpus"].to_numpy(int)):
            ax.annotate(f"{gpus:,}", (d, c), xytext=(4, 3), textcoords="offset points", fontsize=7,
                        color=palette[name])
    front = feasible[feasible["on_front"]].sort_values("train_days")
    if not front.empty:
        ax.step(front["train_days"], front["cost_usd"] / USD_PER_MILLION, where="post", color="#444444",
                linewidth=1, alpha=0.6, label="Pareto front (days vs cost)", zorder=1)
    chosen = points[points["chosen"]]
    if not chosen.empty:
        row = chosen.iloc[0]
        ax.scatter([row["train_days"]], [row["cost_usd"] / USD_PER_MILLION], s=300, marker="*", color="#d62728",
                   edgecolor="black", zorder=5,
                   label=f"chosen: {int(row['gpus']):,} x {row['hardware']}, {row['train_days']:.1f} days, "
                         f"${row['cost_usd'] / USD_PER_MILLION:.2f}M")
    if deadline_days is not None:
        ax.axvline(deadline_days, color="#c00000", linestyle="--", linewidth=1.2,
                   label=f"deadline {deadline_days:g} days")
    if budget_usd is not None:
        ax.axhline(budget_usd / USD_PER_MILLION, color="#7b3294", linestyle="--", linewidth=1.2,
                   label=f"budget ${budget_usd / USD_PER_MILLION:g}M")
    _plain_log_axis(ax.xaxis)
    ax.set_xlabel("wall-clock days to train (log scale)")
    ax.set_ylabel("total cost (million USD)")
    ax.set_title("Days vs cost per GPU type and rented GPU count (labels: GPUs; dotted: each type's front)")
    ax.grid(alpha=0.3)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=2, fontsize=8, frameon=False)
    return fig


def _plain_log_axis(axis) -> None:
    """A log axis labelled 10, 20, 50, 100 ... instead of 2x10^1."""
    from matplotlib.ticker import LogLocator, NullLocator, ScalarFormatter

    axis.axes.set_xscale("log") if axis.axis_name == "x" else axis.axes.set_yscale("log")
    axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    formatter = ScalarFormatter()
    formatter.set_scientific(False)
    axis.set_major_formatter(formatter)
    axis.set_minor_locator(NullLocator())


def scaling_figure(points, hardware: list[str]):
    """Tokens/s per rented GPU (left) and MFU (right) against the rented GPU count (log 2 x),
    one line per GPU type over its feasible points: where adding GPUs stops paying."""
    from matplotlib.ticker import FuncFormatter, NullLocator

    fig = _new_figure(12.0, 5.0)
    ax_rate, ax_mfu = fig.subplots(1, 2)
    palette = colours(hardware)
    feasible = points[points["feasible"]].sort_values("gpus")
    for name in hardware:
        rows = feasible[feasible["hardware"] == name]
        if rows.empty:
            continue
        gpus = rows["gpus"].to_numpy(int)
        ax_rate.plot(gpus, rows["tokens_per_s_per_gpu"].to_numpy(float), marker="o", color=palette[name], label=name)
        ax_mfu.plot(gpus, 100 * rows["mfu"].to_numpy(float), marker="o", color=palette[name], label=name)
    for ax, label in ((ax_rate, "tokens/s per rented GPU"), (ax_mfu, "MFU on the rented GPUs (%)")):
        ax.set_xscale("log", base=2)
        ax.xaxis.set_minor_locator(NullLocator())  # minor ticks of a log axis cost seconds to lay out
        ax.xaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:,.0f}"))
        ax.set_xlabel("rented GPUs (log scale)")
        ax.set_ylabel(label)
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, frameon=False)
    ax_rate.set_title("Throughput per GPU vs GPU count")
    ax_mfu.set_title("MFU vs GPU count")
    return fig


def write_capacity_plots(points, hardware: list[str], out_dir: str | Path, *, deadline_days: float | None = None,
                         budget_usd: float | None = None) -> dict[str, Path]:
    """Both figures as PNGs in ``out_dir``; returns {key: path} with the keys of PLOT_FILES."""
    out = Path(out_dir)
    points = points.assign(gpus=np.asarray(points["gpus"], dtype=int))
    return {"pareto": _save(pareto_figure(points, hardware, deadline_days, budget_usd), out / PLOT_FILES["pareto"]),
            "scaling": _save(scaling_figure(points, hardware), out / PLOT_FILES["scaling"])}
