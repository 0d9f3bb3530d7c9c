"""The softmax-exponential co-limit of flash attention (cost.time.exp_floor_s) against hand-computed
values from the datasheet figures: GB200 NVL72 2.5 PFLOP/s dense BF16 with 5 Texp/s of SFU
exponentials, GB300 NVL72 the same BF16 peak with 10.7 Texp/s (NVIDIA, "Inside NVIDIA Blackwell
Ultra", the Blackwell vs Blackwell Ultra table; hardware_db/gpus/*.yaml sources).

The efficiencies are the plain ones of test_time.py (attention at 0.5 of its roofline, no fall at
short sequences or small heads), so each expected value is arithmetic.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import yaml

from autoplan.api import plan_from_record
from autoplan.cost.context import CostContext
from autoplan.cost.time import attention_s, exp_floor_s
from autoplan.errors import SpecError
from autoplan.layout import LayoutBatch
from autoplan.profiles import load_profile
from autoplan.specs.hardware import gpu_from_mapping, gpu_to_mapping, load_gpu, make_cluster
from autoplan.specs.model import ModelSpec
from autoplan.specs.training import TrainingSpec
from tests.unit.cost.test_time import PLAIN

BF16_PEAK = 2.5e15           # GB200 / GB300 NVL72, dense
GB200_EXP, GB300_EXP = 5e12, 10.7e12
# 32 heads of 32 (h = 1024): 2·(32 + 32) = 128 tensor FLOPs per score against 1 exp. At the GB200's
# rates a score takes 128/2.5e15 = 5.12e-14 s on the tensor cores and 1/5e12 = 2e-13 s on the SFUs:
# the exponentials bind, 3.9×.
SMALL_HEADS = ModelSpec(name="small-heads", num_layers=1, hidden_size=1024, ffn_hidden_size=4096,
                        num_attention_heads=32, num_kv_heads=32, head_dim=32, vocab_size=32000)
# 8 heads of 128: 2·256 = 512 FLOPs per score, 512/2.5e15 = 2.048e-13 s against 2e-13 s: the
# tensor cores bind (by 2.4%), the floor does not.
WIDE_HEADS = dataclasses.replace(SMALL_HEADS, num_attention_heads=8, num_kv_heads=8, head_dim=128)
# mbs 1 × s 1024, tp 1: the causal half of 1024·1024 scores per head.
TOKENS = 1024


def _attention(gpu_name: str, model: ModelSpec) -> tuple[float, float]:
    gpu = load_gpu(gpu_name)
    ctx = CostContext(model=model, training=TrainingSpec(make_cluster(gpu, 1), TOKENS, 1),
                      profile=load_profile("megatron"), parameters=PLAIN)
    layout, training = plan_from_record({"gpus": 1, "seq_len": TOKENS, "gbs_seqs": 1})
    ctx = dataclasses.replace(ctx, training=dataclasses.replace(training, cluster=ctx.training.cluster))
    batch = LayoutBatch.from_layouts([layout])
    forward, backward = attention_s(ctx, batch, np.full(1, float(TOKENS)))
    return float(forward[0]), float(backward[0])


def test_presets_carry_the_datasheet_exp_rates():
    assert load_gpu("gb200-nvl72").exp_ops_per_s == GB200_EXP
    assert load_gpu("b200").exp_ops_per_s == GB200_EXP
    assert load_gpu("gb300-nvl72").exp_ops_per_s == GB300_EXP
    assert load_gpu("b300").exp_ops_per_s == GB300_EXP
    assert load_gpu("h100-sxm").exp_ops_per_s == 0.0  # not stated: no floor


def test_exponentials_bind_the_small_head_attention_on_gb200():
    # 32 heads × 1024² / 2 = 2^24 exps per pass; at 5e12/s, 3.355e-6 s, at efficiency 0.5 6.711e-6 s,
    # forward and backward alike (the backward's 2.5 × 2^24·128/2.5e15 = 2.147e-6 s of tensor work
    # is also below the floor).
    scores = 32 * TOKENS * TOKENS / 2
    forward, backward = _attention("gb200-nvl72", SMALL_HEADS)
    assert forward == pytest.approx(scores / GB200_EXP / 0.5, rel=1e-12)
    assert backward == pytest.approx(scores / GB200_EXP / 0.5, rel=1e-12)


def test_blackwell_ultra_halves_the_exp_bound_forward_and_frees_the_backward():
    # GB300: 2^24 / 10.7e12 = 1.568e-6 s > the forward's tensor 2^24·128/2.5e15 = 8.59e-7 s, so the
    # forward is 2·1.568e-6 = 3.136e-6 s; the backward's tensor 2.147e-6 s now exceeds the floor:
    # 2·2.147e-6 = 4.295e-6 s.
    scores = 32 * TOKENS * TOKENS / 2
    forward, backward = _attention("gb300-nvl72", SMALL_HEADS)
    assert forward == pytest.approx(scores / GB300_EXP / 0.5, rel=1e-12)
    assert backward == pytest.approx(2.5 * scores * 128 / BF16_PEAK / 0.5, rel=1e-12)


def test_head_dim_128_stays_tensor_bound_on_gb200():
    # 8 × 1024² / 2 = 2^22 scores × 512 FLOPs / 2.5e15 = 8.59e-7 s > 2^22 / 5e12 = 8.39e-7 s.
    scores = 8 * TOKENS * TOKENS / 2
    forward, backward = _attention("gb200-nvl72", WIDE_HEADS)
    assert forward == pytest.approx(scores * 512 / BF16_PEAK / 0.5, rel=1e-12)
    assert backward == pytest.approx(2.5 * forward, rel=1e-12)


def test_no_stated_exp_rate_means_no_floor():
    gpu = load_gpu("h100-sxm")
    ctx = CostContext(model=SMALL_HEADS, training=TrainingSpec(make_cluster(gpu, 1), TOKENS, 1),
                      profile=load_profile("megatron"), parameters=PLAIN)
    layout, _ = plan_from_record({"gpus": 1, "seq_len": TOKENS, "gbs_seqs": 1})
    floor = exp_floor_s(ctx, LayoutBatch.from_layouts([layout]), np.full(1, float(TOKENS)))
    assert floor.tolist() == [0.0]


def test_exp_throughput_reads_with_its_unit_and_round_trips():
    data = gpu_to_mapping(load_gpu("gb300-nvl72"))
    assert data["exp_throughput"] == "10.7 Texp/s"
    assert gpu_from_mapping(yaml.safe_load(yaml.safe_dump(data)), "x.yaml") == load_gpu("gb300-nvl72")
    with pytest.raises(SpecError, match=r"exp_throughput: expected an exponential rate like '10.7 Texp/s'"):
        gpu_from_mapping({**data, "exp_throughput": 5e12}, "x.yaml")
    with pytest.raises(SpecError, match="exp_throughput: expected an exponential rate"):
        gpu_from_mapping({**data, "exp_throughput": "5 TFLOP/s"}, "x.yaml")
