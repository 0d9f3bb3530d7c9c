"""Layout defaults, invariants and the struct-of-arrays batch."""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest

from autoplan.api import build_training, plan_from_record
from autoplan.errors import AutoplanError, LayoutError
from autoplan.layout import (
    CODE_FIELDS,
    DEFAULT_PLACEMENT,
    FIELDS,
    PLACEMENTS,
    Layout,
    LayoutBatch,
    derive_batch_knobs,
    resolve_layout,
)
from autoplan.layout_records import layout_from_record


def resolve(record) -> Layout:
    """The layout of a record with its setup columns (the record path every caller uses)."""
    return plan_from_record(record)[0]


def test_defaults():
    # dp = gpus/(tp·pp·cp) = 64/(2·4·1) = 8; grad_acc = gbs/(dp·mbs) = 256/(8·2) = 16
    lay = resolve(dict(gpus=64, tp=2, pp=4, mbs=2, seq_len=4096, gbs_seqs=256))
    assert (lay.dp, lay.grad_acc) == (8, 16)
    assert (lay.vpp, lay.cp, lay.ep, lay.etp, lay.zero) == (1, 1, 1, 1, 1)
    assert lay.sp is True  # on when tp > 1
    assert (lay.recompute, lay.precision, lay.placement) == ("none", "bf16", DEFAULT_PLACEMENT)
    assert resolve(dict(gpus=8, seq_len=128, gbs_seqs=8)).sp is False


def test_explicit_values_and_case_insensitive_choices():
    lay = resolve(dict(gpus=16, tp=2, cp=2, dp=4, grad_acc=3, seq_len=1024, gbs_seqs=12,
                              sp="off", recompute=" FULL ", precision="FP8",
                              placement="tp-dp-cp-pp", zero=3))
    assert (lay.dp, lay.grad_acc, lay.sp, lay.zero) == (4, 3, False, 3)
    assert (lay.recompute, lay.precision, lay.placement) == ("full", "fp8", "tp-dp-cp-pp")


def test_integral_floats_and_numeric_strings_are_accepted():
    # CSV cells arrive as floats ('8.0') or strings ('8')
    lay = resolve(dict(gpus=8.0, tp="2", seq_len="1024", gbs_seqs=np.float64(4)))
    assert (lay.tp, lay.dp, lay.grad_acc) == (2, 4, 1)


def test_nan_means_absent():
    # an empty CSV cell is NaN: the default applies
    lay = resolve(dict(gpus=8, tp=float("nan"), seq_len=128, gbs_seqs=8))
    assert lay.tp == 1 and lay.dp == 8


