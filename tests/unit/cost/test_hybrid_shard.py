"""Hybrid sharding (Layout.hsdp): memory between replication and full sharding, the hand-computed
bytes of FSDP2 HSDP and DeepSpeed hpZ, and hsdp = the whole group equal to plain ZeRO."""

import numpy as np
import pytest

from autoplan.api import build_context, build_training
from autoplan.cost.evaluate import evaluate
from autoplan.layout import LayoutBatch, resolve_layout

STATES = ("weights", "gradients", "master_weights", "optimizer_states")
LLAMA3_8B_PARAMS = 8_030_261_248  # tests/golden/param_counts.yaml


def columns(trainer: str, layouts: list[dict], gpus: int = 64):
    training = build_training(gpus, 8192, 512, hardware="h100-sxm")
    ctx = build_context("llama3-8b", training, trainer=trainer)
    batch = LayoutBatch.from_layouts([resolve_layout(v, training) for v in layouts])
    return evaluate(ctx, batch).columns


def state_bytes(cols) -> np.ndarray:
    return sum(cols[f"mem_first_{name}_bytes"] for name in STATES)


@pytest.mark.parametrize("trainer", ["torchtitan", "megatron"])
def test_memory_lies_between_replication_and_full_sharding(trainer):
    """dp = 64: more ranks per shard group never raise model-state bytes; hsdp = 1 holds what
    zero 0 holds (states replicated, for the trainer's ZeRO bytes per parameter), hsdp = 64 what
    ZeRO over the whole group holds; every step time is finite and positive."""
    zero = 3 if trainer == "torchtitan" else 1
    sizes = [1, 2, 4, 8, 16, 32, 64]
    cols = columns(trainer, [{"zero": zero, "hsdp": h} for h in sizes] + [{"zero": zero}])
    states = state_bytes(cols)
    assert np.all(np.diff(states[:-1]) < 0)
    assert states[-2] == states[-1]  # hsdp = dp: full sharding
    full_replica = LLAMA3_8B_PARAMS * 16.0  # fp32 grad 4 + master 4 + Adam 8 (+ torchtitan's no bf16 copy)
    assert states[0] >= full_replica
    assert np.all(np.isfinite(cols["step_time_s"])) and np.all(cols["step_time_s"] > 0)


def test_hsdp_of_the_whole_group_is_plain_zero():
    """hsdp = G shards exactly as hsdp = 0 and has one replica: every prediction is the same."""
    cols = columns("torchtitan", [{"zero": 3, "hsdp": 64}, {"zero": 3}])
    for name in ("peak_memory_bytes", "step_time_s", "time_dp_exposed_s"):
        assert cols[name][0] == cols[name][1], name


def test_fsdp2_hsdp_bytes_by_hand():
    """Llama-3 8B on 64 GPUs, torchtitan FSDP2, hsdp 8: 16 bytes per parameter (no bf16 copy,
    fp32 gradient 4, master 4, Adam 8) over 8 ranks: 16 × 8,030,261,248 / 8 = 16,060,522,496 B."""
    cols = columns("torchtitan", [{"zero": 3, "hsdp": 8}])
    assert state_bytes(cols)[0] == pytest.approx(16_060_522_496, rel=1e-12)


def test_deepspeed_hpz_keeps_the_full_shard_and_a_secondary_copy():
    """DeepSpeed ZeRO++ hpZ, dp 64, hsdp 8 (Wang et al. 2023, Sec. 3.2): weights are bf16 sharded
    over all 64 ranks plus the bf16 secondary partition over 8: 2·P/64 + 2·P/8 =
    250,945,664 + 2,007,565,312 = 2,258,510,976 B; gradients stay over 64: 2·P/64."""
    cols = columns("deepspeed", [{"zero": 3, "hsdp": 8}, {"zero": 3}])
    assert cols["mem_first_weights_bytes"][0] == pytest.approx(2_258_510_976, rel=1e-12)
    assert cols["mem_first_gradients_bytes"][0] == cols["mem_first_gradients_bytes"][1]
