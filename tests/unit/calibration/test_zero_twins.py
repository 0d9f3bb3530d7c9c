"""ZeRO twins of the playbook sweep: the slower twin of a pair far apart is marked, nothing else."""

import numpy as np
import pytest

from autoplan.calibration.rows import Row
from autoplan.calibration.sources import load_sources
from autoplan.calibration.zero_twins import (
    max_predicted_twin_ratio,
    twin_groups,
    zero_twin_anomalies,
)
from autoplan.specs.models import load_model

MODEL = load_model("llama3-8b")


def _row(i: int, tokens: float, zero: int, tp: int = 1, cell: str = "8b/1", status: str = "ok") -> Row:
    layout = {"gpus": 8, "seq_len": 4096, "gbs_seqs": 64, "tp": tp, "pp": 1, "dp": 8 // tp, "mbs": 1, "zero": zero}
    return Row(source="s", row_id=f"s:{i}", model=MODEL, hardware="h100-sxm", trainer="nanotron", layout=layout,
               tokens_per_s_per_gpu=tokens, cell=cell, status=status)


def test_only_the_slower_twin_beyond_the_factor_is_marked():
    rows = [_row(0, 1000.0, 0), _row(1, 290.0, 1),          # 3.4x apart: row 1 marked
            _row(2, 1000.0, 0, tp=2), _row(3, 400.0, 1, tp=2),  # 2.5x apart: neither
            _row(4, 100.0, 0, tp=4)]                        # no twin: never marked
    assert zero_twin_anomalies(rows).tolist() == [False, True, False, False, False]
    assert zero_twin_anomalies(rows, factor=2.0).tolist() == [False, True, False, True, False]


def test_twins_share_the_cell_and_every_knob_but_zero():
    rows = [_row(0, 1000.0, 0), _row(1, 100.0, 1, cell="8b/2"), _row(2, 100.0, 1, status="crashed_or_oom")]
    assert twin_groups(rows) == []
    assert not zero_twin_anomalies(rows).any()


def test_factor_must_exceed_one():
    with pytest.raises(ValueError, match="factor > 1"):
        zero_twin_anomalies([_row(0, 1.0, 0)], factor=1.0)


def test_predicted_twin_ratio():
    rows = [_row(0, 1000.0, 0), _row(1, 290.0, 1), _row(2, 5.0, 0, tp=2)]
    assert max_predicted_twin_ratio(rows, np.array([120.0, 100.0, 1.0])) == pytest.approx(1.2)
    assert max_predicted_twin_ratio(rows[2:], np.array([1.0])) == 1.0


def test_the_sweep_has_twins_far_beyond_what_the_zero_stage_explains():
    """The shipped sweep: some twin pairs differ by more than TWIN_FACTOR, and the rule marks at
    most one run of a pair (the slower)."""
    rows = [r for r in load_sources()["playbook_sweep"].rows if r.status == "ok"]
    marked = zero_twin_anomalies(rows)
    groups = twin_groups(rows)
    assert marked.sum() > 0
    assert all(marked[g].sum() < len(g) for g in groups)
    assert not marked[[i for i in range(len(rows)) if all(i not in g for g in groups)]].any()
