"""The capacity figures, read back from the figure objects: one colour per GPU type, every
feasible point drawn, the chosen star, the limits, and the scaling lines."""

from __future__ import annotations

import numpy as np

from autoplan.report.capacity_plots import colours, pareto_figure, scaling_figure


def test_pareto_figure_draws_every_feasible_point_once_in_its_types_colour(small_run):
    points, hardware = small_run.points, list(small_run.query.hardware)
    fig = pareto_figure(points, hardware, deadline_days=30.0, budget_usd=5e6)
    ax = fig.axes[0]
    drawn = {}
    for collection in ax.collections:
        offsets = collection.get_offsets()
        if len(offsets) and collection.get_label() and not collection.get_label().startswith("_"):
            drawn[collection.get_label()] = offsets
    feasible = points[points["feasible"]]
    for name in hardware:
        label = next(k for k in drawn if k.startswith(f"{name} ("))
        front = feasible[(feasible["hardware"] == name) & feasible["on_front"]]
        assert f"{len(feasible[feasible['hardware'] == name])} points" in label
        np.testing.assert_allclose(sorted(drawn[label][:, 0]), sorted(front["train_days"]))
    chosen = points[points["chosen"]].iloc[0]
    star = next(v for k, v in drawn.items() if k.startswith("chosen:"))
    np.testing.assert_allclose(star[0], [chosen["train_days"], chosen["cost_usd"] / 1e6])
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert lines["deadline 30 days"].get_xdata()[0] == 30.0
    assert lines["budget $5M"].get_ydata()[0] == 5.0
    assert ax.get_xscale() == "log" and "days" in ax.get_xlabel() and "million USD" in ax.get_ylabel()
    assert len(set(colours(hardware).values())) == len(hardware)


def test_scaling_figure_has_one_line_per_type_over_gpu_count(small_run):
    points, hardware = small_run.points, list(small_run.query.hardware)
    fig = scaling_figure(points, hardware)
    rate, mfu = fig.axes
    for ax, column, scale in ((rate, "tokens_per_s_per_gpu", 1.0), (mfu, "mfu", 100.0)):
        lines = {line.get_label(): line for line in ax.get_lines()}
        assert set(lines) == set(hardware)
        for name in hardware:
            rows = points[points["feasible"] & (points["hardware"] == name)].sort_values("gpus")
            np.testing.assert_array_equal(lines[name].get_xdata(), rows["gpus"])
            np.testing.assert_allclose(lines[name].get_ydata(), scale * rows[column])
        assert ax.get_xscale() == "log"
