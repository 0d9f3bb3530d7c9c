"""FLOP counts per token and per step (counts, float64: 6·N·T for 405B overflows int64).

Sources: the 6·N·T rule (Kaplan et al. 2020, Sec. 2.1; forward 2·N·T, backward 4·N·T);
attention scores QKᵀ and AV add 2·s·a·d_qk + 2·s·a·d_v forward FLOPs per token and layer (s: the
keys per query, fewer under a sliding window or chunks, :func:`attention_keys`)
(Narayanan et al. SC'21, Sec. 5.1 / Appendix: 96·B·s·l·h²·(1 + s/6h + V/16lh) counts both with
full recompute). Recompute FLOPs per Korthikanti et al. 2022, Appendix A eq. 7–9.
"""

from __future__ import annotations

import numpy as np

from autoplan.cost.arrays import select
from autoplan.cost.context import CostContext, per_context
from autoplan.cost.recompute import full_recompute_share, module_matmul_share
from autoplan.layout import LayoutBatch
from autoplan.recompute_modules import module_bit
from autoplan.specs.model import ModelSpec


def attention_score_flops_per_token(ctx: CostContext, seq_len: np.ndarray, *, windowed: bool = True) -> np.ndarray:
    """Forward FLOPs of QKᵀ and AV per token of one layer (the mean over the layers), unmasked:
    2·k̄·a·(d_qk + d_v), k̄ = :func:`attention_keys` (s without local attention; ``windowed=False``:
    s, the full square an eager kernel multiplies before it masks). For one sequence length (the
    setup's) once per context."""
    if np.ndim(seq_len) == 0:
        return _setup_score_flops_per_token(ctx, float(seq_len), windowed)
    return _score_flops_per_token(ctx, seq_len, windowed)


def _score_flops_per_token(ctx: CostContext, seq_len: np.ndarray, windowed: bool) -> np.ndarray:
    """``attention_score_flops_per_token``."""
    m = ctx.model
    if m.mla is not None:
        d_qk, d_v = m.mla.qk_nope_head_dim + m.mla.qk_rope_head_dim, m.mla.v_head_dim
    else:
        d_qk = d_v = m.head_dim
    keys = attention_keys(m, seq_len) if windowed else seq_len
    return 2.0 * keys * m.num_attention_heads * (d_qk + d_v)


_setup_score_flops_per_token = per_context(_score_flops_per_token)


def attention_exp_ops_per_token(ctx: CostContext, seq_len: np.ndarray) -> np.ndarray:
    """Softmax exponentials of one layer's forward per token, unmasked: k̄·a, one exp(s_ij − m_i)
    per attention score (FlashAttention-2, Dao 2023, Algorithm 1: P̃ = exp(S − m̃) of each tile; its
    backward, Algorithm 2, recomputes P = exp(S − L) once more). Halved for causal attention by the
    caller, as the FLOPs are (the tiles above the diagonal are skipped)."""
    return attention_keys(ctx.model, seq_len) * ctx.model.num_attention_heads


def attention_keys(model: ModelSpec, seq_len: np.ndarray) -> np.ndarray:
    """k̄: the layers' mean of the unmasked-equivalent keys per query, 2 × the causal mean, so that
    the causal half of 2·k̄·a·d is what the kernel multiplies; s for a full layer.

    Query i (0-based) of a causal layer attends i + 1 keys; with a sliding window of w, min(i + 1, w)
    (Mistral 7B, Jiang et al. 2023, Sec. 2: each token attends at most W tokens of the previous
    layer); with chunks of w (Llama 4's attention_chunk_size), (i mod w) + 1. Summed over a sequence
    of s = n·w + r: sliding w·s − w·(w − 1)/2 (w ≤ s), chunked n·w(w + 1)/2 + r(r + 1)/2. A local
    layer's k̄ = min(s, 2·sum/s), so w ≥ s gives s (a no-op) and full layers keep the s the causal
    convention halves. Local layers: ModelSpec.num_local_attention_layers of num_layers.
    """
    if np.ndim(seq_len) == 0:  # the setup's one sequence length: a Python float (numpy scalars are slow)
        return float(attention_keys(model, np.array([seq_len], dtype=np.float64))[0])
    s = np.asarray(seq_len, dtype=np.float64)
    w = float(model.attention_window)
    if model.num_local_attention_layers == 0:
        return s
    if model.local_attention == "sliding":
        total = np.where(w < s, w * s - w * (w - 1.0) / 2.0, s * (s + 1.0) / 2.0)
    else:
        n, r = np.floor(s / w), np.mod(s, w)
        total = n * w * (w + 1.0) / 2.0 + r * (r + 1.0) / 2.0
    local = np.minimum(s, 2.0 * total / s)
    share = model.num_local_attention_layers / model.num_layers
    return (1.0 - share) * s + share * local


