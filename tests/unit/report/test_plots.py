"""The four report figures: each is written, is a valid PNG and shows something.

Frames come from evaluating real layouts of llama3-8b on 64 H100s (no hand-made numbers).
"""

from __future__ import annotations

import itertools
from functools import cache

import numpy as np
import pytest

from autoplan.api import build_context, build_training
from autoplan.cost.evaluate import evaluate
from autoplan.errors import LayoutError
from autoplan.layout import LayoutBatch, resolve_layout
from autoplan.layout_records import layout_from_record
from autoplan.report import plots
from autoplan.units import GiB

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
MIN_PNG_BYTES = 5_000


@cache
def frames():
    """(ctx, frame of a grid of layouts, frame of the 5 fastest feasible ones)."""
    ctx = build_context("llama3-8b", build_training(64, 8192, 512))
    layouts = []
    grid = itertools.product((1, 2, 4, 8), (1, 2, 4), (1, 2), ("none", "selective", "full"),
                             (0, 1, 3), (1, 2))
    for tp, pp, vpp, recompute, zero, mbs in grid:
        try:
            layouts.append(resolve_layout(dict(tp=tp, pp=pp, vpp=vpp, recompute=recompute,
                                               zero=zero, mbs=mbs), ctx.training))
        except LayoutError:
            pass
    frame = evaluate(ctx, LayoutBatch.from_layouts(layouts)).to_frame()
    top = frame[frame["fits"]].sort_values("tokens_per_s_per_gpu", ascending=False).head(5)
    return ctx, frame, top


def capacity_gib(ctx) -> float:
    return ctx.cluster.gpu.usable_memory_bytes / GiB


def assert_nontrivial_png(path):
    import matplotlib.image

    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE, f"{path.name} is not a PNG"
    assert len(data) > MIN_PNG_BYTES, f"{path.name} is only {len(data)} bytes"
    pixels = matplotlib.image.imread(path)
    assert pixels.ndim == 3 and pixels.shape[0] > 200 and pixels.shape[1] > 200
    assert float(np.var(pixels[..., :3])) > 0, f"{path.name} is one flat colour"


def test_frames_have_both_kinds_of_layout():
    _, frame, top = frames()
    assert frame["fits"].any() and not frame["fits"].all()
    assert len(top) == 5


def test_memory_per_stage(tmp_path):
    ctx, _, top = frames()
    path = plots.plot_memory_per_stage(top, capacity_gib(ctx), tmp_path / "memory.png")
    assert path == tmp_path / "memory.png"
    assert_nontrivial_png(path)


def test_throughput_vs_memory(tmp_path):
    ctx, frame, top = frames()
    path = plots.plot_throughput_vs_memory(frame, capacity_gib(ctx), top.index[0], tmp_path / "p.png")
    assert_nontrivial_png(path)


def test_throughput_vs_memory_axis_spans_the_feasible_layouts_and_the_usable_memory():
    # read back from the figure: before, the axis ran to the heaviest layout (~2,000 GiB)
    ctx, frame, top = frames()
    capacity = capacity_gib(ctx)
    fig = plots.throughput_vs_memory_figure(frame, capacity, top.index[0])
    low, high = fig.axes[0].get_xlim()
    feasible = frame.loc[frame["fits"], "peak_memory_gib"]
    # [lightest feasible, usable memory] widened by MEMORY_AXIS_MARGIN of its span each side
    span = capacity - feasible.min()
    margin = plots.MEMORY_AXIS_MARGIN * span
    assert (low, high) == pytest.approx((max(0.0, feasible.min() - margin), capacity + margin))
    assert frame["peak_memory_gib"].max() > high  # the grid has layouts far beyond: clipped
    assert low <= feasible.min() and feasible.max() <= capacity < high


def test_memory_axis_range_without_a_feasible_layout_is_left_to_matplotlib():
    memory = np.array([90.0, 2000.0])
    assert plots.memory_axis_range(memory, np.array([False, False]), 80.0) is None
    assert plots.memory_axis_range(memory, np.array([True, False]), 80.0) == pytest.approx(
        (90.0 - 0.08 * 4.5, 90.0 + 0.08 * 4.5))  # one point: the span is 5 % of it


def test_throughput_vs_memory_without_chosen_plan(tmp_path):
    ctx, frame, _ = frames()
    assert_nontrivial_png(plots.plot_throughput_vs_memory(frame, capacity_gib(ctx), None, tmp_path / "p.png"))


def test_step_breakdown(tmp_path):
    _, _, top = frames()
    assert_nontrivial_png(plots.plot_step_breakdown(top, tmp_path / "sub" / "steps.png"))


@pytest.mark.parametrize("values", [dict(tp=2, pp=4), dict(tp=2, pp=4, vpp=2), dict(tp=8)],
                         ids=["1f1b", "interleaved", "no-pipeline"])
def test_pipeline_schedule(tmp_path, values):
    layout = resolve_layout(values, build_training(64, 8192, 512))
    assert_nontrivial_png(plots.plot_pipeline_schedule(layout, tmp_path / "schedule.png"))


