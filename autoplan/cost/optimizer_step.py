"""Seconds of one optimizer step: the update on the GPU (or on the host under offload), Muon's
Newton–Schulz iterations and its gradient gather.

The step updates the parameters this GPU owns: ZeRO >= 1 shards them like the optimizer states
(``model_states.owned_split``, the memory model's groups), of the heavier of the first and last
stage. On the GPU it is memory-bound: owned parameters × ``optimizer.step_bytes_per_param`` /
(hbm_bytes_per_s · hbm_efficiency); under offload the host runs it (``offload.offload_step_s``).
"""

from __future__ import annotations

import numpy as np

from autoplan.cost.arrays import zeros_like
from autoplan.cost import comm
from autoplan.cost.context import CostContext
from autoplan.cost.model_states import expert_group, owned_split, weighted
from autoplan.cost.offload import CODE as OFFLOAD
from autoplan.cost.optimizer import muon_gather_bytes, muon_work, state_bytes_per_param, step_bytes_per_param
from autoplan.layout import LayoutBatch


def muon_time_s(ctx: CostContext, b: LayoutBatch, st: dict, stage_params: dict[str, np.ndarray],
                owned: tuple[np.ndarray, np.ndarray], n_layers: np.ndarray) -> np.ndarray:
    """Newton–Schulz FLOPs / (peak_bf16_flops_per_s · gemm_efficiency_max) (bf16 matmuls, as in
    Jordan et al. 2024's ``zeropower_via_newtonschulz5``) plus the gradient all-gather of
    distributed Muon over the ZeRO groups, one collective per layer (``muon_gather_bytes``;
    Moonlight Sec. 2.3), never hidden: it sits between the backward and the update."""
    flops = muon_work(ctx, b, owned[0], owned[1])
    if not np.count_nonzero(flops):
        return zeros_like(b.tp)
    compute = flops / (ctx.cluster.gpu.compute_peak_bf16_flops_per_s * ctx.efficiency.gemm_efficiency_max)
    dense_bytes, expert_bytes = muon_gather_bytes(ctx, b, stage_params["dense"], stage_params["expert"])
    group = b.dp * b.cp
    gather = comm.dp_all_gather_s(ctx, comm.group_link(ctx, group, np.minimum(st["dp"], st["cp"])),
                                  dense_bytes, np.maximum(n_layers, 1.0))
    if ctx.model.moe is not None:
        edp = expert_group(b, group)
        gather = gather + np.where(expert_bytes > 0, comm.dp_all_gather_s(
            ctx, comm.group_link(ctx, edp, b.ep * b.etp), expert_bytes, np.maximum(n_layers, 1.0)), 0.0)
    return compute + np.where(dense_bytes > 0, gather, 0.0)


def optimizer_step_s(ctx: CostContext, b: LayoutBatch, st: dict, stage_params: dict[str, np.ndarray],
                     n_layers: np.ndarray) -> dict[str, np.ndarray]:
    """{'optimizer': the update on the GPU (0 when offloaded), 'muon': Newton–Schulz and its
    gather} in seconds per step, and what the host step of optimizer offload
    (``offload.offload_step_s``) needs: 'owned' parameters and 'host_bytes_per_param'."""
    owned = owned_split(ctx, b, stage_params["dense"], stage_params["expert"])
    dense_state, expert_state = state_bytes_per_param(ctx, b)
    on_host = b.offload >= OFFLOAD["optimizer"]
    per_dense = step_bytes_per_param(ctx, dense_state, on_host)
    per_expert = step_bytes_per_param(ctx, expert_state, on_host)
    step_bytes = weighted(owned[0], owned[1], per_dense, per_expert)
    gpu = step_bytes / ctx.effective_hbm_bytes_per_s
    host_bytes_per_param = step_bytes / np.maximum(owned[0] + owned[1], 1.0)
    return {"optimizer": np.where(on_host, 0.0, gpu), "muon": muon_time_s(ctx, b, st, stage_params, owned, n_layers),
            "owned": owned[0] + owned[1], "host_bytes_per_param": host_bytes_per_param}
