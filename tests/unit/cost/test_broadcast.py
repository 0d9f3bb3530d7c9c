"""cost.broadcast: a formula evaluated once per distinct combination of the knobs it reads gives
the numbers of the formula evaluated on every layout, bit for bit."""

from __future__ import annotations

import platform
import sys

import numpy as np
import pytest

from autoplan.api import build_context, build_training
from autoplan.cost import allocator, broadcast
from autoplan.cost.allocator import keep_temporaries_on_heap
from autoplan.cost.evaluate import evaluate
from autoplan.cost.memory import layer_activation_bytes
from autoplan.layout import FIELDS, LayoutBatch
from autoplan.space import indices_to_values, layouts_from_values, load_space

WIDE = dict(pp=(1, 2, 3, 4, 8), vpp=(1, 2, 3), cp=(1, 2), zero=(0, 1, 3), mbs=(1, 2, 3),
            recompute=("none", "selective", "full"), precision=("bf16", "fp8"),
            placement=("tp-cp-dp-pp", "tp-pp-cp-dp"), recompute_layers=(0, 1), offload_layers=(0, 1),
            hsdp=(0, 2), pp_schedule=("default", "1f1b", "afab", "zb-v", "dualpipe", "dualpipev"),
            pp_split=("balanced", "embed-loss"), optimizer=("adamw", "adafactor", "muon"),
            offload=("none", "optimizer", "params"), recompute_modules=("", "core_attn,mlp"))


def wide_batch(model: str, gpus: int, space: str, trainer: str, size: int = 6000):
    training = build_training(gpus, 4096, 1024)
    ctx = build_context(model, training, trainer=trainer)
    wide = load_space(space).with_overrides(**WIDE)
    index = np.random.default_rng(1).integers(0, wide.size, size)
    batch, _, _ = layouts_from_values(indices_to_values(wide, index), training)
    # and a dense block of repeats, so that every grouped formula groups
    batch = LayoutBatch({f: np.concatenate([getattr(batch, f), np.repeat(getattr(batch, f)[:40], 50)]) for f in FIELDS})
    return ctx, batch


@pytest.mark.parametrize("model, gpus, space, trainer", [("llama3-8b", 64, "default", "megatron"),
                                                         ("mixtral-8x7b", 128, "moe", "torchtitan"),
                                                         ("deepseek-v3", 1024, "moe", "megatron")])
def test_evaluate_grouped_equals_every_layout(monkeypatch, model, gpus, space, trainer):
    ctx, batch = wide_batch(model, gpus, space, trainer)
    grouped = evaluate(ctx, batch).columns
    monkeypatch.setattr(broadcast, "MIN_ROWS", 10**9)  # every formula on every layout
    plain = evaluate(ctx, batch).columns
    assert grouped.keys() == plain.keys()
    for name in plain:
        np.testing.assert_array_equal(grouped[name], plain[name], err_msg=name)


def test_group_rows_groups_equal_knobs_together():
    _, batch = wide_batch("llama3-8b", 64, "default", "megatron")
    names = ("pp", "vpp", "pp_split")
    with broadcast.shared_groupings():
        group = broadcast.group_rows(batch, names)
    for name in names:  # each row has its group representative's values
        values = getattr(batch, name)
        np.testing.assert_array_equal(values[group.first][group.inverse], values)
    keys = {tuple(getattr(batch, n)[i] for n in names) for i in group.first}
    assert len(keys) == len(group.first)  # one representative per distinct combination


def test_a_formula_reading_a_new_knob_falls_back_to_every_layout():
    _, batch = wide_batch("llama3-8b", 64, "default", "megatron")
    calls = []

    @broadcast.per_group
    def formula(ctx, b, use_mbs):
        calls.append(len(b))
        return b.pp * 10.0 + (b.mbs if use_mbs else 0.0)

    formula(None, batch, True)  # learns pp and mbs
    assert calls[-1] == len(batch)
    np.testing.assert_array_equal(formula(None, batch, True), batch.pp * 10.0 + batch.mbs)
    assert calls[-1] < len(batch) / 4  # grouped by (mbs, pp)
    formula(None, batch, False)
    np.testing.assert_array_equal(formula(None, batch, False), batch.pp * 10.0)
    assert calls[-1] < len(batch) / 4


def test_grouped_layer_activations_match_the_formula_on_every_layout():
    ctx, batch = wide_batch("mixtral-8x7b", 128, "moe", "megatron")
    for mode in ("none", "selective"):
        for grouped, plain in zip(layer_activation_bytes(ctx, batch, mode),
                                  layer_activation_bytes.__wrapped__(ctx, batch, mode)):
            np.testing.assert_array_equal(grouped, plain)


def test_allocator_is_tuned_once_and_left_alone_when_asked(monkeypatch):
    first = keep_temporaries_on_heap()
    assert keep_temporaries_on_heap() is first
    if sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc":
        assert first  # mallopt(3) accepts both thresholds on glibc
    monkeypatch.setenv("AUTOPLAN_KEEP_MALLOC", "1")
    assert allocator._tune() is False