@pytest.mark.parametrize("values, message", [
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
        resolve(values)
    assert message in str(info.value)
    assert isinstance(info.value, AutoplanError) and isinstance(info.value, ValueError)


def test_resolve_layout_refuses_unknown_knobs_and_setup_fields():
    training = build_training(8, 128, 8)
    for values in (dict(tpp=2), dict(gpus=8)):  # gpus belongs to the TrainingSpec
        with pytest.raises(LayoutError, match="unknown layout field"):
            resolve_layout(values, training)


def test_describe_is_stable_and_compact():
    lay = resolve(dict(gpus=512, tp=8, pp=4, vpp=2, cp=2, dp=8, zero=1, mbs=1,
                              seq_len=8192, gbs_seqs=256))
    assert lay.describe() == "tp=8 pp=4 vpp=2 cp=2 dp=8 zero=1 mbs=1 ga=32 rc=none"
    moe = resolve(dict(gpus=16, tp=2, ep=4, seq_len=128, gbs_seqs=8, sp=False,
                              precision="fp8", recompute="full"))
    assert moe.describe() == "tp=2 pp=1 ep=4 etp=1 dp=8 zero=1 mbs=1 ga=1 rc=full fp8 no-sp"


def _layouts() -> list[Layout]:
    return [
        resolve(dict(gpus=64, tp=2, pp=4, seq_len=4096, gbs_seqs=256)),
        resolve(dict(gpus=16, tp=4, cp=2, seq_len=8192, gbs_seqs=4, recompute="selective",
                            precision="fp8", placement=PLACEMENTS[-1], sp=False, zero=3)),
        resolve(dict(gpus=8, seq_len=128, gbs_seqs=8, recompute="full", zero=0)),
    ]


def test_batch_round_trips_every_field():
    layouts = _layouts()
    batch = LayoutBatch.from_layouts(layouts)
    assert len(batch) == 3
    assert [batch.layout(i) for i in range(3)] == layouts
    training = build_training(64, 4096, 256)
    assert batch.records(training) == [lay.to_record(training) for lay in layouts]
    assert batch.gbs_seqs.tolist() == [lay.gbs_seqs for lay in layouts] == [256, 4, 8]
    for name in FIELDS:
        assert getattr(batch, name).dtype == np.float64
    # categorical fields are integer codes into their tuples
    assert batch.recompute.tolist() == [0, 1, 2]
    assert batch.precision.tolist() == [0, 1, 0]
    assert batch.placement.tolist() == [0, len(PLACEMENTS) - 1, 0]
    assert set(CODE_FIELDS) == {"recompute", "precision", "placement", "pp_schedule", "pp_split", "optimizer", "offload"}


def test_batch_take_and_arrays():
    batch = LayoutBatch.from_layouts(_layouts())
    sub = batch.take(np.array([2, 0]))
    assert [sub.layout(i) for i in range(2)] == [batch.layout(2), batch.layout(0)]
    arrays = batch.arrays()
    assert set(arrays) == set(FIELDS)
    assert [LayoutBatch(arrays).layout(i) for i in range(3)] == [batch.layout(i) for i in range(3)]


def test_batch_handles_sizes_beyond_int32():
    # counts stay float64 (STYLE.md §2): 2^40 is the largest accepted size
    lay, training = plan_from_record(dict(gpus=2**20, seq_len=2**20, gbs_seqs=2**40))
    batch = LayoutBatch.from_layouts([lay])
    assert batch.gbs_seqs[0] * training.seq_len == 2.0**60
    assert batch.layout(0).gbs_seqs == 2**40


def test_batch_refuses_missing_fields():
    arrays = LayoutBatch.from_layouts(_layouts()).arrays()
    del arrays["tp"]
    with pytest.raises(AssertionError):  # internal invariant, not user input
        LayoutBatch(arrays)


def test_gbs_seqs_is_derived_from_the_layout():
    # dp = 16/2 = 8, grad_acc = 64/(8·2) = 4: gbs = dp·mbs·grad_acc = 8·2·4 = 64
    lay = resolve(dict(gpus=16, tp=2, mbs=2, seq_len=1024, gbs_seqs=64))
    assert lay.gbs_seqs == lay.dp * lay.mbs * lay.grad_acc == 64
    assert "gbs_seqs" not in lay.to_dict() and "gpus" not in lay.to_dict()


def test_record_keeps_the_result_columns_in_their_order():
    lay, training = plan_from_record(dict(gpus=16, tp=2, seq_len=1024, gbs_seqs=64))
    record = lay.to_record(training)
    assert list(record)[:3] == ["gpus", "dp", "tp"] and list(record)[11:13] == ["seq_len", "gbs_seqs"]
    assert (record["gpus"], record["seq_len"], record["gbs_seqs"]) == (16, 1024, 64)
    assert layout_from_record(record, training) == lay  # a record round-trips


@pytest.mark.parametrize("record, message", [
    (dict(gpus=32, tp=2), "record's gpus (32) must equal the training setup's gpus (16)"),
    (dict(seq_len=2048, tp=2), "record's seq_len (2048) must equal the training setup's seq_len (1024)"),
    (dict(gbs_seqs=64, tp=2, grad_acc=2),
     "gbs_seqs (64) must equal dp·mbs·grad_acc, got dp(8)·mbs(1)·grad_acc(2) = 16"),
])
def test_record_setup_columns_must_agree_with_the_training(record, message):
    training = build_training(16, 1024, 64, gbs_tolerance=0.0)  # a record's batch is exact
    with pytest.raises(LayoutError) as info:
        layout_from_record(record, training)
    assert message in str(info.value)


def test_record_ignores_prediction_columns_and_blank_cells():
    training = build_training(16, 1024, 64)
    record = {"tp": "2", "pp": "", "mfu": 0.4, "rank": 3, "zero": float("nan"), "gbs_seqs": 64}
    assert layout_from_record(record, training) == resolve_layout({"tp": 2}, training)


def test_tolerance_accepts_the_nearest_batch():
    # gbs 250 on dp 8: nearest multiple 248 (grad_acc 31) is 0.8% off, inside 5%, outside 0%
    loose = build_training(8, 1024, 250, gbs_tolerance=0.05)
    assert resolve_layout({}, loose).grad_acc == 31
    with pytest.raises(LayoutError, match=r"gbs_seqs \(250\) must be a multiple of dp·mbs \(8·1 = 8\)"):
        resolve_layout({}, build_training(8, 1024, 250, gbs_tolerance=0.0))


def test_batch_derivation_equals_one_by_one():
    """The one vectorised derivation gives every layout what resolve_layout gives it alone."""
    training = build_training(64, 4096, 240, gbs_tolerance=0.1)
    rng = np.random.default_rng(0)
    knobs = {k: rng.choice([1, 2, 4, 8, 3], size=200).astype(float) for k in ("tp", "pp", "cp", "mbs")}
    derived = derive_batch_knobs(knobs, training)
    for i in range(200):
        one = {k: int(v[i]) for k, v in knobs.items()}
        if not derived["dp_whole"][i]:
            with pytest.raises(LayoutError):
                resolve_layout(one, training)
            continue
        if not derived["reaches"][i]:
            with pytest.raises(LayoutError, match="gbs_seqs"):
                resolve_layout(one, training)
            continue
        lay = resolve_layout(one, training)
        assert (lay.dp, lay.grad_acc, lay.sp) == (derived["dp"][i], derived["grad_acc"][i], bool(derived["sp"][i]))
    assert derived["dp_whole"].any() and (~derived["dp_whole"]).any() and derived["reaches"].any()


def test_a_complete_record_reads_back_without_its_training():
    lay, training = plan_from_record(dict(gpus=16, tp=2, seq_len=1024, gbs_seqs=64, recompute="full"))
    assert layout_from_record(lay.to_record(training)) == lay
    with pytest.raises(LayoutError, match="must hold every layout field; missing dp, vpp, cp"):
        layout_from_record(dict(tp=2, pp=1))


def test_recompute_and_offload_knobs_parse_and_round_trip():
    layout, training = plan_from_record({"gpus": 8, "seq_len": 4096, "gbs_seqs": 64, "recompute": "selective",
                                         "recompute_modules": "MLP, core_attn"})
    assert layout.recompute_modules == "core_attn,mlp"  # RECOMPUTE_MODULES order
    assert (layout.recompute_layers, layout.offload_layers) == (0, 0)
    assert "rc_modules=core_attn,mlp" in layout.describe()
    batch = LayoutBatch.from_layouts([layout])
    assert batch.recompute_modules[0] == 3.0 and batch.layout(0) == layout  # bits 0 and 1
    record = layout.to_record(training)
    assert list(record)[-8:] == ["recompute_layers", "recompute_modules", "offload_layers", "hsdp", "pp_schedule",
                                 "pp_split", "optimizer", "offload"]
    full, _ = plan_from_record({"gpus": 8, "seq_len": 4096, "gbs_seqs": 64, "recompute": "full",
                                "recompute_layers": 4, "offload_layers": 0})
    assert full.recompute_layers == 4 and "rc_layers=4" in full.describe()


@pytest.mark.parametrize(("values", "message"), [
    ({"recompute": "none", "recompute_layers": 2}, "recompute_layers (2) needs recompute = full"),
    ({"recompute": "full", "recompute_modules": "mlp"}, "recompute_modules (mlp) needs recompute = selective"),
    ({"recompute": "selective", "recompute_modules": "attn"}, "'attn' is not one of core_attn, mlp"),
    ({"offload_layers": -1}, "offload_layers must be >= 0"),
])
def test_recompute_knobs_refuse_what_megatron_refuses(values, message):
    with pytest.raises(LayoutError, match=re.escape(message)):
        plan_from_record({"gpus": 8, "seq_len": 4096, "gbs_seqs": 64, **values})


def test_records_without_the_recompute_knobs_still_read():
    """plans.json and CSV files written before these knobs existed."""
    layout, training = plan_from_record({"gpus": 8, "seq_len": 4096, "gbs_seqs": 64})
    record = {k: v for k, v in layout.to_record(training).items()
              if k not in ("recompute_layers", "recompute_modules", "offload_layers")}
    assert layout_from_record(record) == layout


def test_pipeline_knobs_default_and_round_trip():
    """pp_schedule and pp_split: defaults 'default' and 'balanced'; a record without them (an
    older plans.json row) reads with the defaults; a bad name is refused naming the choices."""
    training = build_training(8, 4096, 64)
    layout = resolve_layout({"pp": 2, "vpp": 2, "pp_schedule": "ZB-V", "pp_split": "embed-loss"}, training)
    assert (layout.pp_schedule, layout.pp_split) == ("zb-v", "embed-loss")
    assert "sched=zb-v" in layout.describe() and "split=embed-loss" in layout.describe()
    assert LayoutBatch.from_layouts([layout]).layout(0) == layout
    record = layout.to_record(training)
    assert layout_from_record(record) == layout
    old = {k: v for k, v in record.items() if k not in ("pp_schedule", "pp_split")}
    assert layout_from_record(old) == dataclasses.replace(layout, pp_schedule="default", pp_split="balanced")
    with pytest.raises(LayoutError, match="pp_schedule must be one of default, 1f1b"):
        resolve_layout({"pp_schedule": "gpipe"}, training)
