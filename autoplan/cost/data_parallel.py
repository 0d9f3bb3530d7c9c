"""Data-parallel and ZeRO/FSDP traffic of one step: what each GPU sends, in which dtype, in how
many collectives, and over which links.

* ZeRO 0-2 (DDP, Megatron's distributed optimizer, ZeRO-1/2): once per step the gradients are
  all-reduced (ZeRO-0) or reduce-scattered (ZeRO-1/2) in the trainer's reduction dtype
  (``grad_reduce_bytes``: Megatron/torchtitan/FSDP DEFAULT fp32, DeepSpeed and Composer PURE
  bf16) in buckets of ``dp_bucket_params`` elements, and ZeRO-1/2 all-gather the updated bf16
  parameters (Rajbhandari et al. 2020, ZeRO, Sec. 7: 2Ψ for stages 1-2).
* ZeRO-3 / FSDP: every micro-batch gathers each layer's bf16 parameters for the forward and
  again for the backward and reduce-scatters its gradients (ZeRO Sec. 7.2.2: 3Ψ, 1.5× DDP),
  one collective per layer (an FSDP unit is a transformer block: torchtitan
  ``apply_fsdp``; Composer wraps each MPTBlock). Under full recompute the recomputed forward
  runs inside the backward's own gather for FSDP1/FSDP2 (the checkpoint sits inside the FSDP
  unit); DeepSpeed ZeRO-3 gathers again unless the layer is within
  ``stage3_max_reuse_distance`` parameters (``zero3_reuse_distance_params``,
  deepspeed/runtime/zero/partitioned_param_coordinator.py). None of it shrinks with the
  micro-batch, so a small micro-batch on many GPUs is communication-bound.
* A pipeline engine that all-reduces the full gradient under ZeRO <= 1
  (``pp_grad_all_reduce_bytes`` > 0): DeepSpeed's pipeline engine under bf16 runs
  ``_exec_reduce_grads`` -> ``_bf16_reduce_grads``, a ``buffered_allreduce_fallback`` over the
  BF16_Optimizer's flat fp32 gradients (``get_grads_for_reduction``; deepspeed/runtime/pipe/
  engine.py), then each rank updates its fp32 partition and ``update_lp_params`` all-gathers the
  bf16 partitions (deepspeed/runtime/bf16_optimizer.py, ``all_gather_dp_groups``): per step
  AR(P·4) + AG(P·2) instead of RS(P·grad_reduce_bytes) + AG(P·2). BLOOM-176B ran this path
  (Megatron-DeepSpeed, bf16, ZERO_STAGE=0, whose BF16_Optimizer partitions the optimizer states).
* Hybrid sharding (``Layout.hsdp``, ``autoplan.cost.hybrid_shard``): the gathers and
  reduce-scatters above run inside the shard group of hsdp ranks, and the 1/hsdp gradient shard
  is all-reduced across the replicas once per step (FSDP2 ``set_requires_all_reduce`` delays it
  to the last micro-batch; Megatron's distributed-optimizer instances reduce once per step);
  under DeepSpeed's hpZ the backward gathers come from the secondary partition inside the hpZ group.
* ZeRO-2 as FSDP1's SHARD_GRAD_OP (``zero2_is_shard_grad_op``: llm-foundry / Composer): like
  ZeRO-3 one collective per FSDP unit and micro-batch, but one parameter all-gather (before the
  forward: the unit stays unsharded through the backward, torch/distributed/fsdp/api.py
  ``ShardingStrategy.SHARD_GRAD_OP``) and one gradient reduce-scatter per micro-batch (Composer
  takes no ``no_sync`` for FSDP: composer ``ddp_sync_context`` returns at once when the model is
  not DDP); no per-step gather of updated parameters (the next forward's gather fetches them).
* ZeRO-3 with a pipeline where the trainer keeps the stage's parameters and gradients unsharded
  across micro-batches (``zero3_pp_unsharded_bytes > 0``: torch.distributed.pipelining turns off
  reshard-after-backward and gradient sync until the last micro-batch, stage.py
  ``backward_maybe_with_nosync``): one gather and one reduce-scatter per step.

Bandwidth per GPU (``comm.group_link``): inside a scale-up domain the NVLink bus bandwidth;
across domains a ring whose k ranks per domain each drive their own NIC (rail-optimised: a DP
group with TP inside the node has k = 1, one NIC per GPU). Latency per collective: NCCL's ring
(linear in the group) or tree (all-reduce only) model, ``comm.ring_latency_s``.
"""

from __future__ import annotations

import numpy as np

from autoplan.cost import comm, hybrid_shard
from autoplan.cost.arrays import select, zeros_like
from autoplan.cost.context import CostContext
from autoplan.cost.model_states import expert_group, shard_grad_op
from autoplan.cost.recompute import full_recompute_share
from autoplan.layout import LayoutBatch

