"""Collectives through ``torch.distributed`` (NCCL on GPUs, gloo on CPUs), timed at several sizes.

Sizes follow nccl-tests' convention (NVIDIA/nccl-tests doc/PERFORMANCE.md): S is the whole
buffer per rank, the reduced buffer of an all-reduce, the gathered output of an all-gather, the
input of a reduce-scatter (n chunks of S/n), the send buffer of an all-to-all, and the message of a
send/recv between rank 0 and rank 1 (a ping-pong: one direction's time is half the round trip).
Every rank of the group takes part; a timing is the slowest rank's (a MAX all-reduce of each
rank's seconds per call), the fastest of three batches. A collective the backend does not run
(gloo has no reduce-scatter) is left out with a note.

Levels: ``scale_up`` is the group of one node's ranks (every rank when the run is on one node),
``scale_out`` the group of local rank 0 of every node (one rank per node: each on its own NIC).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch
import torch.distributed as dist

from autoplan.probe.plan import ProbePlan
from autoplan.probe.tables import collective_row

ELEMENT_BYTES = 4  # float32 buffers: gloo reduces float32 on every version


def _ops(group, rank_in_group: int, n: int, count: int, device) -> dict[str, Callable[[], object]]:
    """One call of each collective on ``count`` float32 elements per rank (S = 4·count bytes)."""
    whole = torch.ones(count, device=device)
    chunk = torch.ones(max(count // n, 1), device=device)
    gathered = torch.empty(chunk.numel() * n, device=device)
    message = torch.ones(count, device=device)

    def ping_pong():  # ranks 0 and 1 of the group; the others idle
        peer = dist.get_global_rank(group, 1 - rank_in_group) if rank_in_group < 2 else None
        if rank_in_group == 0:
            dist.send(message, peer, group=group)
            dist.recv(message, peer, group=group)
        elif rank_in_group == 1:
            dist.recv(message, peer, group=group)
            dist.send(message, peer, group=group)

    # torch 2.13 renamed all_gather_into_tensor and reduce_scatter_tensor (the old names warn)
    gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
    return {
        "all_reduce": lambda: dist.all_reduce(whole, group=group),
        "all_gather": lambda: gather(gathered, chunk, group=group),
        "reduce_scatter": lambda: scatter(chunk, gathered, group=group),
        "all_to_all": lambda: dist.all_to_all_single(gathered, whole[:gathered.numel()], group=group),
        "send_recv": ping_pong,
    }


def _slowest_s(seconds: float, group, device) -> float:
    value = torch.tensor([seconds], dtype=torch.float64, device=device)
    dist.all_reduce(value, op=dist.ReduceOp.MAX, group=group)
    return float(value.item())


def _timed(fn, group, device, min_time_s: float, sync) -> float:
    fn()
    sync()
    dist.barrier(group=group)
    start = time.perf_counter()
    fn()
    sync()
    one = _slowest_s(max(time.perf_counter() - start, 1e-7), group, device)
    reps = int(min(200, max(2, min_time_s / one)))
    best = float("inf")
    for _ in range(3):
        dist.barrier(group=group)
        start = time.perf_counter()
        for _ in range(reps):
            fn()
        sync()
        best = min(best, _slowest_s((time.perf_counter() - start) / reps, group, device))
    return best


def collective_rows(plan: ProbePlan, group, level: str, device: torch.device,
                    progress: Callable[[str], None]) -> list[dict]:
    """Every collective at every size of ``plan`` on ``group`` (this rank must be in it)."""
    n, me = dist.get_world_size(group), dist.get_rank(group)
    sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)
    rows, skipped = [], {}
    for num_bytes in plan.collective_bytes:
        count = max(int(num_bytes) // ELEMENT_BYTES // n * n, n)
        for name, fn in _ops(group, me, n, count, device).items():
            if name in skipped:
                continue
            try:
                seconds = _timed(fn, group, device, plan.min_time_s, sync)
            except RuntimeError as exc:  # the backend does not run this collective
                skipped[name] = " ".join(str(exc).split())[:120]
                continue
            if name == "send_recv":
                seconds /= 2.0  # one direction of the ping-pong
            rows.append(collective_row(name, level, n, count * ELEMENT_BYTES, seconds))
    for name, why in skipped.items():
        rows.append(collective_row(name, level, n, 0.0, 0.0, note=f"not run: {why}"))
    progress(f"collectives ({level}, {n} ranks, {dist.get_backend(group)}): {len(plan.collective_bytes)} sizes timed"
             + (f"; not run: {', '.join(skipped)}" if skipped else ""))
    return rows
