"""Layout defaults, invariants and the struct-of-arrays batch."""

from __future__ import annotations

import numpy as np
import pytest

from autoplan.errors import AutoplanError, LayoutError
from autoplan.layout import (CODE_FIELDS, DEFAULT_PLACEMENT, FIELDS, PLACEMENTS, Layout, LayoutBatch,
                             resolve_layout)


def test_defaults():
    # dp = gpus/(tp·pp·cp) = 64/(2·4·1) = 8; grad_acc = gbs/(dp·mbs) = 256/(8·2) = 16
    lay = resolve_layout(dict(gpus=64, tp=2, pp=4, mbs=2, seq_len=4096, gbs_seqs=256))
    assert (lay.dp, lay.grad_acc) == (8, 16)
    assert (lay.vpp, lay.cp, lay.ep, lay.etp, lay.zero) == (1, 1, 1, 1, 1)
    assert lay.sp is True  # on when tp > 1
    assert (lay.recompute, lay.precision, lay.placement) == ("none", "bf16", DEFAULT_PLACEMENT)
    assert resolve_layout(dict(gpus=8, seq_len=128, gbs_seqs=8)).sp is False


def test_explicit_values_and_case_insensitive_choices():
    lay = resolve_layout(dict(gpus=16, tp=2, cp=2, dp=4, grad_acc=3, seq_len=1024, gbs_seqs=12,
                              sp="off", recompute=" FULL ", precision="FP8",
                              placement="tp-dp-cp-pp", zero=3))
    assert (lay.dp, lay.grad_acc, lay.sp, lay.zero) == (4, 3, False, 3)
    assert (lay.recompute, lay.precision, lay.placement) == ("full", "fp8", "tp-dp-cp-pp")


def test_integral_floats_and_numeric_strings_are_accepted():
    # CSV cells arrive as floats ('8.0') or strings ('8')
    lay = resolve_layout(dict(gpus=8.0, tp="2", seq_len="1024", gbs_seqs=np.float64(4)))
    assert (lay.gpus, lay.tp, lay.dp, lay.grad_acc) == (8, 2, 4, 1)


def test_nan_means_absent():
    # an empty CSV cell is NaN: the default applies
    lay = resolve_layout(dict(gpus=8, tp=float("nan"), seq_len=128, gbs_seqs=8))
    assert lay.tp == 1 and lay.dp == 8


@pytest.mark.parametrize("values, message", [
    (dict(gpus=8, seq_len=128, gbs_seqs=8, tpp=2), "unknown layout field"),
    (dict(seq_len=128, gbs_seqs=8), "needs 'gpus'"),
    (dict(gpus=8, gbs_seqs=8), "needs 'seq_len'"),
    (dict(gpus=8, seq_len=128), "needs 'gbs_seqs'"),
    (dict(gpus=8, tp=3, seq_len=128, gbs_seqs=8), "multiple of tp·pp·cp (3·1·1 = 3)"),
    (dict(gpus=8, dp=3, seq_len=128, gbs_seqs=8), "dp(3)·tp(1)·pp(1)·cp(1) != gpus(8)"),
    (dict(gpus=8, seq_len=128, gbs_seqs=12), "multiple of dp·mbs (8·1 = 8)"),
    (dict(gpus=8, mbs=3, seq_len=128, gbs_seqs=16), "multiple of dp·mbs (8·3 = 24)"),
    (dict(gpus=0, seq_len=128, gbs_seqs=8), "gpus must be >= 1, got 0"),
    (dict(gpus=8, tp=-2, seq_len=128, gbs_seqs=8), "tp must be >= 1, got -2"),
    (dict(gpus=8, seq_len=0, gbs_seqs=8), "seq_len must be >= 1"),
    (dict(gpus=8, grad_acc=0, seq_len=128, gbs_seqs=8), "grad_acc must be >= 1"),
    (dict(gpus=8, zero=4, seq_len=128, gbs_seqs=8), "zero must be 0, 1, 2 or 3, got 4"),
    (dict(gpus=8, zero=-1, seq_len=128, gbs_seqs=8), "zero must be 0, 1, 2 or 3"),
    (dict(gpus=8, tp=1.5, seq_len=128, gbs_seqs=8), "tp must be an integer, got 1.5"),
    (dict(gpus=8, tp="two", seq_len=128, gbs_seqs=8), "tp must be an integer, got 'two'"),
    (dict(gpus=8, tp=True, seq_len=128, gbs_seqs=8), "tp must be an integer, got True"),
    (dict(gpus=float("inf"), seq_len=128, gbs_seqs=8), "gpus must be an integer"),
    (dict(gpus=1e30, seq_len=128, gbs_seqs=8), "gpus = 1e+30 is absurdly large"),
    (dict(gpus=8, seq_len=128, gbs_seqs=8, sp="maybe"), "sp must be true or false"),
    (dict(gpus=8, seq_len=128, gbs_seqs=8, recompute="half"), "recompute must be one of none, selective, full"),
    (dict(gpus=8, seq_len=128, gbs_seqs=8, precision="fp16"), "precision must be one of bf16, fp8"),
    (dict(gpus=8, seq_len=128, gbs_seqs=8, placement="dp-tp"), "placement must be one of"),
])
def test_bad_layouts_raise_a_user_error_naming_the_rule(values, message):
    with pytest.raises(LayoutError) as info:
        resolve_layout(values)
    assert message in str(info.value)
    assert isinstance(info.value, AutoplanError) and isinstance(info.value, ValueError)


