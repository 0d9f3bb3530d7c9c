"""GPU counts: rental units, the geometric grid, batch reachability, refinement."""

from __future__ import annotations

import numpy as np
import pytest

from autoplan.capacity import grid
from autoplan.errors import AutoplanError
from autoplan.specs.hardware import load_gpu

H100, GB200 = load_gpu("h100-sxm"), load_gpu("gb200-nvl72")


def test_rental_units_and_job_sizes():
    assert grid.rental_unit(H100) == 8 and grid.rental_unit(GB200) == 72
    assert grid.job_gpu_counts(H100, 512) == (512,)
    # 8 racks of 72: the whole of them, or 64 per rack (16 of 18 trays)
    assert grid.job_gpu_counts(GB200, 576) == (576, 512)


@pytest.mark.parametrize("text, expected", [("256..8192", (256, 8192)), ("1024", (1024, 1024)),
                                            (" 8 .. 16 ", (8, 16))])
def test_gpu_range(text, expected):
    assert grid.parse_gpu_range(text) == expected


@pytest.mark.parametrize("text", ["8192..256", "0..8", "many", "8..", "1..1e9"])
def test_bad_gpu_range(text):
    with pytest.raises(AutoplanError, match="--gpus"):
        grid.parse_gpu_range(text)


def test_grid_is_whole_units_inside_the_range_about_sqrt2_apart():
    counts = grid.geometric_grid(H100, 256, 8192)
    assert counts[0] == 256 and counts[-1] == 8192
    assert all(c % 8 == 0 for c in counts) and counts == sorted(set(counts))
    ratios = np.diff(np.log(counts)) / np.log(grid.GRID_RATIO)
    assert np.all((ratios > 0.5) & (ratios < 1.5))
    assert grid.geometric_grid(GB200, 256, 8192)[0] == 288  # 4 racks: the first whole rack count >= 256
    assert grid.geometric_grid(GB200, 10, 50) == []


def test_batch_reachable_needs_dp_dividing_the_batch():
    sizes = np.array([1, 2, 4, 8, 16])
    # 512 GPUs with m = 1: dp = 512 divides 512 sequences
    assert grid.batch_reachable(512, sizes, (512,))
    # 384 = 3·128: every dp keeps the factor 3 (m is a power of two), and 3 does not divide 512
    assert not grid.batch_reachable(384, sizes, (512,))
    assert grid.batch_reachable(384, sizes, (1536,))
    # every phase must be reachable: 2048 GPUs need m >= 4 for a 512 batch, fine for 2048 too
    assert grid.batch_reachable(2048, sizes, (512, 2048))
    assert not grid.batch_reachable(2048, np.array([1]), (512, 2048))


def test_grid_snaps_to_usable_counts_and_refine_lands_between():
    def usable(n):
        return n & (n - 1) == 0
    counts = grid.geometric_grid(H100, 256, 8192, usable)
    assert counts == [256, 512, 1024, 2048, 4096, 8192]
    assert grid.refine(H100, counts, [1024], 256, 8192, usable) == []  # nothing usable in between
    new = grid.refine(H100, [256, 1024, 4096], [1024], 256, 8192)
    assert new == [512, 2048]  # sqrt(256·1024), sqrt(1024·4096)
