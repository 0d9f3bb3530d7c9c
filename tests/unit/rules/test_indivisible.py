"""rules.table.indivisible agrees with the float modulo it replaces."""

from __future__ import annotations

import numpy as np

from autoplan.rules.table import indivisible


def test_indivisible_matches_the_modulo_on_layout_sized_integers():
    rng = np.random.default_rng(0)
    divisor = rng.integers(1, 2**12, 200_000).astype(np.float64)
    multiples = divisor[100_000:] * rng.integers(1, 2**30, 100_000)  # divisible, up to 2^42
    value = np.concatenate([rng.integers(0, 2**40, 100_000).astype(np.float64), multiples])
    expected = value % divisor != 0
    assert expected[:100_000].mean() > 0.9 and not expected[100_000:].any()
    np.testing.assert_array_equal(indivisible(value, divisor), expected)


def test_indivisible_of_fractions_and_scalars():
    # seq_len / cp need not be whole: 4096 / 3 is indivisible by any tp
    np.testing.assert_array_equal(indivisible(np.array([4096 / 3, 4096 / 2, 4096 / 4]), np.array([1.0, 8.0, 3.0])),
                                  [True, False, True])
    assert not indivisible(64, 8) and indivisible(64, 6)
