"""rules.table.one_of agrees with the np.isin it replaces."""

from __future__ import annotations

import numpy as np
import pytest

from autoplan.rules.table import one_of


@pytest.mark.parametrize("allowed", [(), (0,), (1, 3), [0.0, 2.0, 3.0, 7.0], (1, 2, 4, 8, 16, 32, 64)])
@pytest.mark.parametrize("size", [0, 1, 5000])
def test_one_of_matches_isin_on_layout_codes(allowed, size):
    values = np.random.default_rng(size).integers(0, 9, size).astype(np.float64)
    got = one_of(values, allowed)
    assert got.dtype == bool and got.shape == values.shape
    np.testing.assert_array_equal(got, np.isin(values, allowed))
