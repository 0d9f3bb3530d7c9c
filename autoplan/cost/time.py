"""Time of one layer and one micro-batch for a batch of layouts: compute, recompute, TP/CP/EP
communication; ``cost.step_time`` assembles the step from them (pipeline bubble, DP traffic,
optimizer).

Per micro-batch on a stage (one GPU): matmul time = FLOPs / (peak · η(F)), with the GEMM
efficiency curve η(F) = η_max · F / (F + F_half) of the per-GPU GEMM size F (small TP shards run
less efficiently); flash attention at its own efficiency; memory-bound element-wise work from
HBM bytes. Backward costs 2× the forward (Narayanan et al. SC'21, Sec. 5.1: 3 passes of 2·N·T).
Pipeline (Narayanan et al. SC'21, Sec. 2.2): step = (m + (p-1)/v) · t_stage for 1F1B and
interleaved 1F1B; other schedules' bubbles and hidden communication in ``cost.schedule``. DP gradient reduction overlaps the backward of the last micro-batch except
for what does not fit (``dp_overlap``); ZeRO-3 gathers every micro-batch, prefetched
(``autoplan.cost.data_parallel``).
Mechanisms in their own modules: TP rings over the links the rank order gives them
(``tp_comm``), MoE grouped GEMM, fixed cost and dispatch (``moe_time``), FP8 speed-up and casts
(``fp8``), and which overlap the trainer's options switch on (``overlap``).
"""

from __future__ import annotations

import numpy as np

from autoplan.cost.arrays import zeros_like
from autoplan.cost import comm, cp_comm, fp8, moe_time
from autoplan.cost.attention_kernels import triton_attention_efficiency
from autoplan.cost.broadcast import per_group
from autoplan.cost.context import CostContext
from autoplan.cost.loss_kernel import loss_hbm_bytes
from autoplan.cost.flops import (
    attention_exp_ops_per_token,
    attention_score_flops_per_token,
    layer_matmul_flops_per_token,
    routed_matmul_flops_per_token,
    skipped_last_linear_flops_per_token,
)
from autoplan.cost.memory import layer_activation_bytes
from autoplan.cost.recompute import (
    full_recompute_share,
    module_extra_passes,
    module_recompute_s,
)
from autoplan.cost.tp_comm import tp_collective_s
from autoplan.layout import LayoutBatch
from autoplan.specs.model import ModelSpec

BF16_BYTES = 2.0
# Backward of a matmul costs 2× its forward (input and weight gradients): Narayanan et al. SC'21,
# Sec. 5.1 (3 passes of 2·N·T). A micro-batch's compute is therefore 1/3 forward, 2/3 backward;
# these shares are the windows the DP collectives hide behind (``time_table``).
BACKWARD_MATMUL_FACTOR = 2.0
REFERENCE_HEAD_DIM = 128.0  # the head dim attention_efficiency is stated at (the kernels' measurement)
ATTENTION_BACKWARD_FACTOR = 2.5  # flash attention backward ≈ 2.5× forward (Dao 2023, FlashAttention-2 Sec. 3)
# Without sequence parallelism 10 of a layer's 34 sbh activation bytes (norms, dropout, residual)
# are replicated across TP ranks, the other 24 are sharded (Korthikanti et al. 2022, Table 2);
# memory-bound element-wise work follows the same split.
REPLICATED_ELEMENTWISE_SHARE = 10.0 / 34.0
TP_COLLECTIVES_PER_PASS = 4.0  # 2 all-gathers + 2 reduce-scatters (or 2 all-reduces) per layer
# Eager (non-flash) attention materialises the s×s scores of every head in HBM. Forward, per score
# element in bf16: the QKᵀ (baddbmm) writes it (2 B), the fused scale-mask-softmax reads it and
# writes the probabilities (2 + 2 B), the probabilities·V bmm reads them (2 B): 8 B (Megatron-LM
# megatron/model/transformer.py ParallelAttention / CoreAttention with FusedScaleMaskSoftmax,
# megatron/model/fused_softmax.py; Megatron-DeepSpeed's BLOOM the same with the ALiBi baddbmm).
# Backward: the PV bmm's input gradient writes dprobs (2 B), the softmax backward reads dprobs and
# the probabilities and writes dscores (2 + 2 + 2 B), dV reads the probabilities (2 B), dQ and dK
# read dscores (2 + 2 B): 14 B. It is part of the attention (recomputed with it under selective
# recompute, Korthikanti et al. 2022 Sec. 5). The attention dropout where the trainer applies it
# adds the profile's ``eager_attention_dropout_bytes`` each way. Flash attention keeps none of it
# in HBM (Dao et al. 2022).
EAGER_SCORE_BYTES_FORWARD = 8.0
EAGER_SCORE_BYTES_BACKWARD = 14.0


