"""Runs that stalled at scale: the same per-GPU work slower per micro-batch at more nodes."""

import math

import numpy as np
import pytest

from autoplan.calibration.rows import Row
from autoplan.calibration.scale_stalls import (
    scale_stalls,
    seconds_per_microbatch,
    stall_excess_s,
    stalled_share_by_nodes,
)
from autoplan.calibration.sources import load_sources
from autoplan.specs.models import load_model

MODEL = load_model("llama3-8b")
GBS = 256


def _row(i: int, nodes: int, s_per_mb: float, pp: int = 2, mbs: int = 1) -> Row:
    """A run of one family (tp 1, pp, mbs) on ``nodes`` nodes at a fixed global batch whose
    measured seconds per micro-batch is ``s_per_mb``."""
    gpus = 8 * nodes
    dp = gpus // pp
    acc = GBS // (dp * mbs)
    layout = {"gpus": gpus, "seq_len": 4096, "gbs_seqs": GBS, "tp": 1, "pp": pp, "dp": dp, "mbs": mbs,
              "grad_acc": acc, "zero": 1}
    tokens = dp * mbs * acc * 4096 / (gpus * s_per_mb * acc)
    return Row(source="s", row_id=f"s:{i}", model=MODEL, hardware="h100-sxm", trainer="nanotron", layout=layout,
               tokens_per_s_per_gpu=tokens, cell=f"8b/{nodes}")


def test_seconds_per_microbatch_come_back_from_the_measured_speed():
    assert seconds_per_microbatch(_row(0, 4, 0.123)) == pytest.approx(0.123)


def test_only_runs_slower_than_their_family_at_few_nodes_by_the_margin_are_marked():
    rows = [_row(0, 1, 0.20), _row(1, 2, 0.22), _row(2, 16, 0.30),   # +0.09 s: not a stall
            _row(3, 16, 1.40),                                       # +1.19 s: stalled
            _row(4, 16, 1.40, mbs=2),                                # another family, no reference
            _row(5, 32, 5.0)]                                        # 32 nodes: grad_acc 2, not judged
    excess = stall_excess_s(rows)
    assert excess[:4] == pytest.approx([-0.01, 0.01, 0.09, 1.19])
    assert math.isnan(excess[4]) and math.isnan(excess[5])
    assert scale_stalls(rows).tolist() == [False, False, False, True, False, False]
    assert scale_stalls(rows, stall_s=0.05).tolist() == [False, False, True, True, False, False]
    shares = {n: (judged, share) for n, judged, share in stalled_share_by_nodes(rows)}
    assert shares[16] == (2, 50.0) and shares[1] == (1, 0.0) and shares[32][0] == 0 and math.isnan(shares[32][1])


def test_the_margin_must_be_positive():
    with pytest.raises(ValueError, match="stall_s > 0"):
        scale_stalls([_row(0, 1, 0.2)], stall_s=0.0)


def test_the_sweeps_stalls_sit_at_32_and_64_nodes():
    """The finding the module documents, on the shipped sweep: few stalls up to 16 nodes, most runs
    at 64 nodes."""
    rows = [r for r in load_sources(["playbook_sweep"])["playbook_sweep"].rows if r.status == "ok"]
    shares = {n: share for n, judged, share in stalled_share_by_nodes(rows) if judged >= 30}
    assert max(shares[n] for n in (1, 2, 4)) < 5.0
    assert shares[64] > 75.0 and shares[32] > 25.0
    at_64 = np.array([r.num_gpus == 512 and r.layout["pp"] > 1 for r in rows])
    assert np.nanmedian(stall_excess_s(rows)[at_64]) > 1.0  # seconds per micro-batch


def test_fits_see_the_stragglers_memory_but_not_their_speed():
    """accuracy.calibrate_all and the error bands' folds fit on ``without_straggler_speeds``: the
    sweep's stalled runs and slower ZeRO twins keep their memory, lose their tokens/s."""
    from autoplan.calibration.accuracy import straggler_ids, without_straggler_speeds
    from autoplan.calibration.zero_twins import zero_twin_anomalies

    rows = [r for r in load_sources(["playbook_sweep"])["playbook_sweep"].rows if r.status == "ok"]
    ids = straggler_ids(rows)
    flagged = scale_stalls(rows) | zero_twin_anomalies(rows)
    assert ids == {r.row_id for r, f in zip(rows, flagged) if f} and len(ids) > 50
    seen = without_straggler_speeds(rows, ids)
    for before, after in zip(rows, seen):
        assert after.peak_memory_bytes == before.peak_memory_bytes or math.isnan(before.peak_memory_bytes)
        assert math.isnan(after.tokens_per_s_per_gpu) == (before.row_id in ids)
    other = [_row(0, 1, 0.2)]  # not a playbook_sweep row: never masked
    assert straggler_ids(other) == set() and without_straggler_speeds(other)[0] is other[0]
