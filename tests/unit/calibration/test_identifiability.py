"""The identifiability screen: invisible parameters dropped, look-alike pairs warned about."""

from __future__ import annotations

import numpy as np

from autoplan.calibration.identifiability import MIN_ROWS, MIN_SENSITIVITY, screen


def test_a_parameter_seen_by_too_few_rows_is_dropped():
    seen = np.array([0.05, -0.02, 0.03, 0.0, 0.01])
    few = np.zeros(5)
    few[: MIN_ROWS - 1] = 10 * MIN_SENSITIVITY
    kept, warnings = screen({"a": seen, "b": few})
    assert kept == ("a",)
    assert len(warnings) == 1 and warnings[0].startswith("b cannot be identified from these rows")


def test_a_parameter_acting_on_a_few_rows_only_is_kept():
    some = np.zeros(20)
    some[:MIN_ROWS] = 0.05  # e.g. a pipeline term: only the pp > 1 rows move
    assert screen({"a": some})[0] == ("a",)


def test_look_alike_parameters_are_warned_about_and_kept():
    a = np.array([0.05, 0.02, 0.03, 0.04])
    kept, warnings = screen({"a": a, "b": -2.0 * a, "c": np.array([0.05, -0.02, 0.0, 0.01])})
    assert kept == ("a", "b", "c")
    assert len(warnings) == 1 and warnings[0].startswith("a and b move these rows' predictions alike")