def gemm_efficiency(ctx: CostContext, gemm_flops: np.ndarray) -> np.ndarray:
    """η(F) = η_max · F / (F + F_half): a GEMM of F FLOPs takes F/(η_max·peak) plus a fixed
    t₀ = F_half/(η_max·peak) (launch and the last, partial wave of tiles). F is one GEMM's FLOPs
    on one GPU for one micro-batch: for a layer's dense matmuls the MLP up-projection's
    2·tokens·h·f/tp, for MoE the grouped GEMM (``moe_time.expert_gemm_flops``), for the LM head
    2·tokens·V·h/tp. It does not see the GEMM's shape: a small K or N (h/tp, f/tp at high TP, a
    head dim of 64-128 in eager attention's bmm) caps the arithmetic intensity at
    mkn/(mk + kn + mn) FLOP per byte and so the efficiency, whatever F is."""
    e = ctx.efficiency
    return e.gemm_efficiency_max * gemm_flops / (gemm_flops + e.gemm_half_flops)


def _layer_forward_s(ctx: CostContext, b: LayoutBatch) -> dict[str, np.ndarray]:
    """Forward time of one dense and one MoE layer for one micro-batch on one GPU, by part."""
    m, e, gpu = ctx.model, ctx.efficiency, ctx.cluster.gpu
    tokens = b.mbs * ctx.training.seq_len / b.cp
    peak = gpu.compute_peak_bf16_flops_per_s
    matmul_peak = peak * fp8.matmul_speedup(ctx, b)
    dense_per_token, moe_per_token = layer_matmul_flops_per_token(ctx)
    typical = 2.0 * tokens * m.hidden_size * m.ffn_hidden_size / b.tp
    dense_mm = tokens * dense_per_token / b.tp / (matmul_peak * gemm_efficiency(ctx, typical))
    if m.moe is not None:
        moe_eff = gemm_efficiency(ctx, moe_time.expert_gemm_flops(ctx, b, tokens))
        moe_mm = tokens * moe_per_token / b.tp / (matmul_peak * moe_eff)
        # The routed experts' GEMMs take at least their weights' read from HBM (moe_time).
        routed = moe_mm * routed_matmul_flops_per_token(ctx) / moe_per_token
        floor_excess = np.maximum(moe_time.expert_weight_floor_s(ctx, b) - routed, 0.0)
        moe_mm = moe_mm + floor_excess
        routed = routed + floor_excess
    else:
        moe_mm, routed = dense_mm, zeros_like(dense_mm)
    attention, attention_backward = attention_s(ctx, b, tokens)
    h_div = np.where(b.sp > 0, b.tp, 1.0)
    share = REPLICATED_ELEMENTWISE_SHARE
    elementwise = (e.elementwise_bytes_per_token_hidden * tokens * m.hidden_size
                   * (share / h_div + (1.0 - share) / b.tp) / ctx.effective_hbm_bytes_per_s)
    return {"dense_matmul": dense_mm, "moe_matmul": moe_mm, "attention": attention,
            "attention_backward": attention_backward, "elementwise": elementwise,
            "routed_matmul": routed}  # the routed experts' share of moe_matmul (host_dispatch)


