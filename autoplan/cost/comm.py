"""Topology-aware alpha-beta times of collectives, vectorised over layouts.

Bandwidth of a group (Thakur et al. 2005 for ring collectives; NCCL's ``busbw`` convention,
nccl-tests doc/PERFORMANCE.md): a group of ``n`` ranks whose ranks are ``stride`` apart in the
rank order has ``k`` ranks inside one scale-up domain (NVLink: 8 GPUs on HGX, 72 on NVL72). If
``k = n`` it runs on the scale-up links; otherwise each of its k ranks per domain drives its own
NIC in parallel rings, so the bus bandwidth is ``min(scale_up, k × NIC)``. Latency grows as
``log2(n)`` (NCCL's tree and NVLS algorithms at scale) with the tier's per-hop latency.

Sizes: ``num_bytes`` is the full (gathered / reduced) buffer per rank.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from autoplan.cost.arrays import ones_like
from autoplan.cost.broadcast import once_per_batch
from autoplan.cost.context import CostContext
from autoplan.layout import LayoutBatch


@dataclass(frozen=True)
class GroupLink:
    """Per-GPU bus bandwidth (bytes/s) and per-hop latency (s) of a communication group."""

    size: np.ndarray
    bus_bytes_per_s: np.ndarray
    latency_s: np.ndarray
    inside_domain: np.ndarray
    ranks_per_domain: np.ndarray


def group_link(ctx: CostContext, size: np.ndarray, stride: np.ndarray) -> GroupLink:
    """Where a group of ``size`` ranks spaced ``stride`` apart sits, and its bandwidth.

    On a switched fabric (NVSwitch) every group reaches the GPU's scale_up bandwidth; on a full
    mesh of point-to-point links (``GPUSpec.scale_up_peer_link_bytes_per_s``, MI300X's XGMI) a rank
    reaches its k - 1 peers of the group in its domain over one link each: min(scale_up,
    (k - 1)·link), so a TP group of 2 gets one 64 GB/s link, not the 448 GB/s of all 7 (AMD
    Instinct MI300X platform data sheet; RCCL rings over the mesh's direct links)."""
    cl, eff = ctx.cluster, ctx.efficiency
    domain = float(cl.scale_up_domain_size)
    inside = stride * size <= domain
    per_domain = np.where(inside, size, np.maximum(1.0, np.floor(domain / stride)))
    up = cl.gpu.scale_up_bytes_per_s * eff.scale_up_efficiency
    if cl.gpu.scale_up_peer_link_bytes_per_s > 0:
        peers = np.maximum(per_domain - 1.0, 1.0)
        up = np.minimum(cl.gpu.scale_up_bytes_per_s, peers * cl.gpu.scale_up_peer_link_bytes_per_s) * eff.scale_up_efficiency
    out = cl.nic_bytes_per_s * eff.scale_out_efficiency
    bus = np.where(inside, up, np.minimum(up, per_domain * out))
    latency = np.where(inside, cl.gpu.scale_up_latency_s, cl.gpu.scale_out_latency_s)
    return GroupLink(size=size, bus_bytes_per_s=bus, latency_s=latency, inside_domain=inside,
                     ranks_per_domain=per_domain)


def _hops(size: np.ndarray) -> np.ndarray:
    """log2(n) latency hops; 0 for a group of one."""
    return np.log2(np.maximum(size, 1.0))


def all_reduce_s(link: GroupLink, num_bytes: np.ndarray) -> np.ndarray:
    """Ring all-reduce: 2(n-1)/n · S / busbw + 2·log2(n)·α."""
    n = link.size
    return np.where(n > 1, 2 * (n - 1) / n * num_bytes / link.bus_bytes_per_s
                    + 2 * _hops(n) * link.latency_s, 0.0)


def all_gather_s(link: GroupLink, num_bytes: np.ndarray) -> np.ndarray:
    """Ring all-gather (= reduce-scatter): (n-1)/n · S / busbw + log2(n)·α."""
    n = link.size
    return np.where(n > 1, (n - 1) / n * num_bytes / link.bus_bytes_per_s + _hops(n) * link.latency_s, 0.0)


reduce_scatter_s = all_gather_s


def all_to_all_s(ctx: CostContext, link: GroupLink, num_bytes: np.ndarray) -> np.ndarray:
    """All-to-all where each rank sends ``num_bytes`` in total, 1/n to each peer.

    The (k-1)/n share to peers in the same domain goes over NVLink, the (n-k)/n share to other
    domains over the rank's own NIC (PXN spreads it over the node's NICs).
    """
    n, k = link.size, link.ranks_per_domain
    up = ctx.cluster.gpu.scale_up_bytes_per_s * ctx.efficiency.scale_up_efficiency
    out = ctx.cluster.nic_bytes_per_s * ctx.efficiency.scale_out_efficiency
    transfer = np.maximum((k - 1) / n * num_bytes / up, (n - k) / n * num_bytes / out)
    return np.where(n > 1, transfer + _hops(n) * link.latency_s, 0.0)


def p2p_s(ctx: CostContext, stride: np.ndarray, size: np.ndarray, num_bytes: np.ndarray) -> np.ndarray:
    """Point-to-point send between pipeline neighbours ``stride`` ranks apart.

    The chain of ``size`` stages is as slow as its slowest hop: if it spans more than one
    scale-up domain, at least one hop crosses the NIC.
    """
    return num_bytes / p2p_bus_bytes_per_s(ctx, stride, size) + p2p_latency_s(ctx, stride, size)


def p2p_bus_bytes_per_s(ctx: CostContext, stride: np.ndarray, size: np.ndarray) -> np.ndarray:
    """Bandwidth of the slowest hop of a pipeline of ``size`` stages ``stride`` ranks apart: the
    scale-up links while the chain stays in one domain, else the NIC (the test of ``p2p_s``)."""
    cl, eff = ctx.cluster, ctx.efficiency
    inside = stride * size <= cl.scale_up_domain_size
    return np.where(inside, cl.gpu.scale_up_bytes_per_s * eff.scale_up_efficiency,
                    cl.nic_bytes_per_s * eff.scale_out_efficiency)


def p2p_latency_s(ctx: CostContext, stride: np.ndarray, size: np.ndarray) -> np.ndarray:
    """Per-message latency of the slowest hop of a pipeline of ``size`` stages ``stride`` ranks
    apart: the NIC's once the chain leaves the scale-up domain (the test of ``p2p_s``)."""
    gpu = ctx.cluster.gpu
    inside = stride * size <= ctx.cluster.scale_up_domain_size
    return np.where(inside, gpu.scale_up_latency_s, gpu.scale_out_latency_s)


def strides(placement: np.ndarray, tp: np.ndarray, cp: np.ndarray, dp: np.ndarray,
            pp: np.ndarray) -> dict[str, np.ndarray]:
    """Rank stride of each dimension for each placement code (see ``layout.PLACEMENTS``)."""
    from autoplan.layout import PLACEMENTS

    sizes = {"tp": tp, "cp": cp, "dp": dp, "pp": pp}
    out = {name: ones_like(tp) for name in sizes}
    # The distinct placement codes (small non-negative integers), in order: np.unique's, by a count
    # per code (~1 µs against ~8 µs on a small batch).
    codes = np.flatnonzero(np.bincount(placement.astype(np.intp)))
    for code in codes:
        running = ones_like(tp)
        chosen = placement == code if len(codes) > 1 else None
        for name in PLACEMENTS[code].split("-"):
            out[name] = running if chosen is None else np.where(chosen, running, out[name])
            running = running * sizes[name]
    return out


@once_per_batch  # (asked by both parts of the step time: cost.step_time)
def layout_strides(ctx: CostContext, b: LayoutBatch) -> dict[str, np.ndarray]:
    """``strides`` of the batch's own placement and degrees."""
    return strides(b.placement, b.tp, b.cp, b.dp, b.pp)


# --- data-parallel collectives: NCCL's latency model by algorithm and group size ---------------

def domains_spanned(link: GroupLink) -> np.ndarray:
    """N: the scale-up domains (nodes) a group spans, ``n / k`` with k of its ranks per domain."""
    return np.maximum(1.0, np.ceil(link.size / np.maximum(link.ranks_per_domain, 1.0)))


def ring_latency_s(ctx: CostContext, link: GroupLink, rounds: float) -> np.ndarray:
    """Latency of one ring collective, NCCL's tuning model (NVIDIA/nccl src/graph/tuning.cc,
    ``ncclTopoTuneModel``): ``rounds·((n − N)·α_up + (N − 1)·α_out)``, the ring's ``n − 1`` steps
    of which ``N − 1`` cross a NIC (N domains spanned); rounds = 1 for all-gather and
    reduce-scatter, 2 for all-reduce. It grows linearly with the group, unlike a tree."""
    gpu, n = ctx.cluster.gpu, link.size
    nodes = domains_spanned(link)
    steps = rounds * ((n - nodes) * gpu.scale_up_latency_s + (nodes - 1.0) * gpu.scale_out_latency_s)
    return np.where(n > 1, steps, 0.0)


def tree_latency_s(ctx: CostContext, link: GroupLink) -> np.ndarray:
    """Latency of a (double binary) tree all-reduce: up and down a tree of depth log2(n) whose
    log2(k) levels inside a domain cost α_up and log2(N) levels across domains α_out:
    ``2·(log2(k)·α_up + log2(N)·α_out)``. NCCL's tuning model (same source) chains the k ranks
    inside a node instead; a tree there too keeps a group inside one domain never slower than
    the same group split over domains (NVSwitch connects every pair of a node's GPUs)."""
    gpu, n = ctx.cluster.gpu, link.size
    inside = np.maximum(np.minimum(link.ranks_per_domain, n), 1.0)
    steps = 2.0 * (np.log2(inside) * gpu.scale_up_latency_s + np.log2(domains_spanned(link)) * gpu.scale_out_latency_s)
    return np.where(n > 1, steps, 0.0)


@dataclass(frozen=True)
class DPLatency:
    """A data-parallel group's per-collective latencies, computed once for its several
    collectives: one ring round (all-gather, reduce-scatter) and an all-reduce (the faster of
    two ring rounds and the tree)."""

    ring_round_s: np.ndarray
    all_reduce_s: np.ndarray


def dp_latency(ctx: CostContext, link: GroupLink) -> DPLatency:
    """``DPLatency`` of ``link``: ``ring_latency_s`` of one round, and min(two rounds, tree)."""
    ring = ring_latency_s(ctx, link, 1.0)
    return DPLatency(ring_round_s=ring, all_reduce_s=np.minimum(2.0 * ring, tree_latency_s(ctx, link)))


def dp_all_gather_s(ctx: CostContext, link: GroupLink, num_bytes: np.ndarray,
                    num_collectives: np.ndarray, latency: DPLatency | None = None) -> np.ndarray:
    """``num_collectives`` ring all-gathers (= reduce-scatters) that together move ``num_bytes``
    per rank (the full buffers): (n − 1)/n·S/busbw + num_collectives·ring latency. NCCL runs
    all-gather and reduce-scatter as rings only (tuning.cc: trees are for all-reduce).
    ``latency``: the link's ``dp_latency`` where the caller has it."""
    n = link.size
    transfer = (n - 1) / n * num_bytes / link.bus_bytes_per_s
    ring = ring_latency_s(ctx, link, 1.0) if latency is None else latency.ring_round_s
    return np.where(n > 1, transfer + num_collectives * ring, 0.0)


dp_reduce_scatter_s = dp_all_gather_s


def dp_all_reduce_s(ctx: CostContext, link: GroupLink, num_bytes: np.ndarray,
                    num_collectives: np.ndarray, latency: DPLatency | None = None) -> np.ndarray:
    """``num_collectives`` all-reduces moving ``num_bytes`` per rank: 2(n − 1)/n·S/busbw (ring
    and tree both reach the bus bandwidth on large buffers) + per collective the smaller of the
    ring's and the tree's latency, as NCCL picks the faster algorithm per call (tuning.cc).
    ``latency``: the link's ``dp_latency`` where the caller has it."""
    n = link.size
    latency = (dp_latency(ctx, link) if latency is None else latency).all_reduce_s
    transfer = 2.0 * (n - 1) / n * num_bytes / link.bus_bytes_per_s
    return np.where(n > 1, transfer + num_collectives * latency, 0.0)


def pipeline_transfer_s(ctx: CostContext, stride: np.ndarray, size: np.ndarray,
                        num_bytes: np.ndarray) -> np.ndarray:
    """Exposed seconds of one pipeline send (activation forward or gradient back) of ``num_bytes``.

    Asynchronous sends (Megatron's batched isend/irecv) hide ``pp_overlap`` of ``comm.p2p_s``.
    A trainer whose sends block (``pp_blocking_metadata_messages`` k > 0: nanotron's ``P2P``,
    src/nanotron/parallel/pipeline_parallel/p2p.py, sends each tensor's shape, stride and dtype
    first in k = 2 blocking ``dist.send``/``dist.recv`` that the receiver reads back on the host,
    one transfer at a time, ``state.py`` ``run_communication``) hides none of it and waits in
    addition for its k metadata messages, one hop latency each: ``p2p_s + k·α``.
    """
    k = ctx.profile.pipeline.blocking_metadata_messages
    exposed = 1.0 if k > 0 else 1.0 - ctx.efficiency.pp_overlap
    return exposed * p2p_s(ctx, stride, size, num_bytes) + k * p2p_latency_s(ctx, stride, size)
