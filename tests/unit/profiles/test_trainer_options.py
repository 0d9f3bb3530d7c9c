"""Trainer options: parsed strictly, honoured by the time model."""

from __future__ import annotations

import dataclasses

import pytest

from autoplan.api import build_context, build_training
from autoplan.cost.evaluate import evaluate
from autoplan.errors import SpecError
from autoplan.layout import LayoutBatch, resolve_layout
from autoplan.profiles import load_profile
from autoplan.profiles.trainer_options import TrainerOptions, options_from_mapping


def test_unknown_and_non_boolean_options_are_refused():
    with pytest.raises(SpecError, match="unknown key 'tp_overlap_comm'"):
        options_from_mapping({"tp_overlap_comm": True}, "x.yaml")
    with pytest.raises(SpecError, match="options.tp_comm_overlap: expected true or false, got 'yes'"):
        options_from_mapping({"tp_comm_overlap": "yes"}, "x.yaml")


def test_profiles_state_their_overlap_choices():
    assert load_profile("nanotron").options.overlap_param_gather is False  # ZeRO-1 gathers in step()
    assert load_profile("megatron").options.overlap_grad_reduce is True
    assert load_profile("megatron").options.tp_comm_overlap is False  # opt-in in Megatron-LM


def test_tp_comm_overlap_hides_tp_overlap_of_the_tp_time():
    training = build_training(8, 4096, 8, hardware="h100-sxm")
    ctx = build_context("llama3-8b", training, trainer="megatron")
    batch = LayoutBatch.from_layouts([resolve_layout({"tp": 8}, ctx.training)])
    off = evaluate(ctx, batch)
    on_profile = dataclasses.replace(ctx.profile, options=TrainerOptions(tp_comm_overlap=True))
    on = evaluate(dataclasses.replace(ctx, profile=on_profile), batch)
    # exposed = ring part·(1 − tp_overlap) + fixed part; fixed = grad_acc 8 × 32 layers × 2 passes
    # × 4 collectives × collective_overhead_s, never hidden
    fixed = 8 * 32 * 2 * 4 * ctx.corrections.collective_overhead_s
    ring = off["time_tp_exposed_s"][0] - fixed
    assert ring > 0
    assert on["time_tp_exposed_s"][0] == pytest.approx(ring * (1 - ctx.efficiency.tp_overlap) + fixed, rel=1e-9)