def query_key_head_dim(model: ModelSpec) -> float:
    """d_qk, the head dimension of the query-key product (MLA: nope + rope parts)."""
    return float(model.mla.qk_nope_head_dim + model.mla.qk_rope_head_dim) if model.mla is not None else float(model.head_dim)


def head_dim_factor(model: ModelSpec, half_head_dim: float) -> float:
    """Flash attention's efficiency at the model's query-key head dimension d over that at
    REFERENCE_HEAD_DIM: [d/(d + d_0)]/[128/(128 + d_0)], d_0 = ``attention_half_head_dim`` (1 when
    0). Measured on an H100 (validation/h100_sxm_attention_head_dim.csv: head dim 64 runs at 0.89
    of 128 in FlashAttention-2, 0.81 in cuDNN; autoplan.calibration.kernels.half_head_dim)."""
    d = query_key_head_dim(model)
    return (d / (d + half_head_dim)) / (REFERENCE_HEAD_DIM / (REFERENCE_HEAD_DIM + half_head_dim))


def attention_s(ctx: CostContext, b: LayoutBatch, tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Forward and backward seconds of one layer's score attention (QKᵀ, softmax, ·V) for one
    micro-batch; eager attention's compute × ``unfused_attention_factor`` (a correction fitted on
    eager-attention runs: flash attention, which keeps no scores, is never multiplied by it).

    Flash attention (Dao 2023, FlashAttention-2): the causal half of the 2·k̄·a·(d_qk + d_v) FLOPs
    per token (k̄ = s, or fewer keys under a sliding window or chunks: flops.attention_keys; the kernel
    skips the tiles outside the window) at ``attention_efficiency``·k/(k + ``attention_half_seq_tokens``), k = s/cp the keys per
    call (the kernel's fall at short sequences, measured on an H100: validation/h100_sxm_kernels.csv),
    × ``head_dim_factor`` (its fall with smaller heads); backward ATTENTION_BACKWARD_FACTOR × forward;
    under PyTorch's ring attention each pass adds its float32 merge and gradient accumulation
    between the SDPA calls (``cp_comm.ring_merge_s``; 0 with cp = 1 or Transformer Engine's ring).
    The exp co-limit (``exp_floor_s``): each pass is max(tensor time, exp time) at that efficiency,
    the exp time its softmax exponentials at the GPU's SFU rate. Under ``fp8_attention`` (fp8
    layouts) the tensor time is at the FP8 rate (``fp8.attention_speedup``), the exp time unchanged.
    Triton flash attention (``attention_kernel: triton``; llm-foundry's ``attn_impl: triton``): the
    same causal half at the kernel's published forward + backward speed instead of the profile's
    efficiency (``attention_kernels.triton_attention_efficiency``: FlashAttention-2 paper Fig. 4
    and 7 by GPU, head dim and keys per call), split forward : backward as 1 : ATTENTION_BACKWARD_FACTOR.
    Eager attention (``attention_kernel: eager``; Megatron-LM's CoreAttention of 2021-22, the
    Megatron-DeepSpeed BLOOM path): two cuBLAS batched GEMMs (baddbmm QKᵀ, bmm PV) over the full
    s×s square (the causal mask is applied in the softmax, after the product: none of it is
    skipped) at the GEMM efficiency η(F) of one of them (F = tokens·2·s·a·d/tp), backward
    BACKWARD_MATMUL_FACTOR × forward; plus the memory-bound score traffic (tokens·s·a/tp elements ×
    EAGER_SCORE_BYTES_FORWARD, backward EAGER_SCORE_BYTES_BACKWARD, each + the profile's
    ``eager_attention_dropout_bytes``) at the HBM bandwidth."""
    e, s = ctx.efficiency, ctx.training.seq_len
    peak, factor = ctx.cluster.gpu.compute_peak_bf16_flops_per_s, ctx.corrections.unfused_attention_factor
    score_flops = tokens * attention_score_flops_per_token(ctx, s) / b.tp
    if ctx.training.attention_kernel == "triton":
        keys = s / b.cp  # keys per call
        efficiency = triton_attention_efficiency(ctx.cluster.gpu.name, query_key_head_dim(ctx.model), keys)
        forward = score_flops / 2.0 / (peak * efficiency)
        return forward, ATTENTION_BACKWARD_FACTOR * forward
    if ctx.training.attention_kernel != "eager":
        keys = s / b.cp  # keys per call: one ring block under context parallelism
        efficiency = (e.attention_efficiency * keys / (keys + e.attention_half_seq_tokens)
                      * head_dim_factor(ctx.model, e.attention_half_head_dim))
        tensor = score_flops / 2.0 / (peak * fp8.attention_speedup(ctx, b))
        exp = exp_floor_s(ctx, b, tokens)
        merge_forward, merge_backward = cp_comm.ring_merge_s(ctx, b, tokens)
        return (np.maximum(tensor, exp) / efficiency + merge_forward,
                np.maximum(ATTENTION_BACKWARD_FACTOR * tensor, exp) / efficiency + merge_backward)
    score_flops = tokens * attention_score_flops_per_token(ctx, s, windowed=False) / b.tp  # masks after the product
    bmm = score_flops / (peak * gemm_efficiency(ctx, score_flops / 2.0)) * factor
    scores = tokens * s * ctx.model.num_attention_heads / b.tp
    dropout = ctx.profile.activations.eager_attention_dropout_bytes
    return (bmm + scores * (EAGER_SCORE_BYTES_FORWARD + dropout) / ctx.effective_hbm_bytes_per_s,
            BACKWARD_MATMUL_FACTOR * bmm + scores * (EAGER_SCORE_BYTES_BACKWARD + dropout) / ctx.effective_hbm_bytes_per_s)


def exp_floor_s(ctx: CostContext, b: LayoutBatch, tokens: np.ndarray) -> np.ndarray:
    """Seconds one flash-attention pass of one layer needs for its softmax exponentials on one GPU
    for one micro-batch at the SFU peak: the causal half of tokens·k̄·a/tp exps
    (``flops.attention_exp_ops_per_token``) / ``GPUSpec.compute_exp_ops_per_s``; 0 where the GPU
    states no exp rate.

    Rule (``attention_s``): each pass takes max(tensor time, this)/η, η the kernel's efficiency: a
    roofline over two units that run concurrently. FlashAttention-4 (Zadouri et al. 2026, arXiv
    2603.05451, Sec. 3) overlaps the softmax of one tile with the MMAs of another, so the forward is
    bound by the slower unit; cuDNN's Blackwell kernels likewise (NVIDIA, "Making Softmax More
    Efficient with NVIDIA Blackwell Ultra", 2026: the tensor cores idle while the SFUs finish). Per
    score the forward runs 2·(d_qk + d_v) tensor FLOPs and 1 exp, the backward 2.5× the FLOPs and 1
    exp (P recomputed), so the floor binds first in the forward and with small heads: on a GB200
    (2.5 PFLOP/s BF16, 5 Texp/s) at head dim 128 a score takes 512/2.5e15 = 2.05e-13 s of tensor
    time against 1/5e12 = 2.0e-13 s of exp time, at head dim 64 half that tensor time; Blackwell
    Ultra's 10.7 Texp/s halves the exp time. A kernel that emulates part of its exponentials on the
    FMA units (FlashAttention-4's polynomial exp2) runs above this floor; it is not modelled."""
    rate = ctx.cluster.gpu.compute_exp_ops_per_s
    if rate <= 0:  # the GPU states no exp rate
        return np.zeros(len(b))
    return tokens * attention_exp_ops_per_token(ctx, ctx.training.seq_len) / 2.0 / b.tp / rate


def _per_layer_comm_s(ctx: CostContext, b: LayoutBatch, st: dict) -> dict[str, np.ndarray]:
    """Communication of one layer for one micro-batch, forward + backward (+ recompute)."""
    m = ctx.model
    tokens = b.mbs * ctx.training.seq_len / b.cp
    # fwd, bwd, and the recomputed fwd of the layers under full recompute (the share on a rank
    # of L/pp layers) or of the modules that hold TP and EP collectives (mlp, moe); under the
    # profile's own selective recompute, the share of a pass's collectives its policy recomputes
    # (``selective_recompute_tp_collectives``: torchtitan's op-SAC, _save_list in
    # torchtitan/models/llama3/parallelize_llama.py, saves reduce_scatter_tensor but not the
    # all-gathers, which the backward runs again).
    full = full_recompute_share(b, m.num_layers / b.pp)
    module_tp, module_ep = module_extra_passes(b)
    own_selective = np.where(b.recompute_modules > 0, module_tp, ctx.profile.recompute.selective_recompute_tp_collectives)
    passes = 2.0 + full + np.where(b.recompute == 1, own_selective, 0.0)
    activation_bytes = tokens * m.hidden_size * BF16_BYTES
    tp_link = comm.group_link(ctx, b.tp, st["tp"])
    # Sequence parallel: 2 all-gathers + 2 reduce-scatters per pass (= 2 all-reduces without SP),
    # rings over the links the rank order puts the TP group on (tp_comm).
    tp = passes * TP_COLLECTIVES_PER_PASS * tp_collective_s(tp_link, activation_bytes)
    # A floor on the layer's time per TP collective: the host's launch and synchronisation of the
    # blocking collectives (``collective_overhead_s``) and, where the pipeline crosses nodes,
    # ``pp_cross_tp_sync_s`` per collective and TP rank (see their docs).
    c = ctx.corrections
    pp_crosses = (b.pp > 1) & (st["pp"] * b.pp > ctx.cluster.scale_up_domain_size)
    collectives = np.where(b.tp > 1, passes * TP_COLLECTIVES_PER_PASS, 0.0)
    floor = collectives * (c.collective_overhead_s + np.where(pp_crosses, b.tp * c.pp_cross_tp_sync_s, 0.0))
    # Ring attention's K/V exchanges (cp_comm; the allgather rotate method's are costed with
    # the attention they hide behind, cp_comm.allgather_exposed_layer_s).
    cp_link = comm.group_link(ctx, b.cp, st["cp"])
    cp = cp_comm.ring_layer_s(ctx, b, cp_link, tokens, full)
    ep, ep_passes = zeros_like(b.tp), np.full_like(b.tp, 2.0)
    if m.moe is not None:
        ep_link = comm.group_link(ctx, b.ep, b.etp)
        h_div = np.where(b.sp > 0, b.tp, 1.0)
        ep_passes = 2.0 + full + np.where(b.recompute == 1, module_ep, 0.0)
        ep = ep_passes * moe_time.dispatch_combine_s(ctx, b, ep_link, tokens / h_div)
    return {"tp": tp, "tp_floor": floor, "cp": cp, "ep": ep, "tp_passes": passes, "ep_passes": ep_passes,
            "tp_inside_domain": tp_link.inside_domain, "cp_inside_domain": cp_link.inside_domain, "cp_link": cp_link}


def backward_scale_up_comm_s(b: LayoutBatch, tp_exposed: np.ndarray, tp_passes: np.ndarray,
                             tp_inside_domain: np.ndarray, dp_inside_domain: np.ndarray) -> np.ndarray:
    """Seconds of one micro-batch's backward spent in exposed TP collectives that run on the
    scale-up links while the gradient reduction runs on the NICs, and so lengthen the window
    that hides it: the TP group inside a domain, the data-parallel group across domains (else
    both share one tier, and 0).

    The reduction of bucket k starts once the backward has produced it and proceeds on its own
    stream (Megatron-Core distributed_data_parallel.py, register_grad_ready -> start_grad_sync;
    torch DDP's Reducer and nanotron's comm hook likewise) while the backward goes on with its
    GEMMs and its blocking sequence-parallel collectives; those collectives run over NVLink, the
    reduction over the NICs. The backward holds one of the ``tp_passes`` passes of the layer's TP
    collectives (each all-gather's gradient is a reduce-scatter and vice versa)."""
    return np.where(tp_inside_domain & ~dp_inside_domain & (b.tp > 1), tp_exposed / tp_passes, 0.0)


def _layer_compute_s(fwd: dict[str, np.ndarray], matmul_s: np.ndarray) -> np.ndarray:
    """Forward + backward of one layer: matmuls 1 + BACKWARD_MATMUL_FACTOR, attention its forward
    and backward (``attention_s``), element-wise work 3 passes."""
    return ((1 + BACKWARD_MATMUL_FACTOR) * matmul_s + fwd["attention"] + fwd["attention_backward"]
            + 3 * fwd["elementwise"])


def _layer_recompute_s(ctx: CostContext, b: LayoutBatch, fwd: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Recomputed forward seconds of one (dense, MoE) layer: under full recompute the whole
    forward (scaled per stage by ``full_recompute_share``), less a dense layer's last linear where
    the trainer's checkpoint stops early (its matmul time × that linear's FLOP share); under selective, the profile's own
    set (``selective_recompute_matmul_fraction`` of the matmuls, attention for Megatron's
    core_attn) or the named ``recompute_modules`` (``recompute.module_recompute_s``)."""
    p = ctx.profile
    same = fwd["moe_matmul"] is fwd["dense_matmul"]  # a dense model: its "MoE layer" is the dense one
    core = [p.recompute.selective_recompute_matmul_fraction * fwd[k] + float(p.recompute.selective_recomputes_attention) * fwd["attention"]
            for k in (("dense_matmul",) if same else ("dense_matmul", "moe_matmul"))]
    core = core * 2 if same else core
    named = module_recompute_s(ctx, b, fwd, (core[0], core[1])) if np.count_nonzero(b.recompute_modules) else core
    selective, modules = b.recompute == 1, b.recompute_modules > 0
    # The share of a layer's forward matmuls a full recompute runs again: a dense layer's without
    # its last linear where the checkpoint stops early (flops.skipped_last_linear_flops_per_token).
    dense_per_token = layer_matmul_flops_per_token(ctx)[0]
    matmul_rerun = (1.0 - skipped_last_linear_flops_per_token(ctx) / dense_per_token, 1.0)
    out = {}
    for i, kind in enumerate(("dense", "moe")):
        if i == 1 and same and named is core:  # the dense layer's figures, the same arrays
            out["moe_full"], out["moe_selective"] = out["dense_full"], out["dense_selective"]
            break
        out[f"{kind}_full"] = matmul_rerun[i] * fwd[f"{kind}_matmul"] + fwd["attention"] + fwd["elementwise"]
        out[f"{kind}_selective"] = np.where(selective, np.where(modules, named[i], core[i]), 0.0)
    return out


def _layer_bytes(ctx: CostContext, b: LayoutBatch, n: np.ndarray, n_dense: np.ndarray) -> np.ndarray:
    """Activation bytes of one layer (mean over the stage's dense and MoE layers) of one
    micro-batch without recompute: what offload moves each way."""
    dense, moe = layer_activation_bytes(ctx, b, "none")
    dense_share = n_dense / np.maximum(n, 1.0)
    return dense_share * dense + (1.0 - dense_share) * moe


def grad_accumulation_s(ctx: CostContext, b: LayoutBatch, params_per_gpu: np.ndarray) -> np.ndarray:
    """Memory-bound gradient accumulation after each micro-batch's backward: params ×
    ``grad_accumulation_bytes_per_param`` / (HBM bandwidth·hbm_efficiency); 0 where the trainer
    accumulates inside the weight-gradient GEMM (Megatron's gradient_accumulation_fusion) or
    states nothing. nanotron's FP32GradientAccumulator adds each bf16 gradient into its fp32
    buffer after every backward (src/nanotron/optim/gradient_accumulator.py ``_accumulate_grad``:
    ``fp32_grad.add_(half_param.grad)``; on the sync step its all-reduce hook does the same add):
    read 2 + read 4 + write 4 = 10 B per parameter. DeepSpeed's pipeline engine under bf16 does
    the same after every backward pass (deepspeed/runtime/pipe/engine.py ``_exec_backward_pass``:
    ``optimizer.update_hp_grads``, deepspeed/runtime/bf16_optimizer.py: ``hp_grad.add_(lp.grad)``);
    for a profile with ``pp_grad_all_reduce_bytes`` (that BF16_Optimizer path) it applies only
    where that path runs: pp > 1 and ZeRO <= 1."""
    p = ctx.profile
    seconds = params_per_gpu * p.model_states.grad_accumulation_bytes_per_param / ctx.effective_hbm_bytes_per_s
    if p.pipeline.grad_all_reduce_bytes <= 0:  # (applies everywhere: the where below would copy it)
        return np.asarray(seconds, dtype=np.float64)
    return np.where((b.pp > 1) & (b.zero <= 1), seconds, 0.0)


def loss_s(ctx: CostContext, b: LayoutBatch, tokens: np.ndarray) -> np.ndarray:
    """Memory-bound cross-entropy over the vocabulary, forward and backward, on the last stage:
    tokens·V/tp logits × ``loss_hbm_bytes_per_logit`` / (HBM bandwidth·hbm_efficiency). The
    profile's figure counts the passes PyTorch's loss makes over each logit (see the profiles);
    0 where a profile does not state it; under ``compile_loss`` the compiled kernels' passes
    (``cost.loss_kernel``). It matters where V is large against h (small models)."""
    logits = tokens * ctx.model.vocab_size / b.tp
    return logits * loss_hbm_bytes(ctx) / ctx.effective_hbm_bytes_per_s


def mtp_projection_s(ctx: CostContext, b: LayoutBatch, tokens: np.ndarray) -> np.ndarray:
    """Forward + backward of one MTP depth's projection M ∈ R^{h×2h} (DeepSeek-V3 Sec. 2.2, eq. 21):
    3 × 2·tokens·2h·h/tp FLOPs at the GEMM efficiency of its size."""
    flops = 2.0 * tokens * 2.0 * ctx.model.hidden_size**2 / b.tp
    return (1 + BACKWARD_MATMUL_FACTOR) * flops / (ctx.cluster.gpu.compute_peak_bf16_flops_per_s * gemm_efficiency(ctx, flops))


@per_group  # once per distinct (tp, cp, mbs, precision, recompute, ...): cost.broadcast
def _micro_batch_compute_s(ctx: CostContext, b: LayoutBatch) -> tuple[dict, np.ndarray, np.ndarray, dict, np.ndarray]:
    """One micro-batch's per-layer forward parts (``_layer_forward_s``), dense and MoE layer
    compute with FP8 casts and the MoE fixed cost, the per-layer recompute (``_layer_recompute_s``)
    and the LM head with its loss (and MTP heads and projections) on the last stage."""
    m = ctx.model
    fwd = _layer_forward_s(ctx, b)
    dense_c = _layer_compute_s(fwd, fwd["dense_matmul"])
    # (a dense model's "MoE layer" is its dense layer: moe_matmul is dense_matmul, the same array)
    moe_c = dense_c if fwd["moe_matmul"] is fwd["dense_matmul"] else _layer_compute_s(fwd, fwd["moe_matmul"])
    tokens = b.mbs * ctx.training.seq_len / b.cp
    dense_cast, moe_cast = fp8.cast_s(ctx, b, tokens)
    dense_c = dense_c + dense_cast
    moe_c = moe_c + moe_cast + (moe_time.fixed_s(ctx, 2.0) if m.moe is not None else 0.0)
    recompute_s = _layer_recompute_s(ctx, b, fwd)
    head = 3.0 * 2.0 * tokens * m.vocab_size * m.hidden_size / b.tp / (
        ctx.cluster.gpu.compute_peak_bf16_flops_per_s * gemm_efficiency(ctx, 2.0 * tokens * m.vocab_size * m.hidden_size / b.tp))
    head = head + loss_s(ctx, b, tokens)
    if m.num_mtp_layers:  # each MTP depth: its own LM head and loss, and its 2h -> h projection
        head = head * (1.0 + m.num_mtp_layers) + m.num_mtp_layers * mtp_projection_s(ctx, b, tokens)
    return fwd, dense_c, moe_c, recompute_s, head
