"""A source that measures one pipeline stage's GPU is compared with that stage's memory."""

from __future__ import annotations

from autoplan.calibration.fit import predict_rows
from autoplan.calibration.rows import Row
from autoplan.calibration.sources import load_source
from autoplan.calibration.validation import PLAYBOOK_MEMORY_STAGE, PLAYBOOK_MEMORY_UNIT
from autoplan.specs.models import load_model
from autoplan.units import GiB

# One micro-batch per step on two stages: the first stage holds one micro-batch of its layers,
# the last the same plus the logits (131072-entry vocabulary), so the two differ by far.
LAYOUT = {"gpus": 8, "dp": 4, "tp": 1, "pp": 2, "mbs": 8, "grad_acc": 1, "zero": 1, "seq_len": 4096,
          "gbs_seqs": 32, "recompute": "none"}


def _row(stage: str) -> Row:
    return Row(source="synthetic", row_id=f"synthetic:{stage}", model=load_model("usp-1b"), hardware="h100-sxm",
               trainer="nanotron", layout=LAYOUT, peak_memory_bytes=40 * GiB, memory_stage=stage)


def test_first_stage_rows_take_the_first_stage_and_fits_keeps_the_peak():
    peak, first = (predict_rows([_row(s)]) for s in ("peak", "first"))
    assert first["peak_memory_bytes"][0] < peak["peak_memory_bytes"][0]
    for p in (peak, first):  # the heaviest stage still decides whether the run fits
        assert p["peak_memory_all_stages_bytes"][0] == peak["peak_memory_bytes"][0]
    assert first["fits"][0] == peak["fits"][0]


def test_playbook_rows_are_read_as_nanotron_wrote_them():
    """nanotron's benchmark CSV: rank 0's reserved peak / 1024**3 (GiB under a GB label).
    The sweep's first record (validation/ultrascale_playbook_runs_1b_8b.csv line 2) says 41.8."""
    row = next(r for r in load_source("playbook_sweep").rows if r.row_id == "playbook_sweep:2")
    assert row.memory_stage == PLAYBOOK_MEMORY_STAGE == "first"
    assert row.peak_memory_bytes == 41.8 * PLAYBOOK_MEMORY_UNIT == 41.8 * GiB
