"""FP8 attention (``TrainingSpec.fp8_attention``, cost.fp8.attention_speedup): the attention's
tensor time at the FP8 rate, the softmax exponentials unchanged (cost.time.exp_floor_s), against
hand-computed values from the datasheet figures: GB200 and GB300 NVL72 2.5 PFLOP/s dense BF16 and
5 PFLOP/s dense FP8, 5 and 10.7 Texp/s; H100 SXM 989 and 1979 TFLOP/s, no exp rate stated.

The efficiencies are the plain ones of test_time.py (attention at 0.5 of its roofline, no fall at
short sequences or small heads), so each expected value is arithmetic.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from autoplan.api import plan_from_record
from autoplan.cost.context import CostContext
from autoplan.cost.time import attention_s
from autoplan.layout import LayoutBatch
from autoplan.profiles import load_profile
from autoplan.specs.hardware import load_gpu, make_cluster
from autoplan.specs.training import TrainingSpec
from tests.unit.cost.test_attention_exp import TOKENS, WIDE_HEADS
from tests.unit.cost.test_time import PLAIN

FP8_PEAK = 5e15  # GB200 / GB300 NVL72, dense
# 8 heads of 128 (WIDE_HEADS), mbs 1 × s 1024: the causal half of 8·1024² scores = 2^22, each
# 2·(128 + 128) = 512 tensor FLOPs and 1 exp.
SCORES = 8 * TOKENS * TOKENS / 2


def _attention(gpu_name: str, precision: str, fp8_attention: bool) -> tuple[float, float]:
    gpu = load_gpu(gpu_name)
    layout, training = plan_from_record({"gpus": 1, "seq_len": TOKENS, "gbs_seqs": 1, "precision": precision})
    training = dataclasses.replace(training, cluster=make_cluster(gpu, 1), fp8_attention=fp8_attention)
    ctx = CostContext(model=WIDE_HEADS, training=training, profile=load_profile("megatron-bridge"),
                      parameters=PLAIN)
    forward, backward = attention_s(ctx, LayoutBatch.from_layouts([layout]), np.full(1, float(TOKENS)))
    return float(forward[0]), float(backward[0])


def test_the_exp_floor_binds_fp8_attention_forward_on_gb200():
    # tensor 2^22·512/5e15 = 4.295e-7 s < exp 2^22/5e12 = 8.389e-7 s: the forward is the floor,
    # 8.389e-7/0.5 = 1.678e-6 s (bf16: 2^22·512/2.5e15/0.5 = 1.718e-6 s, 2.4% more); the backward's
    # 2.5·4.295e-7 = 1.074e-6 s of tensor work is above the floor: 2.147e-6 s (bf16 4.295e-6 s).
    forward, backward = _attention("gb200-nvl72", "fp8", True)
    assert forward == pytest.approx(SCORES / 5e12 / 0.5, rel=1e-12)
    assert backward == pytest.approx(2.5 * SCORES * 512 / FP8_PEAK / 0.5, rel=1e-12)


def test_blackwell_ultra_keeps_fp8_attention_tensor_bound():
    # GB300: exp 2^22/10.7e12 = 3.920e-7 s < tensor 4.295e-7 s: half the bf16 time both ways,
    # 8.590e-7 s forward and 2.147e-6 s backward.
    forward, backward = _attention("gb300-nvl72", "fp8", True)
    assert forward == pytest.approx(SCORES * 512 / FP8_PEAK / 0.5, rel=1e-12)
    assert backward == pytest.approx(2.5 * forward, rel=1e-12)


def test_hopper_fp8_attention_runs_at_the_peak_ratio():
    # H100 SXM: R = 1979/989 = 2.001; no exp rate, no floor: the bf16 times over R.
    bf16 = _attention("h100-sxm", "fp8", False)
    fp8 = _attention("h100-sxm", "fp8", True)
    assert fp8[0] == pytest.approx(bf16[0] * 989 / 1979, rel=1e-12)
    assert fp8[1] == pytest.approx(bf16[1] * 989 / 1979, rel=1e-12)


def test_fp8_attention_counts_for_fp8_layouts_only():
    # Under bf16 the setting is ignored (fp8_only): 2^22·512/2.5e15/0.5 = 1.718e-6 s forward.
    forward, backward = _attention("gb200-nvl72", "bf16", True)
    assert (forward, backward) == _attention("gb200-nvl72", "bf16", False)
    assert forward == pytest.approx(SCORES * 512 / 2.5e15 / 0.5, rel=1e-12)


def test_the_setting_is_declared_once_with_its_option():
    from autoplan.specs.training import FP8_ONLY_SETTINGS, SETTINGS

    setting = next(s for s in SETTINGS if s.name == "fp8_attention")
    assert setting.flag == "--fp8-attention" and setting.default is False
    assert FP8_ONLY_SETTINGS == {"fp8_param_gather", "fp8_attention"}
    assert TrainingSpec(make_cluster(load_gpu("h100-sxm"), 8), 4096, 64).fp8_attention is False
