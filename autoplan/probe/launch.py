"""The probe's ranks: spawned here (``--nproc N``) or started by torchrun / Slurm, one per device.

Rank 0 times the kernels (the other ranks wait at a barrier), then every rank takes part in the
collectives: inside each node (``scale_up``) and, across nodes, in the group of every node's
local rank 0 (``scale_out``). Rank 0 returns what was measured; nothing is written here.

Under torchrun the environment names the ranks (``RANK``, ``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``,
``MASTER_ADDR``, ``MASTER_PORT``); under Slurm's srun ``SLURM_PROCID``, ``SLURM_NTASKS`` and
``SLURM_NTASKS_PER_NODE`` do, with ``MASTER_ADDR``/``MASTER_PORT`` set by the batch script. Without
either, ``--nproc N`` spawns N local processes (torch.multiprocessing, start method spawn) that
meet at a free port of 127.0.0.1.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from autoplan.probe import ProbeError, collectives, kernels
from autoplan.probe.plan import ProbePlan, cpu_plan, cuda_plan
from autoplan.probe.provenance import provenance

BARRIER_TIMEOUT = timedelta(minutes=30)  # ranks wait while rank 0 times the kernels


@dataclass(frozen=True)
class Ranks:
    rank: int
    world: int
    ranks_per_node: int

    @property
    def nodes(self) -> int:
        return self.world // self.ranks_per_node


def launched_ranks(ranks_per_node: int | None) -> Ranks | None:
    """The ranks torchrun or srun started this process as, None when neither did."""
    env = os.environ
    if "RANK" in env and "WORLD_SIZE" in env:
        rank, world, local = int(env["RANK"]), int(env["WORLD_SIZE"]), env.get("LOCAL_WORLD_SIZE")
    elif "SLURM_PROCID" in env and "SLURM_NTASKS" in env and "MASTER_ADDR" in env:
        rank, world, local = int(env["SLURM_PROCID"]), int(env["SLURM_NTASKS"]), env.get("SLURM_NTASKS_PER_NODE")
        env.setdefault("MASTER_PORT", "29500")
    else:
        return None
    per_node = ranks_per_node or int(str(local or world).split("(")[0])
    return checked_ranks(rank, world, per_node)


def checked_ranks(rank: int, world: int, ranks_per_node: int) -> Ranks:
    if ranks_per_node < 1 or world % ranks_per_node:
        raise ProbeError(f"ranks per node must divide the ranks: world {world} % ranks per node {ranks_per_node} != 0")
    return Ranks(rank, world, ranks_per_node)


def _plan(device: torch.device, quick: bool, model) -> ProbePlan:
    if device.type == "cpu":
        return cpu_plan(quick)
    return cuda_plan(quick, torch.cuda.get_device_capability(device) >= (8, 9), model)


def _device(kind: str, local_rank: int, ranks_per_node: int) -> torch.device:
    """This rank's device; a CPU rank gets its share of the node's cores as threads (a CPU
    'device' is one rank, as a GPU is), so ranks do not contend for cores."""
    if kind == "cuda":
        if not torch.cuda.is_available():
            raise ProbeError("--device cuda: PyTorch sees no CUDA device here (use --device cpu)")
        if local_rank >= torch.cuda.device_count():
            raise ProbeError(f"local rank {local_rank} has no GPU: {torch.cuda.device_count()} visible")
        torch.cuda.set_device(local_rank)
        return torch.device("cuda", local_rank)
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // ranks_per_node))
    return torch.device("cpu")


def _kernel_rows(plan: ProbePlan, device, progress) -> tuple[list[dict], list[dict]]:
    rows = kernels.copy_rows(plan, device, progress)
    rows += kernels.gemm_rows(plan, device, progress)
    rows += kernels.attention_rows(plan, device, progress)
    return rows, kernels.host_link_rows(plan, device, progress)


def _collective_rows(plan: ProbePlan, r: Ranks, device, progress) -> list[dict]:
    """Both levels; every rank creates every group (torch.distributed.new_group's rule)."""
    per = r.ranks_per_node
    node_groups = [dist.new_group(list(range(i * per, (i + 1) * per))) for i in range(r.nodes)]
    out_group = dist.new_group([i * per for i in range(r.nodes)]) if r.nodes > 1 else None
    rows = []
    if per > 1:
        rows += collectives.collective_rows(plan, node_groups[r.rank // per], "scale_up", device, progress)
    if out_group is not None and r.rank % per == 0:
        rows += collectives.collective_rows(plan, out_group, "scale_out", device, progress)
    return rows


def measure(r: Ranks, device_kind: str, quick: bool, model, progress: Callable[[str], None]) -> dict | None:
    """What this rank measures; rank 0 returns {meta, kernels, host_link, collectives}."""
    device = _device(device_kind, r.rank % r.ranks_per_node, r.ranks_per_node)
    progress = progress if r.rank == 0 else (lambda message: None)
    backend = "nccl" if device.type == "cuda" else "gloo"
    plan = _plan(device, quick, model)
    if r.world > 1:
        dist.init_process_group(backend, rank=r.rank, world_size=r.world, timeout=BARRIER_TIMEOUT,
                                **({"device_id": device} if device.type == "cuda" else {}))
    try:
        kernel_rows, host_rows = _kernel_rows(plan, device, progress) if r.rank == 0 else ([], [])
        collective_rows = []
        if r.world > 1:
            dist.barrier()
            collective_rows = _collective_rows(plan, r, device, progress)
            dist.barrier()
    finally:
        if r.world > 1:
            dist.destroy_process_group()
    if r.rank != 0:
        return None
    meta = provenance(device, ranks=r.world, nodes=r.nodes, backend=backend)
    meta["quick"] = quick
    return {"meta": meta, "kernels": kernel_rows, "host_link": host_rows, "collectives": collective_rows,
            "large_gemm_flops": plan.large_gemm_flops}


def _worker(index: int, world: int, per_node: int, port: int, args: tuple, queue) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    try:
        result = measure(Ranks(index, world, per_node), *args)
        if index == 0:
            queue.put(("ok", result))
    except Exception as exc:  # noqa: BLE001 - handed to the parent as one line
        queue.put(("error", f"rank {index}: {type(exc).__name__}: {' '.join(str(exc).split())[:400]}"))


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def spawned(nproc: int, per_node: int, device_kind: str, quick: bool, model, progress) -> dict:
    """Run ``nproc`` local ranks and return rank 0's measurements (a worker's error as ProbeError)."""
    checked_ranks(0, nproc, per_node)
    queue = mp.get_context("spawn").SimpleQueue()
    context = mp.start_processes(_worker, args=(nproc, per_node, _free_port(), (device_kind, quick, model, progress),
                                                queue), nprocs=nproc, join=False, start_method="spawn")
    messages = []
    try:
        while not context.join(timeout=0.2):
            while not queue.empty():
                messages.append(queue.get())
    except KeyboardInterrupt:
        for process in context.processes:
            process.terminate()
        raise
    except mp.ProcessExitedException as exc:
        raise ProbeError(f"a probe rank died: {exc}") from None
    while not queue.empty():
        messages.append(queue.get())
    errors = [text for status, text in messages if status == "error"]
    if errors:
        raise ProbeError(errors[0])
    results = [value for status, value in messages if status == "ok"]
    if not results:
        raise ProbeError("rank 0 returned no measurements")
    return results[0]