PARAM_GATHER_BYTES = 2.0  # bf16 parameters gathered (FSDP MixedPrecision param_dtype, Megatron, DeepSpeed)
ZERO3_GATHERS_PER_MICROBATCH = 2.0  # forward and backward (ZeRO Sec. 7.2.2)
SHARD_GRAD_OP_GATHERS_PER_MICROBATCH = 1.0  # forward only: kept unsharded until the backward ends


def zero3_gathers_per_microbatch(ctx: CostContext, b: LayoutBatch, layer_params: np.ndarray,
                                 n_layers: np.ndarray) -> np.ndarray:
    """Parameter all-gathers per layer and micro-batch: forward + backward, plus the recomputed
    forward of the layers under full recompute whose parameters are not kept in between (more
    than ``zero3_reuse_distance_params`` of them: DeepSpeed's stage3_max_reuse_distance)."""
    regather = layer_params > ctx.profile.zero3.reuse_distance_params
    return ZERO3_GATHERS_PER_MICROBATCH + np.where(regather, full_recompute_share(b, n_layers), 0.0)


def engine_all_reduces_grads(ctx: CostContext, b: LayoutBatch) -> np.ndarray:
    """Per layout: the pipeline engine all-reduces the full gradient in ``pp_grad_all_reduce_bytes``
    (pp > 1, ZeRO <= 1, a profile that sets it: DeepSpeed under bf16; module doc)."""
    return (b.pp > 1) & (b.zero <= 1) & (ctx.profile.pipeline.grad_all_reduce_bytes > 0)


def bucket_params(p, group: np.ndarray) -> np.ndarray:
    """Elements per gradient bucket over a data-parallel group of ``group`` ranks:
    max(dp_bucket_params, dp_bucket_params_per_rank·group). Megatron-Core sizes the buckets of
    its dense and expert buffers alike from the dp·cp group (``DistributedDataParallel.__init__``:
    bucket_size = max(40000000, 1000000·dp_cp size) unless ``--ddp-bucket-size`` is given)."""
    return np.maximum(p.data_parallel.dp_bucket_params, p.data_parallel.dp_bucket_params_per_rank * group)


def _collectives(params: np.ndarray, per_collective: float) -> np.ndarray:
    """Collectives of at most ``per_collective`` parameters that move ``params``: at least one
    (inf: one for everything)."""
    return np.maximum(1.0, np.ceil(params / per_collective))


