"""``--allow-idle-gpus``: plans that leave some of the job's GPUs idle.

A layout uses dp·tp·pp·cp GPUs. On an awkward GPU count (1000 H100s; 72 GPUs of one NVL72 rack)
the degrees the space offers may fit better into fewer GPUs: 992 = 62·16 or 64 = 8·8. Asked to,
the search also plans for each smaller GPU count that some tp·pp·cp of the space fills: for
each product mp, the largest count <= the job's that is a multiple of mp and whole nodes (or
less than one node, as a job may use part of one). Each count is searched as a job of its own;
the results are merged and ranked per GPU *of the job* (the idle ones are paid for too), so
tokens/s/GPU, TFLOP/s/GPU, MFU and HFU of a plan on ``used`` GPUs are scaled by used/gpus, and
the ``idle_gpus`` column says how many it leaves idle.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from autoplan.cost.context import CostContext
from autoplan.cost.evaluate import CostTable
from autoplan.specs.training import TrainingSpec

# Columns divided by the GPU count (autoplan/cost/evaluate.py), re-based on the job's GPUs.
PER_GPU_COLUMNS = ("tokens_per_s_per_gpu", "model_tflops_per_gpu", "hardware_tflops_per_gpu", "mfu", "hfu")


def gpu_counts(products: np.ndarray, gpus: int, gpus_per_node: int, gbs_seqs: int) -> list[int]:
    """The GPU counts to plan for, largest first. For each tp·pp·cp product ``mp``: the largest
    count mp·dp <= ``gpus`` that is whole nodes of ``gpus_per_node`` (or at most one node), and
    the largest such count whose dp divides ``gbs_seqs`` (so the batch is reachable exactly)."""
    divisors = _divisors(gbs_seqs)
    counts = set()
    for mp in {int(p) for p in products if 1 <= p <= gpus}:
        exact = next((dp for dp in divisors if dp <= gpus // mp and _whole(mp * dp, gpus_per_node)), None)
        counts.update(mp * dp for dp in (_largest_whole(mp, gpus, gpus_per_node), exact) if dp)
    return sorted(counts, reverse=True)


def whole_node_gpus(gpus: int, gpus_per_node: int) -> int:
    """The largest job of at most ``gpus`` GPUs that is whole nodes, or within one node (what
    :class:`~autoplan.specs.hardware.Cluster` accepts): 509 GPUs of 8 per node -> 504."""
    return gpus if _whole(gpus, gpus_per_node) else gpus // gpus_per_node * gpus_per_node


def _whole(used: int, gpus_per_node: int) -> bool:
    """A job of ``used`` GPUs is whole nodes, or fits in one node."""
    return used <= gpus_per_node or used % gpus_per_node == 0


def _largest_whole(mp: int, gpus: int, gpus_per_node: int) -> int | None:
    """The largest dp with mp·dp <= gpus in whole nodes (or within one node)."""
    step = math.lcm(mp, gpus_per_node) // mp
    across = gpus // mp // step * step
    within = min(gpus, gpus_per_node) // mp
    return max(across, within) or None


def _divisors(n: int) -> list[int]:
    """The divisors of ``n``, largest first (trial division up to sqrt(n))."""
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return sorted({*small, *(n // d for d in small)}, reverse=True)


def context_for(ctx: CostContext, used: int) -> CostContext:
    """``ctx`` for a job of ``used`` GPUs of the same kind, nodes and network."""
    cluster = replace(ctx.training.cluster, num_gpus=used)
    return replace(ctx, training=replace(ctx.training, cluster=cluster))


def per_job_gpu(table: CostTable, job: TrainingSpec) -> CostTable:
    """``table`` (assessed for a job of fewer GPUs) with its per-GPU columns re-based on the GPUs
    of ``job`` and an ``idle_gpus`` column."""
    used, gpus = table.training.gpus, job.gpus
    columns = dict(table.columns)
    for name in PER_GPU_COLUMNS:
        columns[name] = columns[name] * (used / gpus)
    columns["idle_gpus"] = np.full(len(table), float(gpus - used))
    return CostTable(batch=table.batch, columns=columns, training=job)


def used_gpus(table: CostTable) -> np.ndarray:
    """GPUs each row's layout uses (all of the job's when no plan leaves any idle)."""
    idle = table.columns.get("idle_gpus")
    return table.training.gpus - (idle if idle is not None else np.zeros(len(table)))
