"""GPU generations by preset name and the FP8 recipes each generation's tensor cores run."""

from __future__ import annotations

import pytest

from autoplan.specs.gpu_generation import UNKNOWN_GENERATION, generation_of, runs_fp8_recipe
from autoplan.specs.hardware import load_gpu


@pytest.mark.parametrize("gpu, generation", [
    ("mi300x", "cdna3"), ("mi325x", "cdna3"), ("mi355x", "cdna4"), ("mi350x", "cdna4"),
    ("b200", "blackwell"), ("b300", "blackwell"), ("gb300-nvl72", "blackwell"), ("h200", "hopper"),
    ("tpu-v5", UNKNOWN_GENERATION)])
def test_generation_by_name(gpu, generation):
    assert generation_of(gpu) == generation


def test_mxfp8_runs_on_cdna4_and_blackwell_only():
    """MXFP8 needs block-scaled MMA: Blackwell (Transformer Engine check_mxfp8_support, compute
    capability 10.0) and CDNA 4 (gfx950); CDNA 3 and Hopper run the other recipes."""
    assert runs_fp8_recipe(load_gpu("mi355x"), "mxfp8") and runs_fp8_recipe(load_gpu("b300"), "mxfp8")
    assert not runs_fp8_recipe(load_gpu("mi300x"), "mxfp8") and not runs_fp8_recipe(load_gpu("h100-sxm"), "mxfp8")
    assert runs_fp8_recipe(load_gpu("mi300x"), "tensorwise")
    assert load_gpu("mi355x").fp8_block_scaled_mma and load_gpu("b300").fp8_block_scaled_mma