def test_on_distinct_evaluates_once_per_batch_and_gives_each_probe_its_rows():
    _, batch = wide_batch("llama3-8b", 64, "default", "megatron")
    calls = []

    def fn(pp, vpp):
        calls.append(len(pp))
        return {"layers": pp * 100.0 + vpp}

    @broadcast.per_group
    def formula(ctx, b):  # reads mbs and pp, vpp through on_distinct
        return broadcast.on_distinct(b, ("pp", "vpp"), fn, key="fn")["layers"] + b.mbs

    expected = batch.pp * 100.0 + batch.vpp + batch.mbs
    with broadcast.shared_groupings():
        formula(None, batch)  # learns what it reads (on every layout)
        np.testing.assert_array_equal(formula(None, batch), expected)  # a probe: rows of the cached result
        np.testing.assert_array_equal(broadcast.on_distinct(batch, ("pp", "vpp"), fn, key="fn")["layers"],
                                      batch.pp * 100.0 + batch.vpp)
    distinct = len({(p, v) for p, v in zip(batch.pp, batch.vpp)})
    assert calls == [distinct]  # fn ran once, on one row per distinct (pp, vpp)


def test_a_grouped_formula_inside_another_runs_once_per_batch_and_widens_the_outer_grouping():
    _, batch = wide_batch("llama3-8b", 64, "default", "megatron")
    inner_rows = []

    @broadcast.per_group
    def inner(ctx, b):
        inner_rows.append(len(b))
        return b.pp * 10.0 + b.vpp

    @broadcast.per_group
    def outer(ctx, b):  # reads mbs itself, pp and vpp through inner
        return inner(ctx, b) + b.mbs

    expected = batch.pp * 10.0 + batch.vpp + batch.mbs
    with broadcast.shared_groupings():
        inner(None, batch)  # both learn what they read, on every layout
        outer(None, batch)
    inner_rows.clear()
    with broadcast.shared_groupings():
        np.testing.assert_array_equal(outer(None, batch), expected)
        np.testing.assert_array_equal(outer(None, batch), expected)  # (inner's groups cached for the batch)
    distinct = len({(p, v) for p, v in zip(batch.pp, batch.vpp)})
    assert inner_rows == [distinct]  # inner ran once per batch, on its own groups, not the outer's rows


def test_groupings_that_differ_in_one_valued_knobs_or_order_are_one():
    _, batch = wide_batch("llama3-8b", 64, "default", "megatron")
    one_valued = next(name for name in FIELDS if len(np.unique(getattr(batch, name))) == 1)
    with broadcast.shared_groupings():
        small = broadcast.group_rows(batch, ("pp", "vpp"))
        assert broadcast.group_rows(batch, ("vpp", one_valued, "pp")) is small
        wide = broadcast.group_rows(batch, ("mbs", "pp", "zero", "vpp"))  # built from (pp, vpp)'s groups
    keys = [tuple(getattr(batch, n)[i] for n in ("mbs", "pp", "zero", "vpp")) for i in range(len(batch))]
    assert len(wide.first) == len(set(keys))
    for name in ("mbs", "pp", "zero", "vpp"):  # each row has its group representative's values
        values = getattr(batch, name)
        np.testing.assert_array_equal(values[wide.first][wide.inverse], values)


@pytest.mark.parametrize("size", [1, 6000])
def test_a_grouped_formula_runs_once_per_batch_and_options_inside_shared_groupings(size):
    _, batch = wide_batch("llama3-8b", 64, "default", "megatron")
    batch = batch.take(np.arange(size))
    calls = []

    @broadcast.per_group
    def formula(ctx, b, scale):
        calls.append(scale)
        return b.pp * scale

    formula(None, batch, 2.0)  # learns what it reads
    calls.clear()
    with broadcast.shared_groupings():
        for _ in range(3):
            np.testing.assert_array_equal(formula(None, batch, 2.0), batch.pp * 2.0)
            np.testing.assert_array_equal(formula(None, batch, 3.0), batch.pp * 3.0)
    assert calls == [2.0, 3.0]  # once per options, however often the other formulas ask
    formula(None, batch, 2.0)  # outside the scope: evaluated afresh (a batch may change between calls)
    assert calls == [2.0, 3.0, 2.0]


def test_a_helper_once_per_batch_runs_once_in_a_scope_and_on_every_probe():
    _, batch = wide_batch("llama3-8b", 64, "default", "megatron")
    calls = []

    @broadcast.once_per_batch
    def helper(ctx, b):
        calls.append(len(b))
        return b.tp * 2.0

    @broadcast.per_group
    def formula(ctx, b):  # reads tp through the helper, pp itself
        return helper(ctx, b) + b.pp

    with broadcast.shared_groupings():
        np.testing.assert_array_equal(helper(None, batch), batch.tp * 2.0)
        np.testing.assert_array_equal(helper(None, batch), batch.tp * 2.0)
    assert calls == [len(batch)]
    formula(None, batch)  # learns that it reads tp (through the helper) and pp
    with broadcast.shared_groupings():
        np.testing.assert_array_equal(formula(None, batch), batch.tp * 2.0 + batch.pp)
    distinct = len({(t, p) for t, p in zip(batch.tp, batch.pp)})
    assert calls[-1] == distinct  # on the probe: the grouping knows tp
