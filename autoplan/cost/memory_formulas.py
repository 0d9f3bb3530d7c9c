"""The formulas of the memory terms of one pipeline stage (``cost.formula``): each an expression
over intermediates that ``cost.stage_memory``'s own building blocks compute, so that the
expression evaluated on them is the column ``mem_<stage>_<term>_bytes``.
"""

from __future__ import annotations

import numpy as np

from autoplan.cost import hybrid_shard
from autoplan.cost.context import CostContext
from autoplan.cost.formula import Formula, Quantity
from autoplan.cost.memory import BF16_BYTES, TRANSIENT_TERMS
from autoplan.cost.model_states import (
    sharded_gradient_transient_bytes,
    shard_divisor,
    state_bytes_per_param_by_term,
    zero3_gathered_bytes,
    zero_shard_groups,
)
from autoplan.cost.offload import move_to_host
from autoplan.cost.optimizer import state_bytes_per_param
from autoplan.cost.recompute import OFFLOAD_STAGING_LAYERS, offloaded_share
from autoplan.cost.shared_terms import stage_in_flight, stage_layer_counts, stage_params
from autoplan.cost.stage_memory import STATE_TERMS, stage_buffer_bytes, stage_layer_bytes, stage_memory
from autoplan.layout import LayoutBatch

Values = dict[str, np.ndarray]

PARAMS = Quantity("params", "params", "non-expert parameters one GPU holds on the stage (×2 under dualpipe)",
                  "shared_terms.params_by_stage")
EXPERT_PARAMS = Quantity("expert_params", "params", "expert parameters one GPU holds on the stage",
                         "shared_terms.params_by_stage")
ON_GPU = Quantity("on_gpu", "1", "0 where offload moves the term to the host, else 1", "offload.move_to_host")


def _shards(stage_from: str) -> tuple[Quantity, Quantity]:
    return (Quantity("shard", "ranks", f"the ZeRO group (dp·cp or dp; hsdp under hybrid sharding) from zero "
                     f"{stage_from} on, else 1", "model_states.zero_shard_groups, shard_divisor"),
            Quantity("expert_shard", "ranks", f"the expert-data-parallel group max(G·tp/(ep·etp), 1) from zero "
                     f"{stage_from} on, else 1", "model_states.expert_group, shard_divisor"))


def _model_state(ctx: CostContext, b: LayoutBatch, stage: str, name: str) -> Values:
    """Parameters, shard divisors, bytes per parameter and the on-GPU factor of one model state."""
    dense, expert = stage_params(ctx, b, stage)
    group, egroup = zero_shard_groups(ctx, b)
    on_gpu = {n: np.ones(len(b)) for n in STATE_TERMS}
    move_to_host(ctx, b, on_gpu, np.zeros(len(b)))  # zeroes the factor of what goes to the host
    out = {"params": dense, "expert_params": expert, "on_gpu": on_gpu[name]}
    if name == "optimizer_states":
        out["state_bytes"], out["expert_state_bytes"] = state_bytes_per_param(ctx, b)
        out["shard"], out["expert_shard"] = shard_divisor(b.zero, 1, group), shard_divisor(b.zero, 1, egroup)
        return out
    per_param, zero_stage = state_bytes_per_param_by_term(ctx, b, group)[name]
    out["bytes_per_param"] = per_param + np.zeros(len(b))
    out["shard"], out["expert_shard"] = shard_divisor(b.zero, zero_stage, group), shard_divisor(b.zero, zero_stage, egroup)
    if name == "weights":
        out["secondary"] = hybrid_shard.secondary_weight_bytes(b.hsdp, b.zero, dense + expert, ctx.profile)
    return out


def _state(name: str, expression: str, bytes_meaning: str, since: str, extra: tuple[Quantity, ...] = ()) -> Formula:
    per_param = () if name == "optimizer_states" else (Quantity("bytes_per_param", "B", bytes_meaning,
                                                                "model_states.state_bytes_per_param_by_term"),)
    return Formula(expression, (*per_param, *extra, PARAMS, EXPERT_PARAMS, *_shards(since), ON_GPU),
                   lambda ctx, b, stage: _model_state(ctx, b, stage, name))


