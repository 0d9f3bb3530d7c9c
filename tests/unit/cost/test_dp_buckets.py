"""Megatron-Core's gradient buckets grow with the data-parallel group (issue 44 item 4: small
models at large dp with one micro-batch per GPU): bucket_size = max(40M, 1M·dp·cp) elements
(megatron/core/distributed/distributed_data_parallel.py, DistributedDataParallelConfig.bucket_size)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from autoplan.api import build_context, build_training
from autoplan.cost.data_parallel import bucket_params
from autoplan.cost.evaluate import evaluate
from autoplan.layout import LayoutBatch, resolve_layout
from autoplan.profiles import load_profile


def test_megatron_buckets_follow_its_default_rule():
    groups = np.array([1.0, 8.0, 40.0, 64.0, 256.0, 1024.0])
    expected = [max(40_000_000, 1_000_000 * int(n)) for n in groups]  # Megatron-Core's default, by hand
    assert bucket_params(load_profile("megatron"), groups).tolist() == expected


@pytest.mark.parametrize("trainer", ["torchtitan", "nanotron", "deepspeed"])
def test_other_trainers_keep_a_fixed_bucket(trainer):
    p = load_profile(trainer)
    assert bucket_params(p, np.array([8.0, 1024.0])).tolist() == [p.data_parallel.dp_bucket_params] * 2


def _exposed_dp_share(gpus: int, per_rank: float) -> float:
    ctx = build_context("llama3.1-8b", build_training(gpus, 8192, gpus // 2, hardware="b200"), trainer="megatron")
    ctx = replace(ctx, profile=ctx.profile.with_overrides([("dp_bucket_params_per_rank", per_rank)]))
    layout = resolve_layout({"tp": 1, "pp": 1, "cp": 2, "mbs": 1, "zero": 1, "precision": "fp8"}, ctx.training)
    table = evaluate(ctx, LayoutBatch.from_layouts([layout]))
    return float(table["time_dp_exposed_s"][0] / table["step_time_s"][0])


def test_growing_buckets_cut_the_latency_of_a_large_group_and_never_slow_a_step():
    """8B, cp 2, one micro-batch per GPU on 256 B200 (dp·cp = 256): 200 buckets of 40M pay the
    ring latency of 256 ranks each; 32 buckets of 256M pay it 32 times."""
    fixed, grown = _exposed_dp_share(256, 0.0), _exposed_dp_share(256, 1e6)
    assert grown < 0.5 * fixed, (fixed, grown)
    # Below 40 ranks the floor holds: the same step.
    assert _exposed_dp_share(32, 0.0) == pytest.approx(_exposed_dp_share(32, 1e6), rel=1e-12)
