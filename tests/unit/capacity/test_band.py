"""Days and cost ranges from the cost model's error band: time-like figures take the tokens/s
band inverted."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from autoplan.calibration.uncertainty import BandsError, ErrorBand
from autoplan.capacity import band as band_module
from autoplan.capacity.band import add_ranges, interval
from autoplan.specs.hardware import load_gpu

BAND = ErrorBand(group="megatron/hopper/dense", measured=True, num_heldout_rows=12, tokens_low_factor=0.8,
                 tokens_high_factor=1.25, memory_low_factor=0.9, memory_high_factor=1.1)


def test_interval_inverts_the_tokens_band():
    # tokens/s may be 0.8x to 1.25x the prediction, so 100 days may be 100/1.25 = 80 to 100/0.8 = 125
    low, high = interval([100.0, 10.0], BAND)
    np.testing.assert_allclose(low, [80.0, 8.0])
    np.testing.assert_allclose(high, [125.0, 12.5])


def test_add_ranges_per_gpu_type(monkeypatch):
    monkeypatch.setattr(band_module, "error_band", lambda trainer, gpu, moe, gpus=None: BAND)
    points = pd.DataFrame({"hardware": ["h100-sxm"], "gpus": [1024], "train_days": [100.0], "gpu_hours": [1e6],
                           "cost_usd": [2e6]})
    out, note = add_ranges(points, "megatron", {"h100-sxm": load_gpu("h100-sxm")}, moe=False)
    assert note == ""
    row = out.iloc[0]
    assert (row["days_low"], row["days_high"]) == pytest.approx((80.0, 125.0))
    assert (row["cost_low_usd"], row["cost_high_usd"]) == pytest.approx((1.6e6, 2.5e6))
    assert (row["gpu_hours_low"], row["gpu_hours_high"]) == pytest.approx((8e5, 1.25e6))
    assert row["band_group"] == "megatron/hopper/dense"


def test_each_point_takes_the_band_of_its_gpu_count(monkeypatch):
    wide = ErrorBand(group="megatron/hopper/dense at 129+ GPUs", measured=True, num_heldout_rows=30,
                     tokens_low_factor=0.5, tokens_high_factor=2.0, memory_low_factor=0.9, memory_high_factor=1.1)
    monkeypatch.setattr(band_module, "error_band", lambda trainer, gpu, moe, gpus=None: wide if gpus > 128 else BAND)
    points = pd.DataFrame({"hardware": ["h100-sxm", "h100-sxm"], "gpus": [64, 1024], "train_days": [100.0, 100.0],
                           "gpu_hours": [1.0, 1.0], "cost_usd": [1.0, 1.0]})
    out, _ = add_ranges(points, "megatron", {"h100-sxm": load_gpu("h100-sxm")}, moe=False)
    assert list(out["band_group"]) == [BAND.group, wide.group]
    assert list(out["days_low"]) == pytest.approx([80.0, 50.0])
    assert list(out["days_high"]) == pytest.approx([125.0, 200.0])


def test_without_the_bands_file_the_points_are_unchanged_and_a_note_says_why(monkeypatch):
    def missing(*_, **__):
        raise BandsError("error-band file is missing")

    monkeypatch.setattr(band_module, "error_band", missing)
    points = pd.DataFrame({"hardware": ["b200"], "gpus": [72], "train_days": [1.0], "gpu_hours": [1.0],
                           "cost_usd": [1.0]})
    out, note = add_ranges(points, "megatron", {"b200": load_gpu("b200")}, moe=False)
    assert out.equals(points) and "missing" in note