def _activations(ctx: CostContext, b: LayoutBatch, stage: str) -> Values:
    layer = stage_layer_bytes(ctx, b, stage)
    offloading = b.offload_layers > 0
    return {"layer_bytes": layer["per_layer"], "working": layer["working"], "in_flight": stage_in_flight(ctx, b, stage),
            "offloaded": np.where(offloading, offloaded_share(b, stage_layer_counts(ctx, b)[stage]), 0.0),
            "staging": np.where(offloading, OFFLOAD_STAGING_LAYERS, 0.0)}


def _tokens(ctx: CostContext, b: LayoutBatch) -> Values:
    return {"tokens": b.mbs * ctx.training.seq_len / b.cp, "h_div": np.where(b.sp > 0, b.tp, 1.0)}


def _embedding(ctx: CostContext, b: LayoutBatch, stage: str) -> Values:
    return {**_tokens(ctx, b), "hidden": np.full(len(b), float(ctx.model.hidden_size)),
            "element_bytes": np.full(len(b), BF16_BYTES), "on_stage": np.full(len(b), float(stage == "first"))}


def _logits(ctx: CostContext, b: LayoutBatch, stage: str) -> Values:
    on_stage = {"first": (b.pp == 1).astype(float), "middle": np.zeros(len(b)), "last": np.ones(len(b))}[stage]
    heads = 1.0 + (ctx.model.num_mtp_layers if stage == "last" else 0.0)
    return {**_tokens(ctx, b), "vocab": np.full(len(b), float(ctx.model.vocab_size)), "tp": b.tp,
            "bytes_per_logit": np.full(len(b), ctx.profile.activations.logits_bytes_per_vocab),
            "heads": np.full(len(b), heads), "on_stage": on_stage}


def _buffers(ctx: CostContext, b: LayoutBatch, stage: str) -> Values:
    dense, expert = stage_params(ctx, b, stage)
    one_layer = (dense + expert) / np.maximum(stage_layer_counts(ctx, b)[stage], 1.0)
    buffers = stage_buffer_bytes(ctx, b, stage)
    return {"zero3_layers": np.where(b.zero >= 3, zero3_gathered_bytes(ctx.profile, one_layer), 0.0),
            "grad_transient": sharded_gradient_transient_bytes(ctx, b, one_layer),
            "tp_buffer": buffers["tp_buffer"], "moe_dispatch": buffers.get("moe_dispatch", np.zeros(len(b)))}


def _reserve(ctx: CostContext, b: LayoutBatch, stage: str) -> Values:
    terms = stage_memory(ctx, b, stage)
    c = ctx.corrections
    return {"allocator_overhead": np.full(len(b), c.allocator_overhead),
            "transient": sum(terms[name] for name in TRANSIENT_TERMS),
            "memory_reserve_bytes": np.full(len(b), c.memory_reserve_bytes)}


TOKENS = (Quantity("tokens", "tokens", "tokens of one micro-batch on one GPU: mbs·seq_len/cp", "stage_memory"),
          Quantity("h_div", "1", "tp under sequence parallelism, else 1", "stage_memory"))
ON_STAGE = Quantity("on_stage", "1", "1 where the stage holds the buffer, else 0", "stage_memory.buffer_bytes_by_stage")

