"""Model states per GPU: the parameters a stage holds and the bytes ZeRO leaves on each GPU.

Rajbhandari et al. 2020 (ZeRO, Sec. 3 and Fig. 1): weights, gradients, fp32 master weights and
optimizer states, with the trainer's bytes per parameter; ZeRO stage z shards optimizer+master
(z >= 1), gradients (z >= 2) and weights (z >= 3) over the data-parallel group (× CP where the
trainer shards there; expert parameters over the expert data-parallel group dp·cp·tp/(ep·etp),
Megatron-Core's expert grid). Also the transient unsharded layers of ZeRO-3 / FSDP.
"""

from __future__ import annotations

import numpy as np

from autoplan.cost import hybrid_shard
from autoplan.cost.arrays import stacked
from autoplan.cost.broadcast import once_per_batch
from autoplan.cost.context import CostContext
from autoplan.cost.optimizer import state_bytes_per_param
from autoplan.layout import PRECISION, LayoutBatch

BF16_BYTES = 2.0
# Bytes per element of an FP8 weight copy as Transformer Engine keeps it, by recipe: the fp8 byte
# plus its share of the scales (128x128 blocks, +4/16384, under blockwise; an E8M0 scale per 32
# elements under MXFP8). transformer_engine/pytorch/tensor/{float8,float8_blockwise,mxfp8}_tensor.py.
FP8_WEIGHT_ELEMENT_BYTES = {"tensorwise": 1.0, "delayed": 1.0, "blockwise": 1.0 + 4.0 / 128**2, "mxfp8": 1.0 + 1.0 / 32,
                            "rowwise": 1.0}  # torchao: one fp32 scale per row of thousands of elements


