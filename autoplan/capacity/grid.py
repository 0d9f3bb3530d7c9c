"""Which GPU counts to try: whole rental units inside ``--gpus LOW..HIGH``, on a geometric grid
refined near the Pareto front.

A GPU is rented by the node (8 GPUs of an HGX board), or by the rack where the NVLink domain
spans several nodes (GB200/GB300 NVL72: 72 GPUs in 18 compute trays). CoreWeave deploys GB200
NVL72 only as full racks of 18 nodes and advises workloads to tolerate two unavailable nodes per
rack (docs.coreweave.com/docs/platform/instances/gb200), so a rack-rented job may run on fewer
GPUs than it pays for: :func:`job_gpu_counts` offers the whole rack and the largest power of two
that fits in it (64 of 72, 16 of 18 trays), whose degrees divide a power-of-two batch.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable

import numpy as np

from autoplan.errors import AutoplanError, shown
from autoplan.specs.hardware import GPUSpec
from autoplan.specs.training import MAX_GPUS

GRID_RATIO = math.sqrt(2.0)  # neighbouring grid points differ by this factor in GPU count
_RANGE_RE = re.compile(r"^\s*(\d+)\s*(?:\.\.\s*(\d+)\s*)?$")


def parse_gpu_range(text: str) -> tuple[int, int]:
    """'256..8192' -> (256, 8192); '1024' -> (1024, 1024)."""
    match = _RANGE_RE.match(str(text))
    if match is None:
        raise AutoplanError(f"--gpus: expected a range like '256..8192' or one count like '1024', got {shown(text)}")
    low = int(match.group(1))
    high = int(match.group(2) or low)
    if not 1 <= low <= high <= MAX_GPUS:
        raise AutoplanError(f"--gpus: 1 <= LOW <= HIGH <= {MAX_GPUS} must hold, got LOW={low}, HIGH={high}")
    return low, high


def rental_unit(gpu: GPUSpec) -> int:
    """GPUs rented together: the NVLink domain when it spans several nodes (a rack), else a node."""
    return max(gpu.gpus_per_node, gpu.scale_up_domain_size)


def job_gpu_counts(gpu: GPUSpec, rented: int) -> tuple[int, ...]:
    """The GPU counts a job on ``rented`` GPUs may use: all of them, and on rack-rented GPUs also
    the largest power of two per rack (64 of an NVL72's 72)."""
    unit = rental_unit(gpu)
    if unit == gpu.gpus_per_node:
        return (rented,)
    per_rack = 1 << (unit.bit_length() - 1)
    return (rented,) if per_rack == unit else (rented, rented // unit * per_rack)


def batch_reachable(job_gpus: int, model_parallel: np.ndarray, gbs_seqs: tuple[int, ...]) -> bool:
    """Whether some model-parallel size m = tp·pp·cp of the space divides ``job_gpus`` with a
    data-parallel degree dp = job_gpus / m that divides every phase's global batch: the exact
    batch dp·mbs·grad_acc = gbs_seqs needs dp | gbs_seqs (Megatron-LM
    ``megatron/training/arguments.py`` checks global_batch_size % (micro_batch_size · dp) == 0)."""
    m = model_parallel[job_gpus % model_parallel == 0]
    dp = job_gpus // m
    return bool(np.any(np.all(np.remainder.outer(np.asarray(gbs_seqs), dp) == 0, axis=0)))


def unit_counts(gpu: GPUSpec, low: int, high: int, usable: Callable[[int], bool]) -> np.ndarray:
    """Every whole number of rental units in [low, high] that ``usable`` accepts."""
    unit = rental_unit(gpu)
    counts = np.arange(max(1, math.ceil(low / unit)), high // unit + 1, dtype=np.int64) * unit
    return np.array([c for c in counts if usable(int(c))], dtype=np.int64)


def _nearest(candidates: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """For each target, the candidate closest to it on a log scale."""
    distance = np.abs(np.log(candidates[None, :]) - np.log(targets[:, None]))
    return candidates[np.argmin(distance, axis=1)]


def geometric_grid(gpu: GPUSpec, low: int, high: int, usable: Callable[[int], bool] = lambda n: True) -> list[int]:
    """Rented counts from ``low`` to ``high`` GPUs spaced by about ``GRID_RATIO``: each target
    low·r^i snapped to the nearest whole number of rental units that ``usable`` accepts (e.g.
    :func:`batch_reachable`; when it accepts none, every whole number of units is offered, so the
    search can say why none works). An empty list when no whole unit fits in the range."""
    candidates = unit_counts(gpu, low, high, usable)
    if len(candidates) == 0:
        candidates = unit_counts(gpu, low, high, lambda n: True)
    if len(candidates) == 0:
        return []
    first, last = float(candidates[0]), float(candidates[-1])
    steps = max(1, math.ceil(math.log(last / first) / math.log(GRID_RATIO))) if last > first else 0
    targets = np.geomspace(first, last, steps + 1)
    return sorted({int(c) for c in _nearest(candidates, targets)})


def refine(gpu: GPUSpec, tried: list[int], front: list[int], low: int, high: int,
           usable: Callable[[int], bool] = lambda n: True) -> list[int]:
    """New counts half way (geometrically) between each front count and its tried neighbours,
    snapped to the nearest untried usable count strictly between the two."""
    ordered = sorted(set(tried))
    pairs = [(count, neighbour) for count in front
             for neighbour in ordered[max(0, ordered.index(count) - 1):ordered.index(count)]
             + ordered[ordered.index(count) + 1:ordered.index(count) + 2]]
    return between(gpu, ordered, pairs, low, high, usable)


def between(gpu: GPUSpec, tried: list[int], pairs: list[tuple[int, int]], low: int, high: int,
            usable: Callable[[int], bool] = lambda n: True) -> list[int]:
    """For each pair of counts, the untried usable count strictly between them nearest their
    geometric midpoint (none where no such count is left)."""
    candidates = unit_counts(gpu, low, high, usable)
    fresh = np.setdiff1d(candidates, np.asarray(sorted(set(tried)), dtype=np.int64))
    new: set[int] = set()
    for a, b in pairs:
        inside = fresh[(fresh > min(a, b)) & (fresh < max(a, b))]
        if len(inside):
            new.add(int(_nearest(inside, np.array([math.sqrt(a * b)]))[0]))
    return sorted(new)
