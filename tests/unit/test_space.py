"""Search spaces: strict loading, overrides, and the vectorised enumeration."""

from __future__ import annotations

import itertools
import time

import numpy as np
import pytest

from autoplan.api import build_training
from autoplan.errors import AutoplanError, SpecError, UnknownNameError
from autoplan.layout import derive_batch_knobs, resolve_layout
from autoplan.space import (
    KNOBS,
    EmptySpaceError,
    SearchSpace,
    check_not_empty,
    count_enumerable,
    enumerate_space,
    list_spaces,
    load_space,
)


def test_builtin_spaces_load():
    assert {"default", "moe", "long-context"} <= set(list_spaces())
    default = load_space("default")
    assert default.values["tp"] == (1, 2, 4, 8)
    assert default.values["ep"] == (1,)
    # 4 tp · 5 pp · 3 vpp · 2 cp · 3 zero · 3 mbs · 3 recompute (the file's comment says 3,240)
    assert default.size == 3240
    assert max(load_space("moe").values["ep"]) >= 64
    assert max(load_space("long-context").values["cp"]) > max(default.values["cp"])


def test_unknown_knob_suggests_the_near_miss(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text("tp: [1, 2]\nrecomptue: [full]\n")
    with pytest.raises(SpecError, match="unknown key 'recomptue' \\(did you mean 'recompute'\\?\\)"):
        load_space(path)


def test_unknown_space_name_suggests_the_near_miss():
    with pytest.raises(UnknownNameError, match="did you mean 'default'"):
        load_space("defualt")


@pytest.mark.parametrize("text, message", [
    ("tp: [0, 2]\n", "tp: values must be integers in \\[1, "),
    ("zero: [4]\n", "zero: values must be integers in \\[0, 3\\]"),
    ("tp: [2.5]\n", "tp: values must be integers"),
    ("recompute: [some]\n", "recompute: 'some' is not one of none, selective, full"),
    ("pp: []\n", "pp: needs at least one value"),
])
def test_bad_values_say_where_and_what(tmp_path, text, message):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(SpecError, match=message) as info:
        load_space(path)
    assert str(path) in str(info.value)


def test_missing_knobs_take_their_default_and_values_are_sorted(tmp_path):
    path = tmp_path / "small.yaml"
    path.write_text("tp: [8, 2, 2]\nrecompute: full\n")
    space = load_space(path)
    assert space.values["tp"] == (2, 8)
    assert space.values["recompute"] == ("full",)
    assert space.values["pp"] == (1,) and space.values["zero"] == (1,)
    assert space.name == "small"


def test_overrides_replace_a_knob_and_keep_the_rest():
    space = load_space("default").with_overrides(tp=(8,), recompute=("selective", "full"), pp=None)
    assert space.values["tp"] == (8,)
    assert space.values["recompute"] == ("selective", "full")
    assert space.values["pp"] == load_space("default").values["pp"]
    with pytest.raises(AutoplanError, match="unknown knob"):
        space.with_overrides(dpp=(2,))


def test_enumeration_matches_a_loop_over_resolve_layout():
    space = SearchSpace("t", {"tp": (1, 2, 4), "pp": (1, 2, 8), "cp": (1, 2), "mbs": (1, 2, 3),
                              "zero": (0, 1), "recompute": ("none", "full")})
    target = build_training(16, 4096, 96)
    batch, reaches = enumerate_space(space, target)
    got = {tuple(sorted(batch.layout(i).to_dict().items())) for i in np.flatnonzero(reaches)}
    expected = set()
    for values in itertools.product(*(space.values[k] for k in KNOBS)):
        knobs = dict(zip(KNOBS, values))
        try:
            layout = resolve_layout(knobs, target)
        except AutoplanError:
            continue
        expected.add(tuple(sorted(layout.to_dict().items())))
    assert got == expected


def test_enumerated_layouts_respect_degrees_batch_and_sp():
    target = build_training(512, 8192, 512)
    batch, reaches = enumerate_space(load_space("default"), target)
    assert len(batch) == count_enumerable(load_space("default"), target)
    np.testing.assert_array_equal(batch.dp * batch.tp * batch.pp * batch.cp, 512)
    np.testing.assert_array_equal(batch.sp, batch.tp > 1)
    reached = batch.dp * batch.mbs * batch.grad_acc
    np.testing.assert_array_equal(reached[reaches], 512)
    assert (batch.grad_acc >= 1).all()


def test_batch_derivation_with_tolerance_picks_the_nearest_batch():
    knobs = {"dp": np.array([8.0, 8.0, 48.0]), "mbs": np.array([1.0, 3.0, 1.0]),
             "tp": np.ones(3), "pp": np.ones(3), "cp": np.ones(3)}
    exact = build_training(8, 4096, 100, gbs_tolerance=0.0)
    derived = derive_batch_knobs(knobs, exact)
    grad_acc, reaches = derived["grad_acc"], derived["reaches"]
    # 100/8 = 12.5 -> 12 (96) and 13 (104) tie; ties go to the smaller batch. 100/24 -> 4 (96).
    np.testing.assert_array_equal(grad_acc, [12, 4, 2])
    assert not reaches.any()
    loose = build_training(8, 4096, 100, gbs_tolerance=0.04)
    reaches = derive_batch_knobs(knobs, loose)["reaches"]
    # |96 - 100| = 4 <= 4% of 100; 48·2 = 96 also within; all three reach.
    assert reaches.all()


def test_empty_space_is_an_error():
    space = load_space("default").with_overrides(tp=(8,), pp=(16,), cp=(2,))
    with pytest.raises(EmptySpaceError, match="no layout for 128 GPUs"):
        check_not_empty(space, build_training(128, 4096, 64))
    with pytest.raises(EmptySpaceError):
        enumerate_space(space, build_training(128, 4096, 64))


def test_default_space_for_70b_on_512_gpus_enumerates_fast():
    target = build_training(512, 8192, 512)
    start = time.perf_counter()
    batch, _ = enumerate_space(load_space("default"), target)
    assert time.perf_counter() - start < 0.5
    assert len(batch) > 1000


def test_production_space_adds_the_recompute_knobs_and_the_default_stays_as_it_was():
    default, production = load_space("default"), load_space("production")
    assert default.size == 3240  # 4·5·3·2·3·3·3, unchanged by the recompute knobs
    assert production.size == default.size * 4 * 4  # × recompute_layers × recompute_modules
    assert production.values["recompute_modules"] == ("", "mlp", "layernorm", "mlp,layernorm")
    assert production.values["offload_layers"] == (0,)
