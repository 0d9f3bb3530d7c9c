"""Figures for a search run: memory per stage, pipeline schedule, throughput vs memory, step time.

Each ``plot_*`` function draws one figure from evaluated layouts (rows of
``CostTable.to_frame()``), writes it as a PNG and returns the path. Matplotlib is imported
inside the functions (so ``autoplan --help`` stays fast) and used through its object API with
the Agg canvas: no pyplot, no global figure state, no display needed.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from autoplan.cost.memory import MEMORY_TERMS
from autoplan.cost.terms import time_terms
from autoplan.layout import Layout
from autoplan.layout_records import layout_from_record
from autoplan.search.recipe import pareto_indices
from autoplan.units import GiB

TIME_TERMS = tuple(t.term for t in time_terms())  # the step-time terms, in explain's order
TIME_COLOURS = {"compute": "#1f4e8c", "recompute": "#7fa7d9", "tp_exposed": "#d95f02",
                "cp_exposed": "#e7298a", "ep_exposed": "#7570b3", "pp_exposed": "#a6761d",
                "offload_exposed": "#fb9a99", "host_exposed": "#b15928",
                "dp_exposed": "#e6ab02", "bubble": "#bdbdbd", "optimizer": "#1b9e77",
                "muon": "#66c2a5", "optimizer_offload": "#b3de69",
                "overhead": "#666666", "memory_pressure": "#8c2d04"}
MEMORY_COLOURS = dict(zip(MEMORY_TERMS, ("#1f4e8c", "#4a7fc1", "#9ecae1", "#1b9e77", "#d95f02",
                                         "#fdae6b", "#e7298a", "#7570b3", "#bdbdbd")))
MAX_PLANS = 8
MAX_DRAWN_MICROBATCHES = 16
DPI = 110


def _plan_label(rank: int, row: Any, width: int = 34) -> str:
    return f"#{rank} " + "\n".join(textwrap.wrap(layout_from_record(row).describe(), width))


def _new_figure(width_in: float, height_in: float):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width_in, height_in), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _save(fig, path: str | Path) -> Path:
    """The figure as a PNG at ``path``, whole or not at all (a full disk names the file)."""
    import io

    from autoplan.report.destination import write_bytes

    Path(path).parent.mkdir(parents=True, exist_ok=True)
    png = io.BytesIO()
    fig.savefig(png, format="png", dpi=DPI)
    return write_bytes(path, png.getvalue())


# --- memory per stage -------------------------------------------------------------------------

def _memory_bars(frame_top) -> list[tuple[str, dict[str, float]]]:
    """(label, GiB per term) for the first and last stage of each plan; one bar when pp = 1."""
    bars = []
    for rank, (_, row) in enumerate(frame_top.head(MAX_PLANS).iterrows(), start=1):
        stages = ("first", "middle", "last") if int(row["pp"]) >= 3 else ("first", "last")
        if int(row["pp"]) == 1:  # one stage: show the heavier of the two costed views
            heavier = row["mem_first_total_bytes"] >= row["mem_last_total_bytes"]
            stages = ("first",) if heavier else ("last",)
        label = _plan_label(rank, row)
        for stage in stages:
            name = "only stage" if int(row["pp"]) == 1 else f"{stage} stage"
            terms = {t: float(row[f"mem_{stage}_{t}_bytes"]) / GiB for t in MEMORY_TERMS}
            bars.append((f"{label}\n· {name}", terms))
    return bars


def plot_memory_per_stage(frame_top, capacity_gib: float, path: str | Path) -> Path:
    """Stacked memory terms (GiB per GPU) of the first and last pipeline stage of the top plans.

    One horizontal bar per stage, one colour per term of ``cost.memory.MEMORY_TERMS``, the
    usable GPU memory ``capacity_gib`` as a red dashed line. Plans are drawn in frame order
    (rank 1 at the top), at most ``MAX_PLANS``.
    """
    bars = _memory_bars(frame_top)
    fig = _new_figure(11.0, 1.6 + 0.62 * len(bars))
    ax = fig.add_subplot()
    y = np.arange(len(bars))[::-1]
    left = np.zeros(len(bars))
    for term in MEMORY_TERMS:
        widths = np.array([terms[term] for _, terms in bars])
        ax.barh(y, widths, left=left, color=MEMORY_COLOURS[term], label=term.replace("_", " "),
                edgecolor="white", linewidth=0.5)
        left += widths
    for yi, total in zip(y, left):
        ax.text(total + capacity_gib * 0.01, yi, f"{total:.1f} GiB", va="center", fontsize=8)
    ax.axvline(capacity_gib, color="#c00000", linestyle="--", linewidth=1.5,
               label=f"usable memory {capacity_gib:.1f} GiB")
    ax.set_yticks(y, [label for label, _ in bars], fontsize=7.5)
    ax.set_xlim(0, max(capacity_gib, float(left.max(initial=0.0))) * 1.15)
    ax.set_xlabel("memory per GPU (GiB)")
    ax.set_title("Memory per pipeline stage of the top plans")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    ax.grid(axis="x", alpha=0.3)
    return _save(fig, path)


# --- pipeline schedule ------------------------------------------------------------------------

@dataclass(frozen=True)
class PipelineOp:
    """One forward ('F') or backward ('B') pass of a micro-batch's model chunk on a stage."""

    stage: int
    kind: str
    micro: int
    chunk: int
    start: float
    end: float