def dp_comm_s(ctx: CostContext, b: LayoutBatch, st: dict, stage_params: np.ndarray,
              expert_params: np.ndarray, n_layers: np.ndarray) -> dict[str, np.ndarray]:
    """Seconds of data-parallel traffic: per step ``grads`` and ``gathers`` (ZeRO 0-2, and
    ZeRO-3 kept unsharded over a pipeline's micro-batches), per micro-batch ``per_micro``
    (ZeRO-3), and ``per_step_floor``: ZeRO-3's first layer gather and last reduce-scatter of a
    step, which no compute can hide (prefetch needs a layer to run behind)."""
    p = ctx.profile
    group, stride = b.dp * b.cp, np.minimum(st["dp"], st["cp"])
    shard = hybrid_shard.shard_group(b.hsdp, group, p)
    link = comm.group_link(ctx, shard, stride)
    layers = np.maximum(n_layers, 1.0)
    bucket = bucket_params(p, shard)
    buckets = _collectives(stage_params, bucket)
    grad_bytes, gather_bytes = stage_params * ctx.grad_reduce_bytes, stage_params * PARAM_GATHER_BYTES
    per_step = (b.zero >= 3) & (b.pp > 1) & (p.zero3.pp_unsharded_bytes > 0)
    grad_op = shard_grad_op(ctx, b)
    per_unit = (b.zero >= 3) | grad_op  # one collective per FSDP unit (a layer)
    # ZeRO-3 over a pipeline gathers and reduces per layer, once per step.
    count = np.where(per_unit, layers, buckets)
    latency = comm.dp_latency(ctx, link)  # (once for the group's several collectives)
    grads = comm.dp_reduce_scatter_s(ctx, link, grad_bytes, count, latency)
    # ZeRO-1/2's parameter gather: per gradient bucket, or in the profile's own gather buckets
    # (param_gather_bucket_params; inf: nanotron's one coalesced all-gather of the stage).
    gather_count = (count if p.data_parallel.param_gather_bucket_params <= 0 else
                    np.where(per_unit, layers, _collectives(stage_params, p.data_parallel.param_gather_bucket_params)))
    gathers = gathers_dense = comm.dp_all_gather_s(ctx, link, gather_bytes, gather_count, latency)
    all_reduce = comm.dp_all_reduce_s(ctx, link, grad_bytes, buckets, latency)
    # The pipeline engine's full all-reduce of the (fp32) gradients under ZeRO <= 1 (module doc).
    pp_all_reduce = engine_all_reduces_grads(ctx, b)
    pp_grads = (comm.dp_all_reduce_s(ctx, link, stage_params * p.pipeline.grad_all_reduce_bytes, buckets, latency)
                if p.pipeline.grad_all_reduce_bytes > 0 else 0.0)  # (never selected when the profile has none)
    if ctx.model.moe is not None:  # expert parameters reduce over the expert-data-parallel group
        edp = expert_group(b, shard)
        elink = comm.group_link(ctx, edp, b.ep * b.etp)
        has = expert_params > 0  # no latency for an empty collective
        ebuckets = _collectives(expert_params, bucket)
        ecount = np.where(per_unit, layers, ebuckets)
        elat = comm.dp_latency(ctx, elink)
        grads = grads + np.where(has, comm.dp_reduce_scatter_s(ctx, elink, expert_params * ctx.grad_reduce_bytes,
                                                               ecount, elat), 0.0)
        gathers = gathers + np.where(has, comm.dp_all_gather_s(ctx, elink, expert_params * PARAM_GATHER_BYTES,
                                                               ecount, elat), 0.0)
        all_reduce = all_reduce + np.where(has, comm.dp_all_reduce_s(
            ctx, elink, expert_params * ctx.grad_reduce_bytes, ebuckets, elat), 0.0)
    zero3 = per_unit & ~per_step  # traffic per micro-batch (ZeRO-3, SHARD_GRAD_OP)
    once = ((b.zero <= 2) & ~grad_op) | per_step  # traffic once per step
    step_grads = select([pp_all_reduce, b.zero == 0, once], [pp_grads, all_reduce, grads], 0.0)
    step_gathers = np.where((b.zero >= 1) & once, gathers, 0.0)
    hybrid = np.count_nonzero(b.hsdp)
    if hybrid or np.count_nonzero(zero3):
        gathers_per_micro = np.where(grad_op, SHARD_GRAD_OP_GATHERS_PER_MICROBATCH,
                                     zero3_gathers_per_microbatch(ctx, b, stage_params / layers, layers))
        per_micro = np.where(zero3, gathers_per_micro * gathers + grads, 0.0)
        floor = np.where(zero3, (gathers + grads) / layers, 0.0)
    else:  # no layout gathers per micro-batch (nor shards hybrid): the wheres' zeros, without the arithmetic
        per_micro = np.zeros(np.broadcast(zero3, gathers, grads, layers).shape)
        floor = per_micro.copy()
    if hybrid:  # (the same result without the arithmetic when no layout shards hybrid)
        extra = hybrid_comm_s(ctx, b, stride, shard, (stage_params, expert_params), buckets, count,
                              gathers_per_micro, gathers_dense)
        step_grads = step_grads + extra["replica_all_reduce"]
        per_micro = np.where(zero3, per_micro + extra["secondary_gathers"], per_micro)
    return {"grads": step_grads, "gathers": step_gathers, "per_micro": per_micro, "per_step_floor": floor,
            "inside_domain": link.inside_domain}


def hybrid_comm_s(ctx: CostContext, b: LayoutBatch, stride: np.ndarray, shard: np.ndarray,
                  params: tuple[np.ndarray, np.ndarray], buckets: np.ndarray, count: np.ndarray,
                  gathers_per_micro: np.ndarray, gathers: np.ndarray) -> dict[str, np.ndarray]:
    """What hybrid sharding adds to the data-parallel traffic (``autoplan.cost.hybrid_shard``).

    ``replica_all_reduce`` (replicate style, per step): AR((P/hsdp + P_e/G_e)·grad_reduce_bytes)
    over the dp·cp/hsdp replicas, ranks hsdp·stride apart (FSDP2 HSDP, Megatron's optimizer
    instances), G_e = max(hsdp·tp/(ep·etp), 1). ``secondary_gathers`` (DeepSpeed hpZ, ZeRO-3, per
    micro-batch): the backward and recomputed gathers come from the secondary partition inside the
    hpZ group instead of over dp·cp: (g − 1)·(AG_hpZ − AG_G), g = gathers per layer and
    micro-batch (ZeRO++ Sec. 3.2); expert parameters stay with the expert-data-parallel group."""
    p, group = ctx.profile, b.dp * b.cp
    on = b.hsdp > 0
    dense, expert = params
    expert_shard = expert_group(b, shard)
    replicas = comm.group_link(ctx, group / shard, stride * shard)
    shard_bytes = (dense / shard + expert / expert_shard) * ctx.grad_reduce_bytes
    all_reduce = np.where(on, comm.dp_all_reduce_s(ctx, replicas, shard_bytes, buckets), 0.0)
    secondary = zeros_like(all_reduce)
    if hybrid_shard.style(p) == "secondary":
        hpz = comm.group_link(ctx, np.where(on, b.hsdp, group), stride)
        local = comm.dp_all_gather_s(ctx, hpz, dense * PARAM_GATHER_BYTES, count)
        secondary = np.where(on, (gathers_per_micro - 1.0) * (local - gathers), 0.0)
    return {"replica_all_reduce": all_reduce, "secondary_gathers": secondary}
