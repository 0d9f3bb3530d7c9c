"""Per-GPU memory of a batch of layouts, for the first, a middle (interior) and the last pipeline stage.

Terms (bytes per GPU), each a numpy array over layouts:

* model states (Rajbhandari et al. 2020, ZeRO, Sec. 3 and Fig. 1): weights, gradients, fp32
  master weights and optimizer states, with the trainer's bytes per parameter; ZeRO stage z
  shards optimizer+master (z >= 1), gradients (z >= 2) and weights (z >= 3) over the
  data-parallel group (× CP where the trainer shards there; expert parameters over the expert
  data-parallel group dp·cp·tp/(ep·etp), Megatron-Core's expert grid).
* activations: per-layer bytes from the trainer profile's coefficients (Korthikanti et al. 2022,
  Table 2 generalised to GQA/SwiGLU/MoE), times the layer-activations in flight on the stage
  (``stages.in_flight_layers``), under none / selective / full recompute.
* logits and loss on the last stage (vocab-parallel over TP), buffers (ZeRO-3 gathered layers,
  TP all-gather), and the calibrated reserve and allocator overhead.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from autoplan.cost.arrays import zeros_like
from autoplan.cost.broadcast import per_group
from autoplan.cost.context import CostContext
from autoplan.cost.mlp_coefficients import mlp_coefficients, without_dropout_mask
from autoplan.cost.recompute import (
    NORMS_PER_LAYER,
    module_dropped_bytes_per_token,
)
from autoplan.layout import PRECISION, LayoutBatch
from autoplan.profiles import ActivationCoefficients
from autoplan.recompute_modules import module_bit

BF16_BYTES = 2.0

# GPT-style layers (GELU MLP, LayerNorm, dropout; Korthikanti et al. 2022 eq. 1: 34sbh + 5as²b)
# under eager attention: attention 11sbh + 5as²b + LayerNorm input 2sbh; MLP 19sbh + LayerNorm
# input 2sbh; plus CUDA's fp32 LayerNorm mean/rstd (8 bytes per token per layer, which the paper
# leaves out). Megatron of 2021-22 (SC'21, Korthikanti) ran this non-fused softmax.
GPT_ATTENTION_EAGER = {
    "none": ActivationCoefficients(h=5, q=4, kv=4, s2=5, tok=4),
    "selective": ActivationCoefficients(h=5, q=4, kv=4, tok=4),
}
# The same layer under fused/flash attention (Transformer Engine DotProductAttention ->
# FusedAttention / FlashAttention, transformer_engine/pytorch/attention/dot_product_attention/
# backends.py, FusedAttnFunc.forward saves q, k, v, out and the softmax statistics): the
# softmax output, its dropout mask and dropout output (5as² bytes) are never stored; the kernel
# keeps the fp32 log-sum-exp per head (4 bytes per head per token) and draws the dropout mask
# again from the RNG state in backward.
GPT_ATTENTION_FLASH = {mode: ActivationCoefficients(h=5, q=4, kv=4, lse=4, tok=4)
                       for mode in ("none", "selective")}
# Eager attention in a family without attention dropout (Llama-style) saves the bf16 softmax
# output a·s² per sequence for the score backward (megatron/core/transformer/
# dot_product_attention.py, DotProductAttention.forward: FusedScaleMaskSoftmax then bmm), and
# no log-sum-exp.
EAGER_SOFTMAX_BYTES = 2.0


def _with_mha_copies(ctx: CostContext, c: ActivationCoefficients) -> ActivationCoefficients:
    """``c`` plus the profile's ``mha_kv_copy_bytes`` per KV element where the model has as many
    KV heads as query heads. nanotron's multi-head branch (src/nanotron/models/llama.py,
    CausalSelfAttention.forward) permutes q|k|v into one contiguous copy whose q part the rotary
    kernel rotates in place and flash-attn saves, so the copy's k|v part stays alive, and builds
    a second k|v copy (torch.cat, then permute(...).contiguous()) that flash-attn saves: 4 bytes
    per KV element beyond the GQA branch's separate q, k, v copies."""
    extra = ctx.profile.activations.mha_kv_copy_bytes
    if extra == 0.0 or ctx.model.num_kv_heads != ctx.model.num_attention_heads:
        return c
    return dataclasses.replace(c, kv=c.kv + extra)