def _routed_params_per_token(ctx: CostContext) -> float:
    """Routed-expert weights one token runs through in a MoE layer: its top-k experts'."""
    pc = ctx.params
    return pc.expert_per_layer * pc.num_experts_per_token / max(pc.num_experts, 1)


def routed_matmul_flops_per_token(ctx: CostContext) -> float:
    """Forward matmul FLOPs per token of one MoE layer's routed experts (part of the MoE layer's
    ``layer_matmul_flops_per_token``)."""
    return 2.0 * _routed_params_per_token(ctx)


def layer_matmul_flops_per_token(ctx: CostContext) -> tuple[float, float]:
    """Forward matmul FLOPs per token of one (dense layer, MoE layer): 2 × active matmul weights."""
    pc = ctx.params
    dense = 2.0 * (pc.attention_per_layer + pc.dense_mlp_per_layer)
    routed = _routed_params_per_token(ctx)
    moe = 2.0 * (pc.attention_per_layer + routed + pc.shared_expert_per_layer + pc.router_per_layer)
    return dense, moe


def mfu_params(ctx: CostContext) -> float:
    """N of the model-FLOPs convention (active parameters for MoE)."""
    pc = ctx.params
    if ctx.flops_convention in ("megatron", "causal"):
        return float(pc.active - pc.embedding + pc.lm_head_matmul - pc.lm_head)
    tied_head = pc.lm_head_matmul if pc.lm_head == 0 else 0
    return float(pc.active + tied_head)


@per_context  # (seq_len: the setup's, a number)
def model_flops_per_token(ctx: CostContext, seq_len: np.ndarray) -> np.ndarray:
    """Model FLOPs per trained token (forward + backward, no recompute) under the convention.

    Multi-token prediction counts where ``TrainingSpec.mtp_in_model_flops`` (the default):
    Megatron-LM counts it (megatron/training/training.py ``num_floating_point_operations``: the
    MTP blocks as extra layers of the last layer's kind, "MTP norms and proj" and the logits ×
    (mtp_num_layers + 1)); :func:`mtp_flops_params` and one more layer of attention scores per depth.
    """
    mtp = ctx.model.num_mtp_layers if ctx.training.mtp_in_model_flops else 0
    attention = 3.0 * (ctx.model.num_layers + mtp) * attention_score_flops_per_token(ctx, seq_len)
    if ctx.flops_convention == "causal":
        attention = attention / 2.0
    return 6.0 * (mfu_params(ctx) + mtp * mtp_flops_params(ctx)) + attention


def mtp_flops_params(ctx: CostContext) -> float:
    """Matmul parameters one MTP depth runs per token: the active block, the projection (2h·h)
    and the shared LM head again (its logits); the norms' 3h as Megatron counts them."""
    pc = ctx.params
    return float(pc.mtp_active_per_depth + pc.lm_head_matmul)


def hardware_flops_per_token(ctx: CostContext, b: LayoutBatch) -> np.ndarray:
    """FLOPs the kernels run per trained token (for HFU), whatever ``flops_convention`` says.

    3 × one forward (forward + backward = 3 forwards; Narayanan et al. SC'21, Sec. 5.1) of the
    layer matmuls (:func:`layer_matmul_flops_per_token`), the LM head matmul 2·V·h and the causal
    attention scores as flash kernels execute them (half of 2·s·a·(d_qk + d_v)), plus what
    recompute adds (:func:`recompute_flops_per_token`). The embedding lookup and the norms run
    no matmul and are not counted; the MFU conventions only decide the model FLOPs.
    """
    return _forward_backward_flops_per_token(ctx) + recompute_flops_per_token(ctx, b)


@per_context
def _forward_backward_flops_per_token(ctx: CostContext) -> float:
    """``hardware_flops_per_token`` without recompute: 3 × one forward's matmuls and scores."""
    dense, moe = layer_matmul_flops_per_token(ctx)
    pc = ctx.params
    matmul = pc.num_dense_layers * dense + pc.num_moe_layers * moe + 2.0 * pc.lm_head_matmul
    attention = ctx.model.num_layers * attention_score_flops_per_token(ctx, ctx.training.seq_len) / 2.0
    if pc.num_mtp_layers:  # each MTP depth: one block, its projection and the LM head again
        block = moe if pc.mtp_block_is_moe else dense
        matmul += pc.num_mtp_layers * (block + 2.0 * (pc.mtp_projection_per_depth + pc.lm_head_matmul))
        attention += pc.num_mtp_layers * attention_score_flops_per_token(ctx, ctx.training.seq_len) / 2.0
    return 3.0 * (matmul + attention)