def rank_op_order(pp: int, vpp: int, num_micro: int, rank: int) -> list[tuple[str, int, int]]:
    """The (kind, micro-batch, chunk) order in which pipeline rank ``rank`` runs its passes.

    Megatron-Core ``pipeline_parallel/schedules.py``: 1F1B warms up with ``pp - rank - 1``
    forwards; interleaved 1F1B (``vpp`` chunks per rank) with ``2(pp - rank - 1) + (vpp - 1)·pp``
    chunk-forwards (all of them when that reaches ``num_micro·vpp``). Then one forward and one
    backward alternate (steady state), then the remaining backwards (cool-down). Virtual
    micro-batch k runs chunk ``(k mod pp·vpp) // pp`` forward (mirrored backward) of micro-batch
    ``(k // (pp·vpp))·pp + k mod pp`` (``get_model_chunk_id``, ``microbatch_group_size = pp``).
    """
    total = num_micro * vpp
    if vpp == 1:
        warmup = min(pp - rank - 1, total)
    else:
        warmup = min(2 * (pp - rank - 1) + (vpp - 1) * pp, total)

    def virtual(k: int, kind: str) -> tuple[str, int, int]:
        chunk = (k % (pp * vpp)) // pp
        return kind, (k // (pp * vpp)) * pp + k % pp, chunk if kind == "F" else vpp - 1 - chunk

    order = [virtual(k, "F") for k in range(warmup)]
    for k in range(total - warmup):
        order += [virtual(warmup + k, "F"), virtual(k, "B")]
    order += [virtual(k, "B") for k in range(total - warmup, total)]
    return order


def _dependency(op: tuple[str, int, int], rank: int, pp: int, vpp: int) -> tuple | None:
    """The (rank, op) whose output ``op`` consumes, or None for the first forward."""
    kind, micro, chunk = op
    if kind == "F":
        if rank > 0:
            return rank - 1, ("F", micro, chunk)
        return (pp - 1, ("F", micro, chunk - 1)) if chunk > 0 else None
    if rank < pp - 1:
        return rank + 1, ("B", micro, chunk)
    if chunk < vpp - 1:
        return 0, ("B", micro, chunk + 1)
    return rank, ("F", micro, chunk)  # the loss: backward follows the last chunk's forward


def pipeline_timeline(pp: int, vpp: int, num_micro: int, *, forward_s: float = 1.0,
                      backward_s: float = 2.0) -> list[PipelineOp]:
    """Start and end of every pass when each rank runs ``rank_op_order`` as early as it can.

    A pass starts when its rank is free and its input is ready (``_dependency``);
    point-to-point transfers take no time. A chunk's forward takes ``forward_s / vpp`` and its
    backward ``backward_s / vpp`` (t_b ≈ 2 t_f, Narayanan et al. 2021 (SC'21) Sec. 2.2). With
    these, the step takes ``(m + (pp - 1)/vpp)·(t_f + t_b)``: the bubble of SC'21 Sec. 2.2.2.
    """
    orders = [rank_op_order(pp, vpp, num_micro, r) for r in range(pp)]
    done: dict[tuple, float] = {}
    free = [0.0] * pp
    cursor = [0] * pp
    ops: list[PipelineOp] = []
    progressed = True
    while progressed:
        progressed = False
        for r in range(pp):
            while cursor[r] < len(orders[r]):
                op = orders[r][cursor[r]]
                dep = _dependency(op, r, pp, vpp)
                if dep is not None and dep not in done:
                    break
                start = max(free[r], done[dep] if dep is not None else 0.0)
                end = start + (forward_s if op[0] == "F" else backward_s) / vpp
                done[(r, op)] = free[r] = end
                ops.append(PipelineOp(r, op[0], op[1], op[2], start, end))
                cursor[r] += 1
                progressed = True
    assert all(c == len(o) for c, o in zip(cursor, orders)), "pipeline schedule deadlocked"
    return ops


def drawn_microbatches(layout: Layout) -> int:
    """Micro-batches drawn: ``grad_acc`` capped at 16 (at least pp), a multiple of pp if vpp > 1."""
    m = min(layout.grad_acc, max(MAX_DRAWN_MICROBATCHES, layout.pp))
    if layout.vpp > 1 and m >= layout.pp:
        m -= m % layout.pp
    return max(m, 1)


RECOMPUTED_FORWARD_S = 1.0  # full recompute runs the layer's forward again inside its backward
RECOMPUTE_COLOUR = (0.55, 0.55, 0.55)


def _op_colour(kind: str, chunk: int, vpp: int) -> tuple[float, float, float]:
    """Forward blue, backward orange; later model chunks darker when interleaved."""
    base = np.array((0.27, 0.51, 0.78)) if kind == "F" else np.array((0.95, 0.55, 0.18))
    return tuple(base * np.linspace(1.0, 0.55, vpp)[chunk])


def plot_pipeline_schedule(layout: Layout, path: str | Path) -> Path:
    """The figure of :func:`pipeline_figure`, saved as a PNG at ``path``."""
    return _save(pipeline_figure(layout), path)


def pipeline_figure(layout: Layout):
    """Micro-batches over time per pipeline stage for ``layout`` (1F1B or interleaved 1F1B).

    Time is in units of one micro-batch's forward pass on one stage (backward = 2 units; with
    full recompute the backward starts with the recomputed forward, 1 more unit, drawn in
    grey: Korthikanti et al. 2022 Sec. 5), from ``pipeline_timeline``. Forwards are blue,
    backwards orange (darker for later model chunks when interleaved), each numbered with its
    micro-batch; idle time, the bubble, is hatched grey. At most
    ``drawn_microbatches(layout)`` micro-batches are drawn.
    """
    pp, vpp, m = layout.pp, layout.vpp, drawn_microbatches(layout)
    recompute_s = RECOMPUTED_FORWARD_S if layout.recompute == "full" else 0.0
    ops = pipeline_timeline(pp, vpp, m, backward_s=2.0 + recompute_s)
    end = max(op.end for op in ops)
    bubble = 1.0 - sum(op.end - op.start for op in ops) / (end * pp)
    width_in = float(np.clip(end * 0.25, 12.0, 22.0))
    fig = _new_figure(width_in, 1.9 + 0.42 * pp)
    ax = fig.add_subplot()
    for r in range(pp):
        ax.broken_barh([(0.0, end)], (r - 0.4, 0.8), facecolor="#f2f2f2", hatch="///",
                       edgecolor="#c8c8c8", linewidth=0.0)
    font = _label_sizes(ops, width_in, end)
    for op in ops:
        ax.broken_barh([(op.start, op.end - op.start)], (op.stage - 0.4, 0.8),
                       facecolor=_op_colour(op.kind, op.chunk, vpp), edgecolor="white", linewidth=0.6)
        if op.kind == "B" and recompute_s:
            ax.broken_barh([(op.start, recompute_s / vpp)], (op.stage - 0.4, 0.8),
                           facecolor=RECOMPUTE_COLOUR, edgecolor="white", linewidth=0.6)
        if font[op.kind]:
            ax.text((op.start + op.end) / 2, op.stage, str(op.micro + 1), ha="center",
                    va="center", fontsize=font[op.kind], color="white")
    _schedule_legend(ax, vpp, recompute=bool(recompute_s))
    ax.set_ylim(pp - 0.5, -0.5)
    ax.set_yticks(range(pp), [f"stage {r}" for r in range(pp)], fontsize=8)
    ax.set_xlim(0, end)
    ax.set_xlabel("time (units of one micro-batch forward on one stage; backward = 2"
                  + (", + 1 recomputed forward)" if recompute_s else ")"))
    if pp == 1:
        kind = "no pipeline (pp=1), micro-batches one after another"
    else:
        kind = f"interleaved 1F1B, pp={pp}, vpp={vpp}" if vpp > 1 else f"1F1B, pp={pp}"
    shown = f"{m} micro-batches" if m == layout.grad_acc else f"first {m} of {layout.grad_acc} micro-batches"
    ax.set_title(f"Pipeline schedule: {kind}, {shown}; idle (bubble) {bubble:.0%} of the drawn time\n"
                 f"{layout.describe()}", fontsize=10)
    return fig


def _label_sizes(ops: list[PipelineOp], width_in: float, end: float) -> dict[str, float]:
    """Font size of the micro-batch numbers on forward and backward blocks (0: too narrow)."""
    points_per_unit = 72.0 * 0.8 * width_in / end  # the axes take roughly 80% of the width
    digits = len(str(max(op.micro for op in ops) + 1))
    sizes = {}
    for kind in ("F", "B"):
        block = min(op.end - op.start for op in ops if op.kind == kind)
        size = min(7.5, block * points_per_unit / (0.65 * digits + 0.4))
        sizes[kind] = size if size >= 4.5 else 0.0
    return sizes


def _schedule_legend(ax, vpp: int, *, recompute: bool = False) -> None:
    from matplotlib.patches import Patch

    handles = [Patch(facecolor=RECOMPUTE_COLOUR, label="recomputed forward (full recompute)")] if recompute else []
    for kind, word in (("F", "forward"), ("B", "backward")):
        for chunk in range(vpp):
            label = f"{word}, chunk {chunk + 1}/{vpp}" if vpp > 1 else word
            handles.append(Patch(facecolor=_op_colour(kind, chunk, vpp), label=label))
    handles.append(Patch(facecolor="#f2f2f2", hatch="///", edgecolor="#c8c8c8", label="idle (bubble)"))
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.005, 1.0), fontsize=8,
              frameon=False)


