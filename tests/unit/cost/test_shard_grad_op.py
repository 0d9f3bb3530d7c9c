"""ZeRO-2 as FSDP1's SHARD_GRAD_OP (llm-foundry): one parameter gather per FSDP unit and
micro-batch, the whole stage's bf16 compute copy held through the step, gradients sharded."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from autoplan.api import build_context, build_training
from autoplan.calibration.published_runs import mpt_model
from autoplan.calibration.validation import read_csv
from autoplan.cost import comm
from autoplan.cost.data_parallel import dp_comm_s
from autoplan.cost.evaluate import evaluate
from autoplan.cost.model_states import model_state_bytes
from autoplan.layout import LayoutBatch, resolve_layout
from autoplan.profiles import load_profile
from autoplan.rules import legality_codes

GPUS, LAYERS = 64, 32


@pytest.fixture(scope="module")
def setup():
    training = build_training(GPUS, 2048, 512)
    arch = next(r for r in read_csv("mpt_model_arch.csv") if r["model"] == "mpt-3b")  # 32 layers
    ctx = build_context(mpt_model(arch, 2048), training, trainer="llmfoundry")
    batch = {z: LayoutBatch.from_layouts([resolve_layout({"tp": 1, "pp": 1, "zero": z, "mbs": 8}, training)])
             for z in (2, 3)}
    return ctx, batch


def _comm(ctx, b):
    st = comm.strides(b.placement, b.tp, b.cp, b.dp, b.pp)
    return dp_comm_s(ctx, b, st, np.array([ctx.params.total]), np.zeros(1), np.array([float(LAYERS)]))


def test_llmfoundry_runs_zero_2_and_3_only():
    assert load_profile("llmfoundry").capabilities.zero_stages == (2, 3)
    assert load_profile("llmfoundry").data_parallel.zero2_is_shard_grad_op
    assert not any(load_profile(t).data_parallel.zero2_is_shard_grad_op for t in ("deepspeed", "hf", "megatron"))


def test_shard_grad_op_gathers_once_per_micro_batch(setup):
    """ZeRO-3 gathers each layer for the forward and again for the backward (2 AG + RS per
    micro-batch); SHARD_GRAD_OP keeps it for the backward (1 AG + RS), nothing once per step."""
    ctx, batch = setup
    two, three = _comm(ctx, batch[2]), _comm(ctx, batch[3])
    assert two["grads"][0] == two["gathers"][0] == 0.0 == three["grads"][0] == three["gathers"][0]
    # with the same per-layer collectives: per_micro(3) - per_micro(2) = one AG of P bf16 bytes
    one_gather = three["per_micro"][0] - two["per_micro"][0]
    assert one_gather > 0 and two["per_micro"][0] - one_gather == pytest.approx(three["per_micro"][0] - 2 * one_gather)
    assert two["per_step_floor"][0] == pytest.approx(three["per_step_floor"][0])  # (AG + RS) / layers


def test_shard_grad_op_holds_the_whole_bf16_model(setup):
    """Model states per GPU, mpt-3b on dp 64: ZeRO-2 adds the unsharded bf16 copy, 2·P bytes,
    to ZeRO-3's states (fp32 master + fp32 gradient + Adam, all sharded in both)."""
    ctx, batch = setup
    p = np.array([ctx.params.total])
    two, three = (model_state_bytes(ctx, batch[z], p, np.zeros(1)) for z in (2, 3))
    assert two["weights"][0] == pytest.approx(2.0 * p[0])
    assert three["weights"][0] == 0.0  # llmfoundry weight_bytes 0: the fp32 shard is the master
    for state in ("gradients", "master_weights", "optimizer_states"):
        assert two[state][0] == pytest.approx(three[state][0]), state


def test_other_trainers_zero_2_keeps_its_per_step_traffic(setup):
    """A profile without SHARD_GRAD_OP (DeepSpeed's ZeRO-2): one reduce-scatter and one gather
    of the updated parameters per step, nothing per micro-batch."""
    ctx, batch = setup
    plain = dataclasses.replace(ctx, profile=ctx.profile.with_overrides([("zero2_is_shard_grad_op", False)]))
    out = _comm(plain, batch[2])
    assert out["per_micro"][0] == 0.0 and out["grads"][0] > 0 and out["gathers"][0] > 0


def test_zero_2_layouts_pass_the_rules_and_fit_more_memory(setup):
    ctx, batch = setup
    assert legality_codes(ctx, batch[2])[0] == 0  # zero 2 is in llmfoundry's zero_stages now
    two, three = evaluate(ctx, batch[2]), evaluate(ctx, batch[3])
    assert two["peak_memory_bytes"][0] > three["peak_memory_bytes"][0]