def recompute_flops_per_token(ctx: CostContext, b: LayoutBatch) -> np.ndarray:
    """Extra forward FLOPs per token that recomputation adds (for HFU).

    full: one more forward of the layers it covers (``recompute.full_recompute_share`` of a rank's
    L/pp layers; every layer with recompute_layers = 0), less the dense layers' last linear where
    the checkpoint stops early (``skipped_last_linear_flops_per_token``); selective: what the trainer recomputes
    (``selective_recompute_matmul_fraction`` of the layer matmuls and, for Megatron's
    ``core_attn``, the attention scores), or with ``recompute_modules`` the named modules'
    matmul share (``recompute.module_matmul_share``) plus core_attn's as before.
    """
    m = ctx.model
    dense, moe, matmul, attention, own = _recompute_flops_parts(ctx)
    selective = own
    if np.count_nonzero(b.recompute_modules):  # (the same result without the module arithmetic otherwise)
        dense_share, moe_share = module_matmul_share(ctx, b)
        named = (ctx.params.num_dense_layers * dense * dense_share + ctx.params.num_moe_layers * moe * moe_share
                 + module_bit(b.recompute_modules, "core_attn") * own)
        selective = np.where(b.recompute_modules > 0, named, own)
    skipped = ctx.params.num_dense_layers * skipped_last_linear_flops_per_token(ctx)
    full = full_recompute_share(b, m.num_layers / b.pp) * (matmul - skipped + attention)
    return select([b.recompute == 2, b.recompute == 1], [full, selective], 0.0)


def skipped_last_linear_flops_per_token(ctx: CostContext) -> float:
    """Forward FLOPs per token of a dense layer's MLP down projection, 2·f·h, that a full
    recompute with early stop does not rerun (``Recompute.full_recompute_skips_last_linear``,
    torch/utils/checkpoint.py); 0 where the trainer's checkpoint reruns the whole block. A MoE
    layer keeps its whole forward: its combine saves the routing weights after the experts' last
    GEMMs, so the recomputation runs through them."""
    if not ctx.profile.recompute.full_recompute_skips_last_linear:
        return 0.0
    return 2.0 * ctx.model.ffn_hidden_size * ctx.model.hidden_size


@per_context
def _recompute_flops_parts(ctx: CostContext) -> tuple[float, float, float, float, float]:
    """What ``recompute_flops_per_token`` reads of the context: one (dense, MoE) layer's forward
    matmul FLOPs per token, the layers' matmul and score FLOPs, and what the profile's own selective
    recompute reruns of them."""
    p = ctx.profile
    dense, moe = layer_matmul_flops_per_token(ctx)
    matmul = ctx.params.num_dense_layers * dense + ctx.params.num_moe_layers * moe
    attention = ctx.model.num_layers * attention_score_flops_per_token(ctx, ctx.training.seq_len) / 2.0
    own = p.recompute.selective_recompute_matmul_fraction * matmul + (
        attention if p.recompute.selective_recomputes_attention else 0.0)
    return dense, moe, matmul, attention, own


def linear_io_elements_per_token(ctx: CostContext) -> tuple[float, float]:
    """Elements per token of one (dense layer, MoE layer) that an FP8 recipe casts: each linear
    layer's input (forward) and its output gradient (backward), summed over the layer's linears.

    A linear of ``in`` × ``out`` casts ``in`` + ``out`` elements per token (Transformer Engine
    ``_Linear``: the input in forward, grad_output in backward). Dense: QKV (h, q + 2·kv), the
    output projection (q, h), fc1 (h, 2f gated / f), fc2 (f, h). MoE: the attention part, each of
    the top-k routed experts' fc1/fc2 and the shared experts'. MLA's low-rank projections are
    counted as a plain QKV (a small share of the cast traffic).
    """
    m = ctx.model
    gate = 2.0 if m.gated_mlp else 1.0
    attention = (m.hidden_size + m.q_size + 2.0 * m.kv_size) + (m.q_size + m.hidden_size)
    dense = attention + (m.hidden_size + gate * m.ffn_hidden_size) + (m.ffn_hidden_size + m.hidden_size)
    if m.moe is None:
        return dense, dense
    moe = m.moe

    def expert(width: float) -> float:
        return (m.hidden_size + gate * width) + (width + m.hidden_size)

    routed = moe.num_experts_per_token * expert(moe.expert_ffn_hidden_size)
    shared = moe.num_shared_experts * expert(moe.shared_expert_ffn_hidden_size) if moe.num_shared_experts else 0.0
    return dense, attention + routed + shared
