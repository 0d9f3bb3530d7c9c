"""cost.arrays.select and stacked agree with the numpy calls they replace: values, shape and dtype."""

from __future__ import annotations

import numpy as np
import pytest

from autoplan.cost.arrays import ones_like, select, stacked, zeros_like


@pytest.mark.parametrize("size", [1, 7, 5000])
def test_select_matches_np_select(size):
    rng = np.random.default_rng(size)
    a, b = rng.random(size), rng.random(size)
    a[::3] = np.nan  # NaNs are chosen (or not) like any value
    conditions = [a > 0.5, b > 0.3, a > b]
    for choices, default in (([a, b, a * b], 0.0), ([0, 1, 2], 3), ([a, 1.0, b], np.inf)):
        got, expected = select(conditions, choices, default), np.select(conditions, choices, default)
        assert got.dtype == expected.dtype and got.shape == expected.shape
        np.testing.assert_array_equal(got, expected)


def test_select_names_a_mismatched_length():
    with pytest.raises(ValueError, match="2 conditions and 1 choices"):
        select([np.ones(2, bool), np.ones(2, bool)], [np.zeros(2)], 0.0)


@pytest.mark.parametrize("size", [1, 7, 5000])
def test_stacked_matches_np_stack_of_broadcast_arrays(size):
    rng = np.random.default_rng(size)
    a, b = rng.random(size), rng.random((2, size))
    a[::3] = np.nan
    for values in ((a, a * 2.0, -a), (0.0, a, a > 0.5), (b, a, 3.0), (a > 0.1, a > 0.9), (a > 0.5, a),
                   (np.arange(size), a), (b, b)):
        got, expected = stacked(*values), np.stack(np.broadcast_arrays(*values))
        assert got.dtype == expected.dtype and got.shape == expected.shape
        np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("size", [1, 7, 5000])
def test_zeros_and_ones_like_match_numpy(size):
    rng = np.random.default_rng(size)
    for value in (rng.random(size), rng.random((3, size)), rng.random(size) > 0.5, np.arange(size), 2.5):
        for got, expected in ((zeros_like(value), np.zeros_like(value)), (ones_like(value), np.ones_like(value)),
                              (zeros_like(value, dtype=bool), np.zeros_like(value, dtype=bool))):
            assert got.dtype == expected.dtype and got.shape == expected.shape
            np.testing.assert_array_equal(got, expected)


def test_select_calls_a_choice_only_where_its_condition_holds():
    a = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    called = []

    def choice(value):
        called.append(value)
        return np.full_like(a, value)

    conditions = [np.array([False, False, False]), np.array([True, False, True])]
    got = select(conditions, [lambda: choice(7.0), lambda: choice(8.0)], a)
    np.testing.assert_array_equal(got, np.select(conditions, [np.full_like(a, 7.0), np.full_like(a, 8.0)], a))
    assert called == [8.0]  # the first condition holds nowhere
