"""The probe's timings fitted to what the cost model's parameters stand for (no PyTorch).

Kernels, through the fits of :mod:`autoplan.calibration.kernels` (the ones that read the
shipped H100/H200 tables; none is written twice here):

* GEMM: t = (F + F_half)/(η_max·peak) per GEMM of F FLOPs (``fit_linear_time``: weighted least
  squares on the relative error), giving ``gemm_efficiency_max`` and ``gemm_half_flops`` of
  ``cost.time.gemm_efficiency``; the FP8 speed-up is the median BF16/FP8 time of the large GEMMs
  (``fp8_speedups``);
* attention: frac(s) = frac_max·s/(s + s_half) of the BF16 peak, forward + backward
  (``attention_curve``), giving ``attention_efficiency`` and ``attention_half_seq_tokens``;
* HBM: the fastest element-wise pass (bytes read + written per second) over the datasheet HBM
  bandwidth, ``hbm_efficiency`` (as ``kernel_figures`` reads ``hbm_copy``);
* host link: :func:`autoplan.calibration.host_link.host_link_figures`.

Collectives: per collective and level, t = α + S/algbw by the same weighted least squares, S
the buffer in nccl-tests' convention; the bus bandwidth is algbw times nccl-tests' factor
(:data:`BUS_FACTORS`), and α is turned into the per-hop latency of ``cost.comm`` by the number
of latency hops the cost model charges that collective (:data:`LATENCY_HOPS`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from autoplan.calibration.kernels import LinearTimeFit, Table, attention_curve, fit_linear_time, fp8_speedups

# busbw = algbw × factor(n), NVIDIA/nccl-tests doc/PERFORMANCE.md, "Bus bandwidth", Summary:
# AllReduce 2(n-1)/n, ReduceScatter (n-1)/n, AllGather (n-1)/n, AlltoAll (n-1)/n; point-to-point
# Send/Receive is reported with busbw = algbw (the same page: "the algorithm bandwidth makes sense
# for point-to-point operations like Send/Receive").
BUS_FACTORS: dict[str, Callable[[int], float]] = {
    "all_reduce": lambda n: 2.0 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
    "send_recv": lambda n: 1.0,
}
# Latency hops the cost model charges each collective of n ranks (autoplan/cost/comm.py):
# all_reduce_s 2·log2(n)·α, all_gather_s / reduce_scatter_s / all_to_all_s log2(n)·α, p2p_s one
# α per message (a test checks these against comm's functions).
LATENCY_HOPS: dict[str, Callable[[int], float]] = {
    "all_reduce": lambda n: 2.0 * math.log2(n),
    "all_gather": lambda n: math.log2(n),
    "reduce_scatter": lambda n: math.log2(n),
    "all_to_all": lambda n: math.log2(n),
    "send_recv": lambda n: 1.0,
}
COLLECTIVES = tuple(BUS_FACTORS)
LEVELS = ("scale_up", "scale_out")  # inside one node; one rank per node, across nodes
ATTENTION_KINDS = ("flash", "cudnn", "sdpa")  # attention_<backend> rows, in the order preferred


@dataclass(frozen=True)
class CollectiveFit:
    """t = latency_s + S/algbw of one collective at one level over ``ranks`` ranks."""

    collective: str
    level: str
    ranks: int
    latency_s: float  # α of the fit (the intercept, at least 0)
    hop_latency_s: float  # latency_s over the cost model's hops for this collective
    algbw_bytes_per_s: float
    busbw_bytes_per_s: float
    median_error: float
    n: int


def fit_collective(collective: str, level: str, ranks: int, num_bytes, seconds) -> CollectiveFit:
    """The latency + size/bandwidth fit of one collective's timings (``fit_linear_time`` with a
    peak of 1 byte/s: its efficiency is then algbw in bytes/s and its fixed time α)."""
    if collective not in BUS_FACTORS:
        raise ValueError(f"unknown collective {collective!r}; known: {', '.join(COLLECTIVES)}")
    if ranks < 2:
        raise ValueError(f"a collective needs at least 2 ranks, got {ranks}")
    line = fit_linear_time(num_bytes, seconds, 1.0)
    latency = max(line.fixed_s, 0.0)
    algbw = line.efficiency
    return CollectiveFit(collective, level, int(ranks), latency, latency / LATENCY_HOPS[collective](ranks),
                         algbw, algbw * BUS_FACTORS[collective](ranks), line.median_error, line.n)


def fit_collectives(rows: list[dict]) -> list[CollectiveFit]:
    """One fit per (collective, level, ranks) of the collective rows."""
    groups: dict[tuple[str, str, int], list[dict]] = {}
    for r in rows:
        if r["seconds"]:
            groups.setdefault((r["collective"], r["level"], int(r["ranks"])), []).append(r)
    return [fit_collective(c, level, n, [r["bytes"] for r in rs], [r["seconds"] for r in rs])
            for (c, level, n), rs in sorted(groups.items()) if len(rs) >= 2]


def with_bandwidths(rows: list[dict]) -> list[dict]:
    """The collective rows with their algbw = S/t and busbw = algbw·factor(n) filled in (GB/s)."""
    out = []
    for r in rows:
        algbw = r["bytes"] / r["seconds"] / 1e9 if r["seconds"] else ""
        busbw = algbw * BUS_FACTORS[r["collective"]](int(r["ranks"])) if algbw else ""
        out.append({**r, "algbw_gb_per_s": algbw, "busbw_gb_per_s": busbw})
    return out


@dataclass(frozen=True)
class LinkFigures:
    """One level's figures for the hardware file: the all-reduce bus bandwidth (what
    scale_up_efficiency / scale_out_efficiency are fractions of, as nccl-tests all_reduce_perf
    reports it) and the median per-hop latency over the collectives fitted."""

    bus_bytes_per_s: float
    hop_latency_s: float


def link_figures(fits: list[CollectiveFit], level: str) -> LinkFigures | None:
    """The level's figures, None where no collective of that level was fitted."""
    at = [f for f in fits if f.level == level]
    if not at:
        return None
    reduce = [f.busbw_bytes_per_s for f in at if f.collective == "all_reduce"]
    bus = max(reduce) if reduce else float(np.median([f.busbw_bytes_per_s for f in at]))
    return LinkFigures(bus, float(np.median([f.hop_latency_s for f in at])))