def attention_coefficients(ctx: CostContext, mode: str) -> ActivationCoefficients:
    """Attention-block coefficients for recompute ``mode`` under the setup's attention kernel.

    ``training.attention_kernel == 'flash'`` (the default): the profile's coefficients (every trainer
    profile describes flash/fused attention), GPT_ATTENTION_FLASH for GELU models (its residual
    dropout mask as the profile's ``gpt_residual_dropout_mask_bytes`` says). ``'eager'``:
    the s² terms come back, 5·a·s² bytes per sequence for GELU/dropout models (Korthikanti eq. 1)
    and EAGER_SOFTMAX_BYTES·a·s² for the others, and selective recompute drops them again.
    """
    eager = ctx.training.attention_kernel == "eager"
    if ctx.model.activation == "gelu":
        return without_dropout_mask(ctx, (GPT_ATTENTION_EAGER if eager else GPT_ATTENTION_FLASH)[mode])
    c = ctx.profile.activations.attention[mode]
    if not eager:
        return _with_mha_copies(ctx, c)
    return dataclasses.replace(c, lse=0.0, s2=EAGER_SOFTMAX_BYTES if mode == "none" else 0.0)


# Bytes per element of an FP8 tensor as Transformer Engine keeps it, by recipe (specs.training.
# FP8_RECIPES): the fp8 byte plus its share of the scales. Activations: per-tensor scaling has
# one scale per tensor; Float8BlockScaling an fp32 scale per 1x128 block (+4/128); MXFP8 an E8M0
# scale per 32 elements (+1/32). (Weights: cost.model_states.)
# (transformer_engine/pytorch/tensor/{float8,float8_blockwise,mxfp8}_tensor.py, the quantizers.)
FP8_ACTIVATION_ELEMENT_BYTES = {"tensorwise": 1.0, "delayed": 1.0, "blockwise": 1.0 + 4.0 / 128, "mxfp8": 1.0 + 1.0 / 32,
                                "rowwise": 1.0}  # one fp32 scale per row of h or more elements
# Linear-layer inputs per token (elements, in the profile's coefficient form) that a TE layer
# saves for backward: the LayerNorm output into QKV (h) and into FC1 (h), the attention output
# into the projection (q), the activation output into FC2 (f); in MoE layers the routed tokens
# into the expert FC1 (k·h) and the expert activation output into FC2 (k·f_e).
TE_LINEAR_INPUTS_ATTENTION = ActivationCoefficients(h=1, q=1)
TE_LINEAR_INPUTS_MLP = ActivationCoefficients(h=1, f=1, moe_kh=1, moe_kf=1)


def _block_bytes_per_token(c: ActivationCoefficients, ctx: CostContext, b: LayoutBatch,
                           ffn: float, h_div: np.ndarray | None = None) -> np.ndarray:
    """Bytes per token of one block (attention or MLP): the profile's linear form
    h·H/h_div + (q·Q + kv·KV + f·F + lse·a)/tp + tok/h_div + s2·a·s/(tp·cp), h_div = tp under SP
    (else 1; given by a caller that has it). The tok and s2 terms are added only where their
    coefficient is not 0 (adding 0 changes no value)."""
    m = ctx.model
    h_div = np.where(b.sp > 0, b.tp, 1.0) if h_div is None else h_div
    heads = float(m.num_attention_heads)
    out = (c.h * m.hidden_size / h_div
           + (c.q * m.q_size + c.kv * m.kv_size + c.f * ffn + c.lse * heads) / b.tp)
    if c.tok:
        out = out + c.tok / h_div
    if c.s2:
        out = out + c.s2 * heads * ctx.training.seq_len / (b.tp * b.cp)
    return out


# Megatron-Core's all-to-all dispatcher holds two copies of the routed tokens (k·T·h bf16 each)
# while a MoE layer dispatches or combines: the permuted send buffer and the received buffer
# (megatron/core/transformer/moe/token_dispatcher.py, MoEAlltoAllTokenDispatcher.token_dispatch
# and token_combine, after moe_utils.permute); with ep = 1 only the permutation copy.
MOE_DISPATCH_COPIES = 2.0


