"""Model states in host memory (``Layout.offload``): what leaves the GPU, what the host holds, and
what the host link and the CPU optimizer step cost.

* ``optimizer``: the fp32 master weights and the optimizer states live in host memory and the
  CPU runs the step (ZeRO-Offload: Ren et al. 2021, USENIX ATC, Sec. 4, Fig. 2; DeepSpeed
  ``zero_optimization.offload_optimizer``; Megatron ``--optimizer-cpu-offload``
  (megatron/core/optimizer/cpu_offloading/hybrid_optimizer.py); FSDP2 ``CPUOffloadPolicy``).
  The host also keeps an fp32 copy of the owned gradient shard (DeepSpeed
  ``stage_1_and_2.py``: the fp32 partition's ``.grad`` on the CPU; Megatron ``--pin-cpu-grads``).
  Where the trainer streams gradients straight to the host (its profile's ``offload_moves_gradients``) the GPU
  gradient buffer goes too: the paper's GPU keeps only its fp16 parameters, 2 of 16 bytes.
* ``params``: also the ZeRO-3 parameter shards (ZeRO-Infinity, Rajbhandari et al. 2021,
  DeepSpeed ``offload_param``; FSDP2 ``CPUOffloadPolicy`` offloads the sharded parameters). Each
  ZeRO-3 gather first brings the shard from the host.

Time: the gradients go device-to-host behind the last micro-batch's backward, the CPU step runs
from host memory (``DeepSpeedCPUAdam`` is memory-bound: bytes per parameter /
host memory bandwidth per GPU), and the updated bf16 weights come back host-to-device before
the next forward (exposed). Offloading never raises GPU memory: it only removes terms.
"""

from __future__ import annotations

import numpy as np

from autoplan.cost.arrays import zeros_like
from autoplan.cost.context import CostContext
from autoplan.cost.data_parallel import zero3_gathers_per_microbatch
from autoplan.cost.host_link import host_link_bytes_per_s
from autoplan.cost.model_states import zero_shard_groups
from autoplan.layout import OFFLOADS, LayoutBatch

CODE = {name: float(i) for i, name in enumerate(OFFLOADS)}
FP32_BYTES = 4.0
BF16_BYTES = 2.0
# A streaming kernel reaches ~75% of a socket's theoretical DRAM bandwidth (STREAM triad on
# 2-socket Xeon / EPYC servers, McCalpin's STREAM results).
HOST_MEMORY_EFFICIENCY = 0.75


def move_to_host(ctx: CostContext, b: LayoutBatch, terms: dict[str, np.ndarray],
                 owned_params: np.ndarray) -> np.ndarray:
    """Zero the GPU model-state terms that ``b.offload`` moves to the host (in place) and return
    the host bytes per GPU: those terms plus the fp32 gradient copy of the ``owned_params``
    (the parameters whose optimizer state this GPU holds)."""
    if not np.count_nonzero(b.offload):
        return zeros_like(b.tp)
    states = b.offload >= CODE["optimizer"]
    params = b.offload >= CODE["params"]
    grads_go = states & ctx.profile.model_states.offload_moves_gradients  # (the profile's YAML says how)
    host = np.where(states, terms["master_weights"] + terms["optimizer_states"] + FP32_BYTES * owned_params, 0.0)
    host = host + np.where(params, terms["weights"], 0.0)
    for name, moved in (("master_weights", states), ("optimizer_states", states), ("weights", params),
                        ("gradients", grads_go)):
        terms[name] = np.where(moved, 0.0, terms[name])
    return host


def cpu_step_s(ctx: CostContext, owned_params: np.ndarray, step_bytes_per_param: np.ndarray) -> np.ndarray:
    """The CPU optimizer step: owned parameters × bytes per parameter / (host memory bandwidth
    per GPU · HOST_MEMORY_EFFICIENCY). Infinite where the hardware states no host memory."""
    bandwidth = ctx.cluster.gpu.host_memory_bytes_per_s * HOST_MEMORY_EFFICIENCY
    with np.errstate(divide="ignore"):
        return owned_params * step_bytes_per_param / bandwidth


def offload_step_s(ctx: CostContext, b: LayoutBatch, owned_params: np.ndarray, step_bytes_per_param: np.ndarray,
                   backward_last_s: np.ndarray) -> np.ndarray:
    """Seconds per step of optimizer offload: the exposed gradient D2H (what the last
    micro-batch's backward does not hide), the CPU step and the weight H2D (Ren et al. 2021
    Sec. 4.1: the gradient transfer overlaps the backward, the step and the parameter copy
    sit between the backward and the next forward). 0 without offload."""
    if not np.count_nonzero(b.offload):
        return zeros_like(b.tp)
    link = host_link_bytes_per_s(ctx)
    d2h = owned_params * ctx.grad_reduce_bytes / link
    h2d = owned_params * BF16_BYTES / link  # the updated weights, bf16 (torchtitan casts its fp32 shard)
    total = np.maximum(d2h - backward_last_s, 0.0) + cpu_step_s(ctx, owned_params, step_bytes_per_param) + h2d
    return np.where(b.offload >= CODE["optimizer"], total, 0.0)


def param_fetch_s(ctx: CostContext, b: LayoutBatch, stage_params: dict[str, np.ndarray],
                  n_layers: np.ndarray) -> np.ndarray:
    """Seconds per micro-batch that parameter offload adds to ZeRO-3's gathers: each gather of a
    layer first copies this GPU's bf16 shard of it from the host (ZeRO-Infinity, Rajbhandari et
    al. 2021, Sec. 5; DeepSpeed ``offload_param``), as many times as ZeRO-3 gathers per
    micro-batch (``data_parallel.zero3_gathers_per_microbatch``). 0 without parameter offload."""
    params = b.offload >= CODE["params"]
    if not np.count_nonzero(params):
        return zeros_like(b.tp)
    dense_group, expert_group = zero_shard_groups(ctx, b)
    shard = stage_params["dense"] / dense_group + stage_params["expert"] / expert_group
    layers = np.maximum(n_layers, 1.0)
    gathers = zero3_gathers_per_microbatch(ctx, b, (stage_params["dense"] + stage_params["expert"]) / layers, layers)
    return np.where(params, gathers * shard * BF16_BYTES / host_link_bytes_per_s(ctx), 0.0)
