"""A network's per-hop latency, fitted to nccl-tests through the cost model's own all-reduce.

``validation/aws_p5_efa_nccl_all_reduce.csv`` holds nccl-tests ``all_reduce_perf`` (out of
place) on AWS p5.48xlarge nodes, 8 H100 SXM each with four 100 Gb/s EFA interfaces per GPU, on 2 to
32 nodes, 32 MB to 8 GB. :func:`scale_out_latency_fit` predicts each row with the cost model's
all-reduce of one buffer over all the row's GPUs (``comm.dp_all_reduce_s`` on a GPU preset: the
ring's bus bandwidth over k = 8 ranks per node, each on its own NIC, plus per collective the faster
of NCCL's ring and tree latencies, ``comm.ring_latency_s`` and ``comm.tree_latency_s``) with the
scale-out hop latency α_out and the NIC efficiency unknown, and fits both on a grid by the
root-mean-square log error. Both latencies are linear in α_out and the transfer in 1/efficiency,
so each grid point costs a few array operations over the rows.

What the fit measures is the tree (all-reduce) side: at 8-32 nodes the tree is the faster
algorithm in the model for every size in the file, at 2 nodes the two are close. That rings
(all-gather, reduce-scatter, tensor-parallel collectives) pay the same α_out per scale-out step is
the cost model's assumption (NCCL's tuning model, ``tuning.cc``, uses one inter-node latency for
both), not something this file measures.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from autoplan.cost import comm
from autoplan.paths import data_dir

# The Ultra-Scale Playbook sweep ran on Hugging Face's cluster on AWS: bench_cluster's launcher
# (bench_cluster/template/base_bench.slurm) submits to its hopper-prod partition with the code,
# conda environment and data on /fsx (Amazon FSx for Lustre), i.e. p5.48xlarge nodes of 8 H100
# SXM with 32 x 100 Gb/s EFA (400 Gb/s per GPU, the h100-sxm preset's NIC), not InfiniBand. NCCL
# over EFA (libfabric through aws-ofi-nccl) pays far more per scale-out step than the preset's
# nominal 10 us: scale_out_latency_fit on the nccl-tests file below gives 118.5 us (median error
# 11%), the scale_out_latency of the p5 preset (hardware_db/gpus/h100-sxm-efa.yaml). The sweep's
# rows are on that preset (validation.PLAYBOOK_HARDWARE); it is not a fit to the sweep.
P5_EFA_PRESET = "h100-sxm-efa"
NCCL_ALL_REDUCE_FILE = "aws_p5_efa_nccl_all_reduce.csv"
MB = 2.0 ** 20  # nccl-tests' size column counts MiB ("size(MB)" in the source's header)
LATENCY_GRID_S = np.linspace(0.0, 500e-6, 1001)
EFFICIENCY_GRID = np.linspace(0.5, 1.0, 101)


@dataclass(frozen=True)
class NcclRows:
    """nccl-tests rows: nodes, GPUs, buffer bytes and measured seconds per all-reduce."""

    nodes: np.ndarray
    gpus: np.ndarray
    num_bytes: np.ndarray
    seconds: np.ndarray


@dataclass(frozen=True)
class NetworkFit:
    """α_out (s), the NIC efficiency, and the fit's median relative and rms log errors."""

    scale_out_latency_s: float
    nic_efficiency: float
    median_abs_error: float
    rms_log_error: float


@dataclass(frozen=True)
class _Parts:
    """Per row: the transfer at efficiency 1, and ring and tree latency as a + b·α_out."""

    transfer: np.ndarray
    ring: tuple[np.ndarray, np.ndarray]
    tree: tuple[np.ndarray, np.ndarray]

    def seconds(self, efficiency: np.ndarray, latency_s: np.ndarray) -> np.ndarray:
        ring = self.ring[0] + self.ring[1] * latency_s
        tree = self.tree[0] + self.tree[1] * latency_s
        return self.transfer / efficiency + np.minimum(ring, tree)


def load_nccl_all_reduce(path: Path | None = None) -> NcclRows:
    """The rows of ``validation/aws_p5_efa_nccl_all_reduce.csv`` (time = size / out algbw)."""
    path = path or data_dir("validation") / NCCL_ALL_REDUCE_FILE
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    nodes = np.array([float(r["nodes"]) for r in rows])
    gpus = np.array([float(r["gpus"]) for r in rows])
    num_bytes = np.array([float(r["size_mb"]) * MB for r in rows])
    seconds = num_bytes / np.array([float(r["out_algbw_gb_per_s"]) * 1e9 for r in rows])
    return NcclRows(nodes, gpus, num_bytes, seconds)


def all_reduce_parts(rows: NcclRows, gpu_name: str = "h100-sxm") -> _Parts:
    """The cost model's all-reduce of every row at once (one group of all the row's GPUs, stride
    1), split into its transfer (NIC efficiency 1) and its ring and tree latencies as a + b·α_out
    (``comm``, evaluated at two values of α_out)."""
    from autoplan.api import build_context, build_training

    gpus = int(rows.gpus.max())
    ctx = build_context("llama3-8b", build_training(gpus, 4096, gpus, hardware=gpu_name))
    ideal = replace(ctx.parameters, efficiency=replace(ctx.efficiency, scale_out_efficiency=1.0))
    alphas = (1e-6, 2e-6)  # latencies must be > 0 (GPUSpec); both are linear in α_out
    at = []
    for alpha in alphas:
        gpu = replace(ctx.cluster.gpu, scale_out_latency_s=alpha)
        c = replace(ctx, parameters=ideal, training=replace(ctx.training, cluster=replace(ctx.cluster, gpu=gpu)))
        link = comm.group_link(c, rows.gpus, np.ones_like(rows.gpus))
        full = comm.dp_all_reduce_s(c, link, rows.num_bytes, np.ones_like(rows.gpus))
        at.append((comm.ring_latency_s(c, link, 2.0), comm.tree_latency_s(c, link),
                   full - comm.dp_latency(c, link).all_reduce_s))
    return _Parts(at[0][2], _line(alphas, at[0][0], at[1][0]), _line(alphas, at[0][1], at[1][1]))


def _line(x: tuple[float, float], y0: np.ndarray, y1: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(a, b) of the lines a + b·x through (x[0], y0) and (x[1], y1)."""
    slope = (y1 - y0) / (x[1] - x[0])
    return y0 - slope * x[0], slope


def scale_out_latency_fit(rows: NcclRows | None = None, gpu_name: str = "h100-sxm") -> NetworkFit:
    """α_out and the NIC efficiency that best reproduce ``rows`` (least squares on log time)."""
    rows = rows or load_nccl_all_reduce()
    parts = all_reduce_parts(rows, gpu_name)
    predicted = parts.seconds(EFFICIENCY_GRID[:, None, None], LATENCY_GRID_S[None, :, None])
    rms = np.sqrt(np.mean(np.log(predicted / rows.seconds) ** 2, axis=-1))
    i, j = np.unravel_index(np.argmin(rms), rms.shape)
    return NetworkFit(scale_out_latency_s=float(LATENCY_GRID_S[j]), nic_efficiency=float(EFFICIENCY_GRID[i]),
                      median_abs_error=float(np.median(np.abs(predicted[i, j] / rows.seconds - 1.0))),
                      rms_log_error=float(rms[i, j]))