MEMORY_FORMULAS: dict[str, Formula] = {
    "weights": _state("weights", "on_gpu * (bytes_per_param * (params / shard + expert_params / expert_shard) + secondary)",
                      "the compute copy's bytes (bf16, + FP8 copies under fp8, + zero3_pp_unsharded_bytes·G kept "
                      "unsharded over a pipeline)", "3",
                      (Quantity("secondary", "B", "ZeRO++ hpZ's bf16 secondary partition (DeepSpeed hsdp > 0, zero 3)",
                                "hybrid_shard.secondary_weight_bytes"),)),
    "gradients": _state("gradients", "on_gpu * bytes_per_param * (params / shard + expert_params / expert_shard)",
                        "grad_bytes (2 under grad_reduce_in_bf16; less ddp_bucket_grad_bytes without DDP)",
                        "2 (1 under shard_gradients)"),
    "master_weights": _state("master_weights", "on_gpu * bytes_per_param * (params / shard + expert_params / expert_shard)",
                             "master_bytes, or by master_weights (fp16 2, remainders 2, none 0)", "1"),
    "optimizer_states": _state(
        "optimizer_states", "on_gpu * (state_bytes * params / shard + expert_state_bytes * expert_params / expert_shard)",
        "", "1", (Quantity("state_bytes", "B", "optimizer state bytes per non-expert parameter (adamw: two moments)",
                           "optimizer.state_bytes_per_param"),
                  Quantity("expert_state_bytes", "B", "optimizer state bytes per expert parameter",
                           "optimizer.state_bytes_per_param"))),
    "activations": Formula(
        "layer_bytes * (in_flight * (1 - offloaded) + staging) + working",
        (Quantity("layer_bytes", "B", "one layer's activations of one micro-batch under the layout's recompute, "
                  "mean over the stage's dense and MoE layers", "stage_memory.layer_bytes_by_stage, "
                  "memory.layer_activation_bytes"),
         Quantity("in_flight", "layers", "layer-activations in flight at the stage's peak (schedule warm-up, "
                  "+ pp_extra_layers_per_microbatch)", "shared_terms.in_flight_by_stage, schedule.in_flight_layers"),
         Quantity("offloaded", "1", "share of the stage's layers offloaded to the host (offload_layers)",
                  "recompute.offloaded_share"),
         Quantity("staging", "layers", "layers kept in transfer while offloading (OFFLOAD_STAGING_LAYERS)",
                  "recompute.OFFLOAD_STAGING_LAYERS"),
         Quantity("working", "B", "what recompute re-materialises one layer at a time in backward",
                  "stage_memory.layer_bytes_by_stage")), _activations),
    "embedding_output": Formula(
        "on_stage * tokens * hidden * element_bytes / h_div",
        (ON_STAGE, *TOKENS, Quantity("hidden", "1", "hidden size h", "ModelSpec.hidden_size"),
         Quantity("element_bytes", "B", "bytes of a bf16 element", "memory.BF16_BYTES")), _embedding),
    "logits_and_loss": Formula(
        "on_stage * tokens * vocab / tp * bytes_per_logit * heads",
        (ON_STAGE, TOKENS[0], Quantity("vocab", "1", "vocabulary size V", "ModelSpec.vocab_size"),
         Quantity("tp", "ranks", "tensor-parallel degree", "Layout.tp"),
         Quantity("bytes_per_logit", "B", "logits_bytes_per_vocab: logits and loss buffers per logit",
                  "TrainerProfile.activations.logits_bytes_per_vocab"),
         Quantity("heads", "1", "output heads: 1 + num_mtp_layers on the last stage", "stage_memory.buffer_bytes_by_stage")),
        _logits),
    "communication_buffers": Formula(
        "zero3_layers + grad_transient + tp_buffer + moe_dispatch",
        (Quantity("zero3_layers", "B", "ZeRO-3's gathered layers and unsharded gradient (zero3_prefetch_layers, "
                  "capped by zero3_max_live_params, zero3_grad_bucket_params)", "model_states.zero3_gathered_bytes"),
         Quantity("grad_transient", "B", "one layer's unsharded gradient being reduce-scattered (zero 2, or 1 under "
                  "shard_gradients)", "model_states.sharded_gradient_transient_bytes"),
         Quantity("tp_buffer", "B", "the TP all-gather's full-sequence buffer tokens·h·2 (tp > 1)",
                  "stage_memory.buffer_bytes_by_stage"),
         Quantity("moe_dispatch", "B", "the all-to-all dispatch buffers of the routed tokens",
                  "memory.moe_dispatch_bytes")), _buffers),
    "reserve": Formula(
        "allocator_overhead * transient + memory_reserve_bytes",
        (Quantity("allocator_overhead", "1", "the allocator's fragmentation per transient byte (calibrated)",
                  "Corrections.allocator_overhead"),
         Quantity("transient", "B", "bytes allocated and freed every step: activations, embedding output, logits, "
                  "communication buffers", "memory.TRANSIENT_TERMS"),
         Quantity("memory_reserve_bytes", "B", "CUDA context, NCCL and library workspaces (calibrated)",
                  "Corrections.memory_reserve_bytes")), _reserve),
}
