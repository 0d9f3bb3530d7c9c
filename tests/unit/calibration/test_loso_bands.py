"""The coverage a new source sees: bands built without that source's errors."""

from __future__ import annotations

import math

import numpy as np
import pytest

from autoplan.calibration import band_fit
from autoplan.calibration.sources import load_sources


@pytest.fixture(scope="module")
def sources():
    return load_sources()


def test_a_source_is_judged_by_bands_built_without_its_own_errors(sources):
    """sc21's rows all 30% slow and korthikanti's exact: korthikanti's band (from sc21's errors
    alone, the same group) holds none of its exact rows only if it excludes the point, which a
    band never does; sc21's band (from korthikanti's exact errors: a point band [1, 1]) holds none
    of sc21's rows."""
    rows = {name: [r for r in sources[name].rows if r.has_time] for name in ("sc21", "korthikanti", "torchtitan")}
    rows["playbook_sweep"] = [r for r in sources["playbook_sweep"].rows if r.has_memory][:50]
    ratios = {"sc21": (rows["sc21"], np.full(len(rows["sc21"]), math.log(0.7))),
              "korthikanti": (rows["korthikanti"], np.zeros(len(rows["korthikanti"]))),
              # another group's rows, with memory: the unmeasured groups' pools are not empty
              "torchtitan": (rows["torchtitan"], np.zeros(len(rows["torchtitan"]))),
              "playbook_sweep": (rows["playbook_sweep"], np.zeros(len(rows["playbook_sweep"])))}
    coverage = band_fit.nested_band_coverage(ratios)
    assert coverage["sc21"] == 0.0  # a [1, 1] band from korthikanti's exact predictions
    assert coverage["korthikanti"] == 100.0  # every band contains its point
