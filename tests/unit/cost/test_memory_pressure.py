"""The caching allocator's retry regime (cost/evaluate.py, memory_pressure_s): nothing below
memory_pressure_threshold, the full memory_pressure_slowdown from MEMORY_PRESSURE_RAMP above
it, linear between, and a step's other terms untouched.

The Ultra-Scale Playbook's 8B model with nanotron on 32 H100s (AWS p5), seq 4096, batch 256.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from autoplan.api import build_context, build_training
from autoplan.cost.evaluate import MEMORY_PRESSURE_RAMP, evaluate, memory_pressure_s
from autoplan.layout import LayoutBatch, resolve_layout

LAYOUTS = [{"tp": tp, "pp": pp, "mbs": mbs, "zero": 1} for tp in (1, 2, 4) for pp in (2, 4) for mbs in (1, 2, 4)]


def ctx_with(threshold: float, slowdown: float):
    ctx = build_context("usp-8b", build_training(32, 4096, 256, hardware="p5"), trainer="nanotron")
    values = {"memory_pressure_threshold": threshold, "memory_pressure_slowdown": slowdown}
    return dataclasses.replace(ctx, parameters=ctx.parameters.with_values(values))


def columns(threshold: float, slowdown: float):
    ctx = ctx_with(threshold, slowdown)
    b = LayoutBatch.from_layouts([resolve_layout(v, ctx.training) for v in LAYOUTS])
    return ctx, evaluate(ctx, b).columns


@pytest.mark.parametrize("share, expected", [(0.70, 0.0), (0.80, 0.0), (0.80 + MEMORY_PRESSURE_RAMP / 2, 0.5),
                                             (0.80 + MEMORY_PRESSURE_RAMP, 1.0), (1.30, 1.0)])
def test_the_regime_ramps_in_over_the_ramp_above_the_threshold(share, expected):
    ctx = ctx_with(0.80, 2.0)
    added = memory_pressure_s(ctx, np.array([10.0]), np.array([share]))
    assert added[0] == pytest.approx(10.0 * 2.0 * expected)


def test_the_step_grows_by_exactly_the_pressure_term_and_only_where_the_peak_is_past_the_threshold():
    _, off = columns(1.0, 0.0)
    ctx, on = columns(0.5, 3.0)
    share = off["peak_memory_bytes"] / ctx.cluster.gpu.usable_memory_bytes
    assert share.min() < 0.5 + MEMORY_PRESSURE_RAMP < share.max(), "the layouts must straddle the regime"
    regime = np.clip((share - 0.5) / MEMORY_PRESSURE_RAMP, 0.0, 1.0)
    np.testing.assert_allclose(on["time_memory_pressure_s"], off["step_time_s"] * 3.0 * regime, rtol=1e-12)
    np.testing.assert_allclose(on["step_time_s"], off["step_time_s"] * (1.0 + 3.0 * regime), rtol=1e-12)
    np.testing.assert_array_equal(on["peak_memory_bytes"], off["peak_memory_bytes"])


def test_more_memory_never_runs_faster_under_the_regime():
    ctx = ctx_with(0.8, 2.0)
    shares = np.linspace(0.5, 1.2, 200)
    added = memory_pressure_s(ctx, np.ones_like(shares), shares)
    assert np.all(np.diff(added) >= 0.0)