# --- throughput vs memory ---------------------------------------------------------------------

MEMORY_AXIS_MARGIN = 0.08  # share of the feasible memory span added on each side


def plot_throughput_vs_memory(frame_all, capacity_gib: float, chosen_index, path: str | Path) -> Path:
    """Draw :func:`throughput_vs_memory_figure` into ``path``."""
    return _save(throughput_vs_memory_figure(frame_all, capacity_gib, chosen_index), path)


def memory_axis_range(memory_gib: np.ndarray, fits: np.ndarray, capacity_gib: float) -> tuple[float, float] | None:
    """The x range of the throughput-vs-memory plot: from the lightest feasible layout to the
    usable memory ``capacity_gib`` (≥ every feasible peak), widened by ``MEMORY_AXIS_MARGIN`` of
    that span on each side; None (matplotlib's own range) when no layout is feasible."""
    feasible = memory_gib[fits & np.isfinite(memory_gib)]
    if feasible.size == 0:
        return None
    low, high = float(feasible.min()), max(float(feasible.max()), capacity_gib)
    margin = MEMORY_AXIS_MARGIN * max(high - low, 0.05 * high, 1e-9)
    return max(0.0, low - margin), high + margin


def throughput_vs_memory_figure(frame_all, capacity_gib: float, chosen_index):
    """Tokens/s per GPU against peak memory per GPU for every evaluated layout (a Figure).

    Feasible layouts (``fits``) are blue dots, the others grey crosses (layouts whose numbers
    are undefined are left out). The Pareto front of the feasible ones (no layout is both
    lighter and faster) is a step line; ``chosen_index`` (an index label of ``frame_all``, or
    None) is a red star; ``capacity_gib`` is a red dashed line. The x axis spans the feasible
    layouts and the usable memory (:func:`memory_axis_range`): layouts far above the usable
    memory would otherwise squeeze every feasible plan into a sliver; the legend counts them.
    """
    memory = frame_all["peak_memory_gib"].to_numpy(dtype=float)
    throughput = frame_all["tokens_per_s_per_gpu"].to_numpy(dtype=float)
    # feasible as the recipe line counts it (legal, fits and reaches the batch) where the frame says
    fits = frame_all["feasible" if "feasible" in frame_all else "fits"].to_numpy(dtype=bool)
    shown = np.isfinite(memory) & np.isfinite(throughput) & (throughput > 0)
    # a row of plans.csv stands for its twins too (layouts predicted the same, ``variants``)
    twins = (frame_all["variants"].fillna("").astype(str).map(lambda v: v.count(";") + 1 if v else 0).to_numpy()
             if "variants" in frame_all else np.zeros(len(frame_all), dtype=int))
    fig = _new_figure(10.0, 6.5)
    ax = fig.add_subplot()
    size = 10.0 if len(frame_all) > 2000 else 22.0
    bad, good = shown & ~fits, shown & fits
    x_range = memory_axis_range(memory, good, capacity_gib)
    beyond = int((bad & (memory > x_range[1])).sum()) if x_range else 0
    off_axis = f"; {beyond:,} beyond the axis" if beyond else ""
    ax.scatter(memory[bad], throughput[bad], s=size, marker="x", color="#9e9e9e", alpha=0.6,
               linewidths=0.8, label=f"infeasible ({bad.sum() + twins[bad].sum():,} layouts{off_axis})",
               rasterized=True)
    ax.scatter(memory[good], throughput[good], s=size, color="#4a7fc1", alpha=0.7,
               label=f"feasible ({good.sum() + twins[good].sum():,} layouts)", rasterized=True)
    if good.any():
        idx = np.flatnonzero(good)
        front = idx[pareto_indices(memory[idx], throughput[idx])]
        ax.step(memory[front], throughput[front], where="post", color="#1b9e77", linewidth=2,
                marker="o", markersize=4 if len(front) <= 30 else 0, label=f"Pareto front ({len(front)})")
    ax.axvline(capacity_gib, color="#c00000", linestyle="--", linewidth=1.5,
               label=f"usable memory {capacity_gib:.1f} GiB")
    if chosen_index is not None:
        row = frame_all.loc[chosen_index]
        x, y = float(row["peak_memory_gib"]), float(row["tokens_per_s_per_gpu"])
        ax.scatter([x], [y], s=260, marker="*", color="#d62728", edgecolor="black", zorder=5,
                   label="chosen: " + layout_from_record(row).describe())
        ax.annotate(f"{y:,.0f} tok/s, {x:.1f} GiB", (x, y), xytext=(8, 8),
                    textcoords="offset points", fontsize=8)
    ax.set_xlabel("peak memory per GPU (GiB)")
    ax.set_ylabel("throughput (tokens/s per GPU)")
    ax.set_title(f"Throughput vs memory of {int(shown.sum() + twins[shown].sum()):,} evaluated layouts "
                 f"({int(shown.sum()):,} points: layouts predicted the same share one)")
    ax.grid(alpha=0.3)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=2, fontsize=8, frameon=False)
    if x_range is not None:
        ax.set_xlim(*x_range)
    return fig


