"""How many held-out rows a band of known coverage puts inside it by chance
(autoplan.calibration.accuracy_report.binomial_range)."""

from __future__ import annotations

import math

import pytest

from autoplan.calibration.accuracy_report import binomial_range, window_probability


def test_two_rows_at_85_percent_by_hand():
    # P(k) for n = 2, p = 0.85: 0.0225, 0.255, 0.7225. Equal 5% tails: k = 0 (2.25%) falls in the
    # lower tail, k = 1 (cumulative 27.75%) does not; the upper tail is empty: range 1-2.
    assert binomial_range(2, 0.85) == (1, 2)


@pytest.mark.parametrize("n", [1, 6, 9, 19, 116])
def test_the_range_holds_at_least_the_asked_mass_and_contains_the_mean(n):
    lo, hi = binomial_range(n, 0.85, mass=0.9)
    mass = sum(math.comb(n, k) * 0.85**k * 0.15 ** (n - k) for k in range(lo, hi + 1))
    assert mass >= 0.9 - 1e-12
    assert lo <= 0.85 * n <= hi  # the expected count is inside
    assert 0 <= lo <= hi <= n


def test_window_probability_by_hand():
    # n = 9, p = 0.85: only k = 7 (77.8%) and k = 8 (88.9%) lie in 75-90%.
    # P(7) = 36 · 0.85^7 · 0.15^2 = 0.25967, P(8) = 9 · 0.85^8 · 0.15 = 0.36786.
    assert window_probability(9, 0.85, 75.0, 90.0) == pytest.approx(0.62753, abs=1e-5)
    # n = 3: the shares are 0, 33, 67 and 100%: none in 75-90.
    assert window_probability(3, 0.85, 75.0, 90.0) == 0.0
    # The whole range holds every outcome.
    assert window_probability(26, 0.85, 0.0, 100.0) == pytest.approx(1.0)


def test_window_probability_grows_towards_one_with_rows_for_a_window_around_p():
    chances = [window_probability(n, 0.85, 75.0, 90.0) for n in (20, 80, 320)]
    assert chances == sorted(chances) and chances[-1] > 0.95