def params_on_stages(ctx: CostContext, b: LayoutBatch, dense_layers: np.ndarray,
                     moe_layers: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(non-expert, expert) parameters held by one GPU of the first, a middle and the last stage
    (element counts; (3, layouts) arrays, as ``dense_layers`` and ``moe_layers``): the first
    stage also holds the embedding, the last the head, an interior stage its layers only."""
    pc = ctx.params
    per_dense = pc.attention_per_layer / b.tp + pc.norm_per_layer + pc.dense_mlp_per_layer / b.tp
    per_moe_dense_part = (pc.attention_per_layer / b.tp + pc.norm_per_layer + pc.router_per_layer
                          + pc.shared_expert_per_layer / b.tp)
    dense = dense_layers * per_dense + moe_layers * per_moe_dense_part
    expert = moe_layers * pc.expert_per_layer / (b.ep * b.etp)
    # With pp = 1 the one stage holds both ends: embedding, final norm and LM head.
    single = b.pp == 1
    embedding = pc.embedding / b.tp
    head = pc.final_norm + np.where((b.pp > 1) & (pc.lm_head == 0), pc.lm_head_matmul, pc.lm_head) / b.tp
    first = dense[0] + embedding + np.where(single, head, 0.0)
    # the last stage also holds the MTP projections and norms (its blocks are in the layer counts)
    mtp = pc.num_mtp_layers * pc.mtp_projection_per_depth / b.tp
    last = dense[2] + head + np.where(single, embedding, 0.0) + mtp
    return stacked(first, dense[1], last), expert


def shard_divisor(zero: np.ndarray, stage: int, group: np.ndarray) -> np.ndarray:
    """Divisor for a model state that ZeRO shards from ``stage`` on."""
    return np.where(zero >= stage, group, 1.0)


def expert_group(b: LayoutBatch, group: np.ndarray) -> np.ndarray:
    """The expert-data-parallel group that goes with a data-parallel group of ``group`` ranks:
    group·tp/(ep·etp), at least 1 (Megatron-Core's expert grid)."""
    return np.maximum(group * b.tp / (b.ep * b.etp), 1.0)


def shard_grad_op(ctx: CostContext, b: LayoutBatch) -> np.ndarray:
    """Per layout: ZeRO-2 run as FSDP1's SHARD_GRAD_OP (the profile's ``zero2_is_shard_grad_op``)."""
    return (b.zero == 2) & ctx.profile.data_parallel.zero2_is_shard_grad_op


@once_per_batch
def zero_shard_groups(ctx: CostContext, b: LayoutBatch) -> tuple[np.ndarray, np.ndarray]:
    """(non-expert, expert) group sizes that ZeRO shards model states over.

    Non-expert states shard over dp, or dp·cp where the trainer's optimizer spans the context-
    parallel ranks too (``zero_shards_over_cp``: Megatron's distributed optimizer uses the
    data-parallel group with CP, ``megatron/core/parallel_state.py``); expert states over the
    expert-data-parallel group dp·(cp)·tp/(ep·etp) of Megatron-Core's expert grid. Under hybrid
    sharding (``Layout.hsdp``) the non-expert group is the shard group of hsdp ranks where the
    trainer replicates across them (``hybrid_shard.shard_group``); the expert group shrinks with it.
    """
    dp_group = b.dp * (b.cp if ctx.profile.model_states.zero_shards_over_cp else 1.0)
    dp_group = hybrid_shard.shard_group(b.hsdp, dp_group, ctx.profile)
    return dp_group, expert_group(b, dp_group)


@once_per_batch  # (owned_split runs three times per evaluate: the states, the offload, the step)
def shard_divisors(ctx: CostContext, b: LayoutBatch, stage: int) -> tuple[np.ndarray, np.ndarray]:
    """(non-expert, expert) ``shard_divisor`` of a model state that ZeRO shards from ``stage`` on,
    over the groups of ``zero_shard_groups``."""
    dp_group, expert_group = zero_shard_groups(ctx, b)
    return shard_divisor(b.zero, stage, dp_group), shard_divisor(b.zero, stage, expert_group)


def owned_split(ctx: CostContext, b: LayoutBatch, dense_params: np.ndarray,
                expert_params: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(non-expert, expert) parameters whose optimizer state one GPU holds (and updates):
    ZeRO >= 1 shards them."""
    dense_divisor, expert_divisor = shard_divisors(ctx, b, 1)
    return dense_params / dense_divisor, expert_params / expert_divisor


def owned_params(ctx: CostContext, b: LayoutBatch, dense_params: np.ndarray,
                 expert_params: np.ndarray) -> np.ndarray:
    """Parameters whose optimizer state one GPU holds (and updates), both kinds together."""
    dense, expert = owned_split(ctx, b, dense_params, expert_params)
    return dense + expert


def weighted(dense: np.ndarray, expert: np.ndarray, per_dense: np.ndarray, per_expert: np.ndarray) -> np.ndarray:
    """dense·per_dense + expert·per_expert, written (dense + expert)·per when both rates agree
    (the form the AdamW-only model always used, so its predictions stay bit-identical)."""
    return np.where(per_dense == per_expert, (dense + expert) * per_dense, dense * per_dense + expert * per_expert)


@once_per_batch
def weight_bytes_per_param(ctx: CostContext, b: LayoutBatch) -> np.ndarray:
    """Bytes per parameter of the compute weights: bf16, plus the FP8 copies under fp8.

    Under fp8 Transformer Engine keeps ``fp8_weight_extra_bytes`` per parameter of FP8 data (the
    row-wise copy and its transpose or column-wise copy, transformer_engine/pytorch/module/base.py
    ``get_weight_workspace``), scaled by the recipe's FP8_WEIGHT_ELEMENT_BYTES. With
    ``fp8_param_gather`` (Megatron ``--fp8-param-gather``: TE ``fp8_model_init``, primary weights
    stored as FP8 tensors, megatron/core/fp8_utils.py) the bf16 compute copy is gone.
    """
    p, t = ctx.profile, ctx.training
    fp8 = b.precision == PRECISION["fp8"]
    fp8_copies = p.model_states.fp8_weight_extra_bytes * FP8_WEIGHT_ELEMENT_BYTES[t.fp8_recipe]
    bf16_copy = np.where(fp8 & t.fp8_param_gather, 0.0, p.model_states.weight_bytes)
    return bf16_copy + np.where(fp8, fp8_copies, 0.0)


def gradient_shard_stage(ctx: CostContext) -> int:
    """The ZeRO stage from which gradients are sharded: 2 (ZeRO paper, Fig. 1), or 1 where the
    setup's ``shard_gradients`` says the trainer's data parallelism shards them with the
    optimizer states (Llama 3's FSDP-style DP, arXiv 2407.21783 Sec. 3.3.2)."""
    return 1 if ctx.training.shard_gradients else 2


def sharded_gradient_transient_bytes(ctx: CostContext, b: LayoutBatch, one_layer_params: np.ndarray) -> np.ndarray:
    """The unsharded gradient of the layer being reduce-scattered, where gradients are sharded
    below ZeRO-3 (bytes per GPU): zero 2, or zero 1 under ``shard_gradients``.

    Sharded gradients are reduce-scattered layer by layer in every backward (FSDP's post-backward
    hook, torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py ``post_backward``; DeepSpeed
    ZeRO-2 ``reduce_bucket_size``): the layer's bf16 gradient and its copy in the reduce dtype
    (``grad_reduce_bytes``; Llama 3 reduce-scatters in fp32, Sec. 3.3.2 "Numerical stability").
    One layer; ZeRO-3's own buffers are ``zero3_gathered_bytes``.
    """
    sharded = (b.zero >= gradient_shard_stage(ctx)) & (b.zero < 3)
    return np.where(sharded, (BF16_BYTES + ctx.grad_reduce_bytes) * one_layer_params, 0.0)


def ddp_free_grad_bytes(ctx: CostContext, b: LayoutBatch) -> np.ndarray:
    """Bytes per parameter of ``grad_bytes`` absent where the trainer runs without DDP (dp·cp = 1).

    nanotron wraps the model in torch DDP only when dp·cp > 1 (src/nanotron/trainer.py,
    ``make_ddp``); DDP (gradient_as_bucket_view off) keeps bf16 bucket buffers as large as the
    parameters. The bf16 gradients themselves do not persist: FP32GradientAccumulator.backward
    (src/nanotron/optim/gradient_accumulator.py) adds each into the fp32 buffer and sets
    ``half_param.grad = None`` after every micro-batch's backward, before the next forward. So
    without DDP only the fp32 accumulator stays: the profile's ``ddp_bucket_grad_bytes`` less.
    """
    return np.where(b.dp * b.cp > 1, 0.0, ctx.profile.model_states.ddp_bucket_grad_bytes)


def state_bytes_per_param_by_term(ctx: CostContext, b: LayoutBatch,
                                  dp_group: np.ndarray) -> dict[str, tuple[np.ndarray, int]]:
    """(bytes per parameter, ZeRO stage that shards it) of the weights, gradients and master
    weights (ZeRO paper, Fig. 1), with the trainer's precisions."""
    p = ctx.profile
    # ZeRO-3 with a pipeline: some trainers keep the compute copy and its gradient unsharded
    # (torchtitan: reshard_after_forward=False when PP is on); written as bytes that the
    # ZeRO-3 divisor below cancels. With nothing to shard over, FSDP is not applied at all.
    keeps = (b.zero >= 3) & (b.pp > 1) & (dp_group > 1)
    weight_bytes = weight_bytes_per_param(ctx, b) + np.where(keeps, p.zero3.pp_unsharded_bytes * dp_group, 0.0)
    # ZeRO-2 as FSDP1's SHARD_GRAD_OP: every unit's bf16 compute copy (MixedPrecision param_dtype)
    # stays gathered from its forward to the end of its backward, so at the backward's start the
    # whole stage is unsharded (torch/distributed/fsdp/api.py ShardingStrategy.SHARD_GRAD_OP; the
    # profile's weight_bytes counts only the sharded fp32 flat parameter, the master).
    weight_bytes = weight_bytes + np.where(shard_grad_op(ctx, b), BF16_BYTES, 0.0)
    # Megatron --grad-reduce-in-bf16: the main_grad buffer takes the parameters' dtype
    # (megatron/core/distributed/distributed_data_parallel.py, grad_dtype of the param_and_grad_buffer).
    grad_bytes = BF16_BYTES if ctx.training.grad_reduce_in_bf16 else p.model_states.grad_bytes - ddp_free_grad_bytes(ctx, b)
    return {"weights": (weight_bytes, 3), "gradients": (grad_bytes, gradient_shard_stage(ctx)),
            "master_weights": (ctx.master_bytes, 1)}


def model_state_bytes(ctx: CostContext, b: LayoutBatch, dense_params: np.ndarray,
                      expert_params: np.ndarray) -> dict[str, np.ndarray]:
    """Weights, gradients, master weights and optimizer states per GPU (ZeRO paper, Fig. 1)."""
    p = ctx.profile
    dp_group, expert_group = zero_shard_groups(ctx, b)
    out = {}
    for name, (per_param, stage) in state_bytes_per_param_by_term(ctx, b, dp_group).items():
        out[name] = per_param * (dense_params / shard_divisor(b.zero, stage, dp_group)
                                 + expert_params / shard_divisor(b.zero, stage, expert_group))
    # The optimizer's state (autoplan.cost.optimizer), per non-expert and expert parameter.
    dense_state, expert_state = state_bytes_per_param(ctx, b)
    dense_owned, expert_owned = owned_split(ctx, b, dense_params, expert_params)
    out["optimizer_states"] = weighted(dense_owned, expert_owned, dense_state, expert_state)
    if np.count_nonzero(b.hsdp):  # DeepSpeed ZeRO++ hpZ: a secondary bf16 partition over the hpZ group
        out["weights"] = out["weights"] + hybrid_shard.secondary_weight_bytes(
            b.hsdp, b.zero, dense_params + expert_params, p)
    return out


def zero3_gathered_bytes(p, one_layer_params: np.ndarray) -> np.ndarray:
    """Unsharded bf16 weights and gradients that ZeRO-3 / FSDP holds at its peak (bytes per GPU).

    FSDP2 (torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py, ``FSDPParamGroup``) gathers
    whole layers: the current one and the prefetched next one (``zero3_prefetch_layers``), with
    the current layer's unsharded gradient before its reduce-scatter. DeepSpeed caps both
    (deepspeed/runtime/zero/partitioned_param_coordinator.py ``fetch_sub_module``: gathered
    parameters stay below ``stage3_max_live_parameters``, default 1e9 elements; gradients are
    reduce-scattered through ``reduce_bucket_size``, default 5e8 elements, deepspeed/runtime/zero/
    stage3.py ``DeepSpeedZeroOptimizer_Stage3``): ``zero3_max_live_params`` and
    ``zero3_grad_bucket_params``, infinite where the trainer has no such cap.
    """
    layers = p.zero3.prefetch_layers * one_layer_params
    return BF16_BYTES * (np.minimum(layers, p.zero3.max_live_params)
                         + np.minimum(layers, p.zero3.grad_bucket_params))
