"""The NeMo performance rows: what is loaded, what is left out and why."""

from __future__ import annotations

from autoplan.calibration.accuracy import TIME_SOURCES
from autoplan.calibration.nemo_source import load_nemo


def test_rows_cover_three_gpus_dense_and_moe_and_every_row_is_fp8():
    source = load_nemo()
    assert {r.hardware for r in source.rows} == {"h100-sxm", "b200", "gb200-nvl72"}
    assert any(r.model.is_moe for r in source.rows) and any(not r.model.is_moe for r in source.rows)
    assert all(r.layout["precision"] == "fp8" and r.has_time for r in source.rows)
    assert "nemo" in TIME_SOURCES


def test_left_out_rows_say_why():
    reasons = {reason.split(" ")[0] for _, reason in load_nemo().excluded}
    assert reasons == {"task", "no", "model", "mbs"}  # fine-tuning, no tokens/s, no preset, bad batch


def test_current_scaling_rows_use_the_tensorwise_recipe_and_fsdp_rows_zero_3():
    rows = load_nemo().rows
    gb200 = [r for r in rows if r.hardware == "gb200-nvl72"]
    assert gb200 and all(r.fp8_recipe == "tensorwise" for r in gb200)
    assert all(r.fp8_recipe == "delayed" for r in rows if r.hardware == "h100-sxm")
    assert {r.layout["zero"] for r in gb200} == {1, 3}
