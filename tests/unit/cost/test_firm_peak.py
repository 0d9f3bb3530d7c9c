"""The firm peak (cost/stage_memory.py, memory_table) and ``fits_with_retries`` (cost/evaluate.py):
the heaviest stage's memory less the caching allocator's cached share, which PyTorch frees and
retries before it raises out of memory.

The Ultra-Scale Playbook's 8B model with nanotron on 32 H100s (AWS p5), seq 4096, batch 256: its
profile's fitted allocator_overhead (0.103 of the transient bytes) is well above zero.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from autoplan.api import build_context, build_training
from autoplan.cost.evaluate import evaluate
from autoplan.cost.memory import TRANSIENT_TERMS
from autoplan.cost.terms import STAGES
from autoplan.layout import LayoutBatch, resolve_layout

LAYOUTS = [{"tp": tp, "pp": pp, "mbs": mbs, "zero": zero} for tp in (1, 2, 8) for pp in (1, 2, 4)
           for mbs in (1, 2, 4, 8) for zero in (0, 1)]


def _table(**corrections):
    ctx = build_context("usp-8b", build_training(32, 4096, 256, hardware="p5"), trainer="nanotron")
    if corrections:
        ctx = dataclasses.replace(ctx, parameters=ctx.parameters.with_values(corrections))
    batch = LayoutBatch.from_layouts([resolve_layout(v, ctx.training) for v in LAYOUTS])
    return ctx, evaluate(ctx, batch)


def test_the_firm_peak_is_the_heaviest_stage_less_its_cached_share():
    """Rebuilt from the stage columns: total − allocator_overhead × the stage's transient terms
    (an interior stage exists only from pp 3: its columns are 0 below)."""
    ctx, table = _table()
    overhead = ctx.corrections.allocator_overhead
    assert overhead > 0.05
    firm = [table[f"mem_{s}_total_bytes"] - overhead * sum(table[f"mem_{s}_{t}_bytes"] for t in TRANSIENT_TERMS)
            for s in STAGES]
    np.testing.assert_allclose(table["firm_peak_memory_bytes"], np.maximum.reduce(firm), rtol=1e-12)
    assert (table["firm_peak_memory_bytes"] < table["peak_memory_bytes"]).all()


def test_fitting_outright_implies_fitting_with_retries_and_some_fit_only_with_them():
    _, table = _table()
    fits, retries = table["fits"], table["fits_with_retries"]
    assert not (fits & ~retries).any()
    only = retries & ~fits
    assert only.any() and (~retries).any()  # the space spans all three verdicts
    capacity = build_context("usp-8b", build_training(32, 4096, 256, hardware="p5"),
                             trainer="nanotron").cluster.gpu.usable_memory_bytes
    assert (table["peak_memory_bytes"][only] > capacity).all()
    assert (table["firm_peak_memory_bytes"][only] <= capacity).all()


def test_without_an_allocator_overhead_there_is_no_cache_to_give_back():
    _, table = _table(allocator_overhead=0.0)
    np.testing.assert_array_equal(table["firm_peak_memory_bytes"], table["peak_memory_bytes"])
    np.testing.assert_array_equal(table["fits_with_retries"], table["fits"])
