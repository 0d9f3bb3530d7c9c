"""Properties of the data-parallel / ZeRO-3 traffic model (issue 14, mechanisms 1 and 6).

* A DP collective of fixed bytes never gets faster as its group grows (bandwidth term
  (n − 1)/n, ring steps n − 1, NIC instead of NVLink once the group leaves a node).
* ZeRO-3 at a fixed global batch and micro-batch: more GPUs never raise the per-GPU throughput
  (the per-micro-batch gathers and reduce-scatters do not shrink while each GPU's share of the
  batch does), and once communication-bound the throughput per GPU falls.
"""

from __future__ import annotations

from itertools import pairwise

import numpy as np
import pytest

from autoplan.api import build_context, build_training
from autoplan.cost import comm
from autoplan.cost.evaluate import evaluate
from autoplan.layout import LayoutBatch, resolve_layout

SIZES = np.array([1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 4096.0])


@pytest.mark.parametrize("hardware", ["a100-40gb", "h100-sxm", "gb200-nvl72"])
@pytest.mark.parametrize("stride", [1.0, 8.0])
@pytest.mark.parametrize("collective", ["all_gather", "reduce_scatter", "all_reduce"])
def test_dp_collective_time_never_falls_as_the_group_grows(hardware, stride, collective):
    ctx = build_context("llama3-8b", build_training(4096, 4096, 4096, hardware=hardware), trainer="megatron")
    link = comm.group_link(ctx, SIZES, np.full_like(SIZES, stride))
    fn = getattr(comm, f"dp_{collective}_s")
    for num_bytes in (1e3, 1e6, 1e9):
        t = fn(ctx, link, np.full_like(SIZES, num_bytes), np.full_like(SIZES, 32.0))
        assert np.all(np.diff(t) >= 0.0), (hardware, stride, collective, num_bytes, t)


@pytest.mark.parametrize("trainer, model, hardware, recompute", [
    ("torchtitan", "llama3-8b", "h100-sxm", "selective"),
    ("llmfoundry", "llama3-8b", "a100-40gb", "full"),
    ("deepspeed", "llama3-70b", "h100-sxm", "full"),
])
def test_zero3_throughput_per_gpu_never_rises_with_more_gpus_at_a_fixed_batch(trainer, model, hardware, recompute):
    gbs, seq, gpus = 1024, 4096, [8, 16, 32, 64, 128, 256, 512, 1024]
    tokens, exposed = [], []
    for n in gpus:
        ctx = build_context(model, build_training(n, seq, gbs, hardware=hardware), trainer=trainer)
        layout = resolve_layout({"zero": 3, "mbs": 1, "recompute": recompute}, ctx.training)
        table = evaluate(ctx, LayoutBatch.from_layouts([layout]))
        tokens.append(float(table["tokens_per_s_per_gpu"][0]))
        exposed.append(float(table["time_dp_exposed_s"][0] / table["step_time_s"][0]))
    assert all(b <= a * (1 + 1e-12) for a, b in pairwise(tokens)), tokens
    # Once a step is communication-bound (here at 1024 GPUs, one micro-batch each), throughput
    # per GPU is below the 8-GPU figure by at least the exposed share.
    assert exposed[-1] > exposed[0]
    assert tokens[-1] < tokens[0]