@pytest.mark.parametrize("recompute", ["none", "selective", "full"])
def test_pipeline_chart_shows_the_recomputed_forward_of_full_recompute(recompute):
    """pp=4, vpp=1, tp=2 on 64 GPUs, gbs 512: dp 8, mbs 1, 64 micro-batches, of which
    drawn_microbatches draws m. Full recompute: every backward starts with a grey block of one
    unit, and the step is (m + 3)·(1 + 2 + 1) units long (SC'21 bubble with t_b = 3)."""
    layout = resolve_layout(dict(tp=2, pp=4, recompute=recompute), build_training(64, 8192, 512))
    fig = plots.pipeline_figure(layout)
    ax = fig.axes[0]
    grey = [c for c in ax.collections
            if tuple(np.round(c.get_facecolor()[0][:3], 3)) == tuple(np.round(plots.RECOMPUTE_COLOUR, 3))]
    m = plots.drawn_microbatches(layout)
    per_micro = 4.0 if recompute == "full" else 3.0
    assert len(grey) == (4 * m if recompute == "full" else 0)  # one per backward, on every stage
    assert ax.get_xlim()[1] == pytest.approx((m + 3) * per_micro)
    assert ("recomputed forward" in ax.get_xlabel()) == (recompute == "full")


@pytest.mark.parametrize("pp,vpp,m", [(1, 1, 4), (4, 1, 8), (4, 1, 2), (4, 2, 8), (8, 4, 16), (4, 3, 12)])
def test_timeline_matches_the_bubble_formula(pp, vpp, m):
    # SC'21 Sec. 2.2.2: with t_f = 1 and t_b = 2 a step takes m·3 + (pp - 1)/vpp·3
    # (e.g. pp=4, vpp=2, m=8: 24 + 4.5 = 28.5); m < pp (4, 1, 2): (2 + 3)·3 = 15.
    ops = plots.pipeline_timeline(pp, vpp, m)
    assert len(ops) == 2 * pp * vpp * m
    assert max(op.end for op in ops) == pytest.approx((m + (pp - 1) / vpp) * 3.0)


def test_rank_order_warmup_follows_megatron():
    # 1F1B, pp=4: rank 0 runs 3 warm-up forwards, the last rank none.
    assert [k for k, _, _ in plots.rank_op_order(4, 1, 8, 0)][:5] == ["F", "F", "F", "F", "B"]
    assert [k for k, _, _ in plots.rank_op_order(4, 1, 8, 3)][:3] == ["F", "B", "F"]
    # interleaved pp=4, vpp=2, rank 0: 2·3 + 1·4 = 10 warm-up chunk forwards, micro-batches
    # 0-3 on chunk 0, then 0-3 on chunk 1, then 4-5 on chunk 0.
    order = plots.rank_op_order(4, 2, 8, 0)
    assert order[:11] == [("F", i, 0) for i in range(4)] + [("F", i, 1) for i in range(4)] + [
        ("F", 4, 0), ("F", 5, 0), ("F", 6, 0)]
    assert order[11] == ("B", 0, 1)


def test_drawn_microbatches_capped():
    layout = resolve_layout(dict(tp=1, pp=8, vpp=2), build_training(64, 8192, 512))
    assert layout.grad_acc == 64 and plots.drawn_microbatches(layout) == 16


def test_a_results_row_round_trips_to_its_layout():
    ctx, frame, _ = frames()
    row = frame.iloc[7]
    layout = layout_from_record(row)  # a complete row: no training needed to read it back
    assert layout == layout_from_record(row, ctx.training)
    assert layout == LayoutBatch.from_layouts([layout]).layout(0)
    assert layout.tp == row["tp"] and layout.recompute == row["recompute"]


def test_every_time_and_memory_term_has_a_colour():
    """A term added to cost/terms.py without a colour would break every plotted report."""
    from autoplan.cost.memory import MEMORY_TERMS
    from autoplan.cost.terms import time_terms
    from autoplan.report.plots import MEMORY_COLOURS, TIME_COLOURS

    assert {t.term for t in time_terms()} <= set(TIME_COLOURS)
    assert set(MEMORY_TERMS) <= set(MEMORY_COLOURS)


def test_throughput_vs_memory_counts_the_layouts_the_recipe_line_counts():
    """The figure said '3,025 evaluated / feasible (420)' where the recipe line says 632 reach the
    batch: it counted rows of plans.csv (layouts predicted the same fold into one) and `fits`."""
    from autoplan.api import build_context, build_training
    from autoplan.search import search
    from autoplan.space import load_space

    result = search(build_context("70b", build_training(512, 8192, 512)), load_space("default"))
    fig = plots.throughput_vs_memory_figure(result.to_frame(), 79.6, None)
    labels = fig.axes[0].get_legend_handles_labels()[1]
    assert f"feasible ({result.counts.reach_batch:,} layouts)" in labels
    assert fig.axes[0].get_title().startswith(f"Throughput vs memory of {result.counts.candidates:,} evaluated")
