"""Published runs' GPU-hours from their stated tokens, cluster and layout, with capacity's
arithmetic (phases summed, autoplan.capacity.front) and the cost model's throughput, within the
model's own held-out error interval (autoplan.calibration.uncertainty)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from autoplan.calibration.uncertainty import error_band
from autoplan.capacity import CapacitySetup
from autoplan.capacity.band import interval
from autoplan.capacity.front import phase_frame, point_frame
from autoplan.capacity.points import fixed_layout_phase
from autoplan.capacity.schedule import BatchPhase
from autoplan.space import load_space
from autoplan.specs.hardware import load_gpu
from autoplan.specs.models import load_model

CASES = yaml.safe_load((Path(__file__).parent / "published_runs.yaml").read_text())


def predicted_gpu_hours(case) -> float:
    model = load_model(case["model"])
    setup = CapacitySetup(model=model, space=load_space("default"), seq_len=case["seq_len"], settings=case["setup"])
    gpu = load_gpu(case["hardware"])
    phases = [BatchPhase(gbs_tokens=p["gbs_seqs"] * case["seq_len"], tokens=float(p["tokens"])) for p in case["phases"]]
    rows = [fixed_layout_phase(setup, gpu, case["gpus"], i, phase, case["layout"]) for i, phase in enumerate(phases, 1)]
    points = point_frame(phase_frame(rows), {gpu.name: 1.0})
    # a published wall-clock figure that counts downtime: busy hours over the stated effective share
    return float(points["gpu_hours"].iloc[0]) / case.get("effective_training_time", 1.0)


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_published_gpu_hours_lie_in_the_models_error_interval(case):
    predicted = predicted_gpu_hours(case)
    band = error_band("megatron", load_gpu(case["hardware"]), load_model(case["model"]).is_moe)
    assert band.measured == case["band_measured"], band.group
    low, high = interval(predicted, band)
    assert low <= case["published_gpu_hours"] <= high, (
        f"{case['name']}: published {case['published_gpu_hours']:.4g} GPU-hours outside the predicted "
        f"{predicted:.4g} [{low:.4g}, {high:.4g}] ({band.group})")