def routed_token_factor(ctx: CostContext) -> float:
    """Routed-token slots per token and top-k choice that the expert buffers hold.

    Dropless (``moe_capacity_factor`` None, Megatron's default): exactly k·T routed tokens.
    With a capacity factor c and padding to capacity (Megatron ``--moe-expert-capacity-factor``
    with ``--moe-pad-expert-input-to-capacity``; megatron/core/transformer/moe/moe_utils.py
    ``topk_softmax_with_capacity``), every expert holds c·k·T/E slots: c·k·T in all.
    """
    factor = ctx.training.moe_capacity_factor
    return 1.0 if factor is None else float(factor)


def _moe_bytes_per_token(c: ActivationCoefficients, ctx: CostContext, b: LayoutBatch) -> np.ndarray:
    """Routed-expert terms of a MoE block per token (actmem README, Mixtral grouped_mm fit):
    routed-token buffers at the top-k fan-out (moe_kh·k·h expert inputs, moe_kf·k·f_e expert
    FC1/activation outputs, times ``routed_token_factor``), router logits and probabilities
    (moe_e·E) and per-choice indices and weights (moe_k·k)."""
    moe = ctx.model.moe
    if moe is None:
        return zeros_like(b.tp)
    k, h_div = float(moe.num_experts_per_token), np.where(b.sp > 0, b.tp, 1.0)
    routed = routed_token_factor(ctx)
    # Tokens stay sharded over TP·SP into the dispatcher (Megatron-Core token dispatcher), so
    # per-token terms divide by h_div; ETP shards the expert FFN width.
    return (routed * (c.moe_kh * k * ctx.model.hidden_size + c.moe_kf * k * moe.expert_ffn_hidden_size / b.etp)
            + c.moe_e * moe.num_experts + c.moe_k * k + c.moe_tok) / h_div


def moe_dispatch_bytes(ctx: CostContext, b: LayoutBatch, tokens: np.ndarray, moe_layers: np.ndarray) -> np.ndarray:
    """Transient all-to-all buffers of one MoE layer on a stage that has MoE layers (bytes):
    MOE_DISPATCH_COPIES (1 when ep = 1) · routed_token_factor · k · tokens/h_div · h · BF16_BYTES."""
    moe = ctx.model.moe
    if moe is None:
        return zeros_like(b.tp)
    h_div = np.where(b.sp > 0, b.tp, 1.0)
    copies = np.where(b.ep > 1, MOE_DISPATCH_COPIES, 1.0)
    routed = routed_token_factor(ctx) * moe.num_experts_per_token * tokens / h_div
    return np.where(moe_layers > 0, copies * routed * ctx.model.hidden_size * BF16_BYTES, 0.0)


def _fp8_input_saving(ctx: CostContext, b: LayoutBatch) -> float:
    """Bytes saved per linear-input element when the layer runs in FP8 (0 where it does not).

    Transformer Engine quantizes each GEMM input once and, after the forward GEMM, keeps one usage
    of it for the weight-gradient GEMM (transformer_engine/pytorch/module/linear.py,
    ``_Linear.forward``: "Discard row-wise data since it is not needed in backward pass";
    layernorm_linear.py and layernorm_mlp.py alike): FP8_ACTIVATION_ELEMENT_BYTES instead of
    BF16_BYTES. Profiles without ``fp8_saves_quantized_inputs`` keep bf16 inputs under fp8.
    """
    if not ctx.profile.activations.fp8_saves_quantized_inputs:
        return zeros_like(b.tp)
    per_element = BF16_BYTES - FP8_ACTIVATION_ELEMENT_BYTES[ctx.training.fp8_recipe]
    return np.where(b.precision == PRECISION["fp8"], per_element, 0.0)