def test_describe_is_stable_and_compact():
    lay = resolve_layout(dict(gpus=512, tp=8, pp=4, vpp=2, cp=2, dp=8, zero=1, mbs=1,
                              seq_len=8192, gbs_seqs=256))
    assert lay.describe() == "tp=8 pp=4 vpp=2 cp=2 dp=8 zero=1 mbs=1 ga=32 rc=none"
    moe = resolve_layout(dict(gpus=16, tp=2, ep=4, seq_len=128, gbs_seqs=8, sp=False,
                              precision="fp8", recompute="full"))
    assert moe.describe() == "tp=2 pp=1 ep=4 etp=1 dp=8 zero=1 mbs=1 ga=1 rc=full fp8 no-sp"


def _layouts() -> list[Layout]:
    return [
        resolve_layout(dict(gpus=64, tp=2, pp=4, seq_len=4096, gbs_seqs=256)),
        resolve_layout(dict(gpus=16, tp=4, cp=2, seq_len=8192, gbs_seqs=4, recompute="selective",
                            precision="fp8", placement=PLACEMENTS[-1], sp=False, zero=3)),
        resolve_layout(dict(gpus=8, seq_len=128, gbs_seqs=8, recompute="full", zero=0)),
    ]


def test_batch_round_trips_every_field():
    layouts = _layouts()
    batch = LayoutBatch.from_layouts(layouts)
    assert len(batch) == 3
    assert [batch.layout(i) for i in range(3)] == layouts
    assert batch.records() == [lay.to_dict() for lay in layouts]
    for name in FIELDS:
        assert getattr(batch, name).dtype == np.float64
    # categorical fields are integer codes into their tuples
    assert batch.recompute.tolist() == [0, 1, 2]
    assert batch.precision.tolist() == [0, 1, 0]
    assert batch.placement.tolist() == [0, len(PLACEMENTS) - 1, 0]
    assert set(CODE_FIELDS) == {"recompute", "precision", "placement"}


def test_batch_take_and_arrays():
    batch = LayoutBatch.from_layouts(_layouts())
    sub = batch.take(np.array([2, 0]))
    assert [sub.layout(i) for i in range(2)] == [batch.layout(2), batch.layout(0)]
    arrays = batch.arrays()
    assert set(arrays) == set(FIELDS)
    assert LayoutBatch(arrays).records() == batch.records()


def test_batch_handles_sizes_beyond_int32():
    # counts stay float64 (STYLE.md §2): 2^40 is the largest accepted size
    lay = resolve_layout(dict(gpus=2**20, seq_len=2**20, gbs_seqs=2**40))
    batch = LayoutBatch.from_layouts([lay])
    assert batch.gbs_seqs[0] * batch.seq_len[0] == 2.0**60
    assert batch.layout(0).gbs_seqs == 2**40


def test_batch_refuses_missing_fields():
    arrays = LayoutBatch.from_layouts(_layouts()).arrays()
    del arrays["tp"]
    with pytest.raises(AssertionError):  # internal invariant, not user input
        LayoutBatch(arrays)