@dataclass(frozen=True)
class KernelFit:
    """What the kernel rows say, against a BF16 peak of ``peak_flops_per_s``."""

    gemm_bf16: LinearTimeFit
    gemm_fp32: LinearTimeFit | None  # a CPU's fp32 GEMMs, beside (not in the profile)
    fp8_speedup: dict[str, float]  # recipe -> median BF16/FP8 time of the large GEMMs
    attention_backend: str
    attention_max_fraction: float
    attention_half_seq: float
    attention_by_seq: dict[int, float]
    copy_bytes_per_s: float


def _linear(table: Table, kind: str, peak: float) -> LinearTimeFit | None:
    rows = [r for r in table.select(kind=kind) if r["seconds"]]
    return fit_linear_time([r["flops"] for r in rows], [r["seconds"] for r in rows], peak) if len(rows) >= 2 else None


def fit_kernels(table: Table, peak_flops_per_s: float, large_gemm_flops: float, attention_backend: str = "") -> KernelFit:
    """The GEMM curve, FP8 speed-ups (GEMMs of at least ``large_gemm_flops``), the attention curve
    of ``attention_backend`` (the first of ATTENTION_KINDS timed when '') and the copy rate."""
    bf16 = _linear(table, "gemm_bf16", peak_flops_per_s)
    if bf16 is None:
        raise ValueError("the probe timed fewer than 2 bf16 GEMMs: nothing to fit the GEMM curve to")
    kinds = {r["kind"] for r in table.rows if r["seconds"]}  # what was timed (a failed backend is not)
    speedups = {}
    for recipe in ("tensorwise", "rowwise"):
        spread = fp8_speedups(table, recipe, large_gemm_flops) if f"gemm_fp8_{recipe}" in kinds else None
        if spread is not None and spread.n:
            speedups[recipe] = spread.median
    backend = attention_backend or next((b for b in ATTENTION_KINDS if f"attention_{b}" in kinds), "")
    if not backend:
        raise ValueError("the probe timed no attention: nothing to fit the attention curve to")
    curve = attention_curve(table, backend, peak_flops_per_s)
    copies = [r["bytes"] / r["seconds"] for r in table.select(kind="hbm_copy") if r["seconds"]]
    if not copies:
        raise ValueError("the probe timed no memory copy: nothing to fit hbm_efficiency to")
    return KernelFit(bf16, _linear(table, "gemm_fp32", peak_flops_per_s), speedups, backend, curve.max_fraction,
                     curve.half_seq, curve.by_seq, max(copies))