@per_group  # once per distinct (tp, sp, cp, mbs, precision, ...): cost.broadcast
def layer_activation_bytes(ctx: CostContext, b: LayoutBatch, mode: str) -> tuple[np.ndarray, np.ndarray]:
    """(dense layer, MoE layer) activation bytes for one micro-batch with recompute ``mode``.

    ``mode`` is 'none' or 'selective'; full recompute is handled by the caller.
    """
    m = ctx.model
    att = attention_coefficients(ctx, mode)
    mlp = mlp_coefficients(ctx, mode)
    tokens = b.mbs * ctx.training.seq_len / b.cp
    h_div = np.where(b.sp > 0, b.tp, 1.0)
    attention = _block_bytes_per_token(att, ctx, b, 0.0, h_div)
    dense = attention + _block_bytes_per_token(mlp, ctx, b, float(m.ffn_hidden_size), h_div)
    moe = m.moe
    shared_ffn = 0.0 if moe is None else float(moe.num_shared_experts * moe.shared_expert_ffn_hidden_size)
    moe_layer = attention + _block_bytes_per_token(mlp, ctx, b, shared_ffn, h_div)
    if moe is not None:  # (a dense model's routed terms are 0: nothing to add)
        moe_layer = moe_layer + _moe_bytes_per_token(mlp, ctx, b)
    fp8 = _fp8_input_saving(ctx, b)
    if np.count_nonzero(fp8):  # (no layout saves FP8 inputs: the same result, 0 times finite bytes, without the arithmetic)
        attention_inputs = _block_bytes_per_token(TE_LINEAR_INPUTS_ATTENTION, ctx, b, 0.0, h_div)
        dense = dense - fp8 * (attention_inputs + _block_bytes_per_token(TE_LINEAR_INPUTS_MLP, ctx, b,
                                                                         float(m.ffn_hidden_size), h_div))
        moe_layer = moe_layer - fp8 * (attention_inputs
                                       + _block_bytes_per_token(TE_LINEAR_INPUTS_MLP, ctx, b, shared_ffn, h_div)
                                       + _moe_bytes_per_token(TE_LINEAR_INPUTS_MLP, ctx, b))
    # The run's norm kernel (profile norm_saving_bytes_per_h): two norms a layer, sequence-sharded
    # under SP; without recompute only (torchtitan's selective policy recomputes the norms, so its
    # selective coefficients hold no norm copies). (A saving of 0 subtracts nothing: skipped.)
    saving = ctx.profile.activations.norm_saving_bytes_per_h if mode == "none" else 0.0
    if not saving:
        return tokens * dense, tokens * moe_layer
    norms = NORMS_PER_LAYER * saving * m.hidden_size / h_div
    return tokens * (dense - norms), tokens * (moe_layer - norms)


def selective_module_bytes(ctx: CostContext, b: LayoutBatch,
                           acts: dict[str, tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """(dense layer, MoE layer) activation bytes per micro-batch under selective recompute: the
    profile's own selective set when ``recompute_modules`` is empty, else 'none' less what the
    named modules drop (``recompute.module_dropped_bytes_per_token``; ``core_attn`` drops the
    profile's none-minus-selective difference), never below the layer input full recompute keeps."""
    none, sel = acts["none"], acts["selective"]
    if not np.count_nonzero(b.recompute_modules):  # no layout names modules: the profile's own set, faster
        return sel
    h_div = np.where(b.sp > 0, b.tp, 1.0)
    tokens = b.mbs * ctx.training.seq_len / b.cp
    floor = tokens * ctx.profile.recompute.full_recompute_input_bytes_per_h * ctx.model.hidden_size / h_div
    core = module_bit(b.recompute_modules, "core_attn")
    out = []
    for i, dropped in enumerate(module_dropped_bytes_per_token(ctx, b)):
        named = np.maximum(none[i] - tokens * dropped - core * (none[i] - sel[i]), np.minimum(floor, none[i]))
        out.append(np.where(b.recompute_modules > 0, named, sel[i]))
    return out[0], out[1]


# The terms allocated and freed within every step (the caching allocator's churn). The model
# states are allocated once, at start-up or at the first optimizer step, in a few large
# exact-size blocks (Megatron-Core's contiguous param and grad buffers, _ParamAndGradBuffer;
# nanotron's FP32GradientAccumulator buffer; the optimizer's per-parameter states) and then reused.
TRANSIENT_TERMS = ("activations", "embedding_output", "logits_and_loss", "communication_buffers")


def transient_bytes(terms: dict[str, np.ndarray]) -> np.ndarray:
    """Bytes of a stage that the trainer allocates and frees every step: what the allocator's
    fragmentation (``Corrections.allocator_overhead``) scales with. PyTorch's caching allocator
    splits cached segments to serve requests of other sizes and keeps the remainders
    (c10/cuda/CUDACachingAllocator.cpp: block splitting, ``max_split_size``), so reserved memory
    runs ahead of allocated memory by a share of the varying allocations, not of the long-lived
    ones allocated once in blocks of their own size."""
    return sum(terms[name] for name in TRANSIENT_TERMS)


MEMORY_TERMS = ("weights", "gradients", "master_weights", "optimizer_states", "activations",
                "embedding_output", "logits_and_loss", "communication_buffers", "reserve")