# --- step-time breakdown ----------------------------------------------------------------------

def plot_step_breakdown(frame_top, path: str | Path) -> Path:
    """Stacked step time (seconds) of the top plans, one colour per ``time_<term>_s`` column:
    compute, recompute, exposed TP/CP/EP/PP/DP communication, bubble, optimizer, overhead.
    The terms add up to ``step_time_s``; each bar is annotated with it and the throughput."""
    rows = frame_top.head(MAX_PLANS)
    labels = [_plan_label(rank, row, width=40) for rank, (_, row) in enumerate(rows.iterrows(), 1)]
    fig = _new_figure(11.0, 1.6 + 0.55 * len(rows))
    ax = fig.add_subplot()
    y = np.arange(len(rows))[::-1]
    left = np.zeros(len(rows))
    for term in TIME_TERMS:
        widths = rows[f"time_{term}_s"].to_numpy(dtype=float)
        ax.barh(y, widths, left=left, color=TIME_COLOURS[term], label=term.replace("_", " "),
                edgecolor="white", linewidth=0.5)
        left += widths
    for yi, total, tps in zip(y, left, rows["tokens_per_s_per_gpu"].to_numpy(dtype=float)):
        ax.text(total * 1.01, yi, f"{total:.2f} s · {tps:,.0f} tok/s/GPU", va="center", fontsize=8)
    ax.set_yticks(y, labels, fontsize=7.5)
    ax.set_xlim(0, float(left.max(initial=1.0)) * 1.3)
    ax.set_xlabel("time per optimizer step (s)")
    ax.set_title("Step-time breakdown of the top plans")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    ax.grid(axis="x", alpha=0.3)
    return _save(fig, path)
