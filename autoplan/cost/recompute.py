"""Recompute and offload as production runs them, vectorised over layouts.

Three layout knobs (``autoplan.layout.Layout``), all from Megatron-Core core_v0.15.3:

* full recompute of N layers per (virtual) stage (``recompute_layers``; ``--recompute-method
  block --recompute-num-layers N``, ``TransformerBlock._checkpointed_forward``: the first N
  layers of each model chunk keep only their input, the others keep everything);
* selective recompute of named modules (``recompute_modules``; ``--recompute-modules``,
  ``transformer_config.py``): each module drops what it saved for backward and runs its forward
  again in backward;
* activation offload of N layers (``offload_layers``; ``cpu_offloading_num_layers``, run by
  Transformer Engine's ``AsyncDoubleBufferGroupOffloadHandler`` in
  ``transformer_engine/pytorch/cpu_offload.py``: a layer's saved tensors go to host memory while
  the next layer computes and come back one layer ahead in backward, so one layer's activations
  stay on the GPU as the staging buffer).

Bytes are per token of one layer (bf16 activations, 2 bytes), following the tensors the
Megatron profile lists (``autoplan/profiles/megatron.yaml``): TE's LayerNormLinear saves its
normalised output (2h), the MLP's fc1 output and SwiGLU output (4f + 2f).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from autoplan.cost.arrays import zeros_like
from autoplan.cost.context import CostContext
from autoplan.cost.host_link import host_link_bytes_per_s
from autoplan.cost.mlp_coefficients import mlp_coefficients
from autoplan.layout import LayoutBatch
from autoplan.recompute_modules import module_bit

BF16_BYTES = 2.0
NORMS_PER_LAYER = 2.0  # input_layernorm and pre_mlp_layernorm
# A norm reads its input and writes its output (bf16): 2 + 2 bytes per element, memory bound.
NORM_HBM_BYTES_PER_ELEMENT = 4.0
# SwiGLU reads fc1's output (2 halves, 4 bytes per element of f) and writes 2 bytes per element.
SWIGLU_HBM_BYTES_PER_ELEMENT = 6.0
OFFLOAD_STAGING_LAYERS = 1.0  # TE's double buffer: the layer in transfer stays on the GPU


def full_recompute_share(b: LayoutBatch, layers: np.ndarray | Callable[[], np.ndarray]) -> np.ndarray:
    """Share of a stage's ``layers`` under full recompute (0 unless recompute = full).

    recompute_layers = 0: every layer (``--recompute-method uniform --recompute-num-layers 1``);
    N > 0: the first N of each of the vpp model chunks, min(N·vpp, L_stage)/L_stage
    (``--recompute-method block``). ``layers`` may be a function that gives them, called only
    where some layout sets recompute_layers (a grouped formula then reads no stage knob).
    """
    full = (b.recompute == 2).astype(np.float64)
    if not np.count_nonzero(b.recompute_layers):  # every full recompute covers every layer: the same result, faster
        return full
    n = np.maximum(layers() if callable(layers) else layers, 1.0)
    block = np.minimum(b.recompute_layers * b.vpp, n) / n
    return full * np.where(b.recompute_layers > 0, block, 1.0)


def _h_div(b: LayoutBatch) -> np.ndarray:
    return np.where(b.sp > 0, b.tp, 1.0)


def _mla_up_bytes_per_token(ctx: CostContext, b: LayoutBatch) -> np.ndarray:
    """Up-projected q, k (nope + rope) and v of MLA in bf16, sharded over TP."""
    mla, heads = ctx.model.mla, float(ctx.model.num_attention_heads)
    if mla is None:
        return zeros_like(b.tp)
    qk = mla.qk_nope_head_dim + mla.qk_rope_head_dim
    return BF16_BYTES * heads * (2.0 * qk + mla.v_head_dim) / b.tp


def module_dropped_bytes_per_token(ctx: CostContext, b: LayoutBatch) -> tuple[np.ndarray, np.ndarray]:
    """(dense layer, MoE layer) bytes per token that recomputing ``b.recompute_modules`` drops,
    ``core_attn`` aside (the caller takes the profile's none-minus-selective difference, what
    Megatron's default module drops). layernorm: the two norms' outputs, 2·2h/(tp if sp); mlp (dense layers): the
    MLP's width terms f·F/tp and its norm output 2h; moe (MoE layers): the routed-expert terms,
    the shared experts' f·F_s/tp and the norm output; shared_experts: f·F_s/tp; moe_act: the
    experts' SwiGLU output 2·k·F_e/(etp·(tp if sp)); mla_up_proj: q, k, v after the up-projection.
    """
    m, c = ctx.model, mlp_coefficients(ctx, "none")
    h_div, bit = _h_div(b), (lambda name: module_bit(b.recompute_modules, name))
    norm_out = BF16_BYTES * m.hidden_size / h_div
    layernorm = bit("layernorm") * NORMS_PER_LAYER * norm_out
    mla = bit("mla_up_proj") * _mla_up_bytes_per_token(ctx, b)
    common = layernorm + mla
    dense = common + bit("mlp") * (c.f * m.ffn_hidden_size / b.tp + norm_out)
    moe = m.moe
    if moe is None:
        return dense, dense
    k, shared_ffn = float(moe.num_experts_per_token), float(moe.num_shared_experts * moe.shared_expert_ffn_hidden_size)
    shared = c.f * shared_ffn / b.tp
    routed = (c.moe_kh * k * m.hidden_size + c.moe_kf * k * moe.expert_ffn_hidden_size / b.etp
              + c.moe_e * moe.num_experts + c.moe_k * k + c.moe_tok) / h_div
    moe_act = BF16_BYTES * k * moe.expert_ffn_hidden_size / (b.etp * h_div)
    moe_layer = (common + bit("moe") * (routed + shared + norm_out)
                 + np.maximum(bit("shared_experts") - bit("moe"), 0.0) * shared
                 + np.maximum(bit("moe_act") - bit("moe"), 0.0) * moe_act)
    return dense, moe_layer


def _matmul_shares(ctx: CostContext) -> dict[str, tuple[float, float]]:
    """(dense layer, MoE layer) share of the layer's forward matmul FLOPs by module."""
    pc, mla = ctx.params, ctx.model.mla
    routed = pc.expert_per_layer * pc.num_experts_per_token / max(pc.num_experts, 1)
    dense_total = pc.attention_per_layer + pc.dense_mlp_per_layer
    moe_total = pc.attention_per_layer + routed + pc.shared_expert_per_layer + pc.router_per_layer
    up = 0.0
    if mla is not None:
        heads = ctx.model.num_attention_heads
        up = (mla.q_lora_rank * heads * (mla.qk_nope_head_dim + mla.qk_rope_head_dim)
              + mla.kv_lora_rank * heads * (mla.qk_nope_head_dim + mla.v_head_dim))
    return {"mlp": (pc.dense_mlp_per_layer / dense_total, 0.0),
            "moe": (0.0, (routed + pc.shared_expert_per_layer + pc.router_per_layer) / moe_total),
            "shared_experts": (0.0, pc.shared_expert_per_layer / moe_total),
            "mla_up_proj": (up / dense_total, up / moe_total)}


def module_matmul_share(ctx: CostContext, b: LayoutBatch) -> tuple[np.ndarray, np.ndarray]:
    """(dense layer, MoE layer) share of the forward matmuls the named modules recompute
    (shared_experts counts once when moe, which holds it, is named too)."""
    bit, shares = (lambda name: module_bit(b.recompute_modules, name)), _matmul_shares(ctx)
    out = []
    for i in (0, 1):
        share = sum(bit(name) * s[i] for name, s in shares.items() if name != "shared_experts")
        out.append(share + np.maximum(bit("shared_experts") - bit("moe"), 0.0) * shares["shared_experts"][i])
    return out[0], out[1]


def module_recompute_s(ctx: CostContext, b: LayoutBatch, fwd: dict[str, np.ndarray],
                       core_attn: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(dense layer, MoE layer) seconds per micro-batch that recomputing the modules adds.

    Each module's forward again: matmul modules at the layer's matmul time × their FLOP share
    (``_matmul_shares``); layernorm and moe_act memory bound at HBM speed (norm: 4 bytes per
    element of 2 norms × h; SwiGLU: 6 bytes per element of k·F_e); ``core_attn`` as the profile's
    selective recompute (``core_attn`` = (dense, MoE) seconds). ``moe`` recomputes the whole MoE
    block (Megatron ``--recompute-modules``: moe is the MoE layer, moe_act its activation only),
    so its time holds the experts' SwiGLU as moe_act's does: naming moe never costs less than
    naming moe_act.
    """
    m = ctx.model
    bit, shares = (lambda name: module_bit(b.recompute_modules, name)), module_matmul_share(ctx, b)
    tokens, hbm = b.mbs * ctx.training.seq_len / b.cp, ctx.effective_hbm_bytes_per_s
    layernorm = bit("layernorm") * tokens * NORMS_PER_LAYER * NORM_HBM_BYTES_PER_ELEMENT * m.hidden_size / _h_div(b) / hbm
    out = []
    for share, mm, core in zip(shares, (fwd["dense_matmul"], fwd["moe_matmul"]), core_attn):
        out.append(bit("core_attn") * core + layernorm + share * mm)
    if m.moe is not None:
        swiglu = (tokens * SWIGLU_HBM_BYTES_PER_ELEMENT * m.moe.num_experts_per_token * m.moe.expert_ffn_hidden_size
                  / (b.etp * _h_div(b)) / hbm)
        # moe recomputes the whole MoE block, its activation included: moe_act's work is part of it.
        out[1] = out[1] + np.maximum(bit("moe_act"), bit("moe")) * swiglu
    return out[0], out[1]


def module_extra_passes(b: LayoutBatch) -> tuple[np.ndarray, np.ndarray]:
    """(TP, EP) collective passes per layer that module recompute adds: the MLP's (or MoE
    block's) half of a layer's TP collectives with mlp or moe; one more dispatch and combine
    with moe."""
    mlp_or_moe = np.maximum(module_bit(b.recompute_modules, "mlp"), module_bit(b.recompute_modules, "moe"))
    return 0.5 * mlp_or_moe, module_bit(b.recompute_modules, "moe")


def offloaded_share(b: LayoutBatch, layers: np.ndarray) -> np.ndarray:
    """Share of a stage's layers whose activations go to the host: min(N, L_stage)/L_stage."""
    return np.minimum(b.offload_layers, layers) / np.maximum(layers, 1.0)


def offload_exposed_s(ctx: CostContext, b: LayoutBatch, layer_bytes: np.ndarray, layers: np.ndarray,
                      forward_s: np.ndarray, backward_s: np.ndarray) -> np.ndarray:
    """Seconds per micro-batch the host link adds: per offloaded layer, its activations
    (``layer_bytes``) go out (device-to-host) behind the next layer's forward and come back
    (host-to-device) behind the previous layer's backward; what takes longer than that layer's
    share of the stage's ``forward_s`` / ``backward_s`` is exposed."""
    n = np.maximum(layers, 1.0)
    transfer = layer_bytes / host_link_bytes_per_s(ctx)
    return np.minimum(b.offload_layers, n) * (np.maximum(transfer - forward_s / n, 0.0)
                                               + np.maximum(transfer - backward_s / n, 0.0))
