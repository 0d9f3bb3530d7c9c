"""Time of a MoE layer beyond its FLOPs: grouped-GEMM size, fixed cost, token dispatch.

* **Grouped GEMM.** Megatron-Core ``--moe-grouped-gemm`` (Transformer Engine ``GroupedLinear``)
  and torchtitan (``torch._grouped_mm``) run all local experts' tokens in one kernel, so the
  GEMM efficiency follows the size of that grouped GEMM: each EP rank receives on average
  tokens·top_k routed copies (balanced routing), F = 2·tokens·top_k·h·f_e/etp. Without it
  (``TrainerOptions.moe_grouped_gemm`` off, a loop over experts) F is one expert's share,
  ·ep/E of that.
* **Expert weight traffic.** Each pass reads the local experts' weights from HBM at least once
  (forward and the input gradient read W, the weight gradient writes dW): a GEMM of M tokens
  over a K×N weight does 2·M·K·N FLOPs on at least 2·K·N bytes, so with fewer routed tokens per
  local expert than about peak / bandwidth (~300 on an H100 in BF16) it is bandwidth-bound
  (the roofline: Williams, Waterman and Patterson 2009, CACM 52(4)). Many experts per GPU (small
  EP) at a small micro-batch: Qwen3-30B-A3B's 128 experts on one GPU at 4,096 tokens route
  about 256 tokens to each. ``expert_weight_floor_s`` is that floor, forward; backward is
  BACKWARD_MATMUL_FACTOR × forward, as for the GEMMs. Measured: the grouped expert GEMMs of
  Mixtral 8x7B, Qwen3-30B-A3B and Llama 4 Scout at 128 tokens, forward + backward with the
  gradient accumulation, take 1.07-1.14× (H100 SXM) and 1.26-1.35× (H200) the time their weight
  traffic needs at the copy bandwidth (validation/h100_sxm_moe_layer.csv, h200_moe_layer.csv,
  ``calibration.kernels.expert_floor_ratios``).
* **Fixed cost per MoE layer per micro-batch** (``moe_layer_fixed_s``, forward + backward): the
  router (GEMM, score function, top-k, auxiliary loss), permute and unpermute index kernels,
  the device-to-host copy of the tokens per expert that dropless routing needs before the
  all-to-all and the grouped GEMM can be launched (Megatron-Core ``token_dispatcher.py``
  ``MoEAlltoAllTokenDispatcher``: ``tokens_per_expert`` to the host; the GPU drains while the
  host waits), and the launches of these small kernels. It does not shrink with the tokens.
* **Dispatch and combine.** Each token's top_k copies go to the EP ranks holding its experts:
  the share on peers inside the scale-up domain over NVLink, the rest over the rank's NIC, in
  parallel (``comm.all_to_all_s``). With de-duplication (DeepEP, ``moe_token_dedup``) a token
  crosses to a remote domain once per domain however many of its experts live there, then is
  forwarded over NVLink: E[distinct remote domains] = (D − 1)·(1 − (1 − 1/D)^k) for k uniform
  choices over D domains, capped by group-limited routing at num_limited_groups·max(1, D/G)
  domains (DeepSeek-V3 report, arXiv 2412.19437, Sec. 2.1.2 and 3.2.2: at most 4 nodes per
  token). Dispatch moves 1 + 4/128 bytes per element in FP8 (``moe_fp8_dispatch``), the combine
  bf16.
"""

from __future__ import annotations

import numpy as np

from autoplan.cost.arrays import zeros_like
from autoplan.cost.comm import GroupLink
from autoplan.cost.context import CostContext
from autoplan.cost.fp8 import FP8_PRECISION_CODE
from autoplan.layout import LayoutBatch

BF16_BYTES = 2.0
FP8_DISPATCH_BYTES = 1.0 + 4.0 / 128  # an fp8 element and its share of one fp32 scale per 128 (DeepEP)


def expert_gemm_flops(ctx: CostContext, b: LayoutBatch, tokens: np.ndarray) -> np.ndarray:
    """FLOPs of the (grouped) expert GEMM that sets its efficiency: 2·tokens·top_k·h·f_e/etp,
    times ep/E without grouped GEMM (one expert's tokens)."""
    m, moe = ctx.model, ctx.model.moe
    grouped = 2.0 * tokens * moe.num_experts_per_token * m.hidden_size * moe.expert_ffn_hidden_size / b.etp
    return grouped if ctx.profile.options.moe_grouped_gemm else grouped * b.ep / moe.num_experts


def remote_copies_per_token(ctx: CostContext, link: GroupLink) -> np.ndarray:
    """Copies of one token sent to other scale-up domains: k·(n − k_dom)/n without
    de-duplication; with it E[distinct remote domains], capped by group-limited routing."""
    moe = ctx.model.moe
    n, per_domain, k = link.size, link.ranks_per_domain, float(moe.num_experts_per_token)
    plain = k * (n - per_domain) / np.maximum(n, 1.0)
    domains = np.maximum(n / np.maximum(per_domain, 1.0), 1.0)
    distinct = (domains - 1.0) * (1.0 - (1.0 - 1.0 / domains) ** k)
    if moe.num_expert_groups > 1:
        cap = moe.num_limited_groups * np.maximum(1.0, domains / moe.num_expert_groups)
        distinct = np.minimum(distinct, cap)
    return np.where(ctx.profile.options.moe_token_dedup, distinct, plain)


def dispatch_combine_s(ctx: CostContext, b: LayoutBatch, link: GroupLink, tokens: np.ndarray) -> np.ndarray:
    """One pass's dispatch + combine all-to-all of ``tokens`` tokens per rank over the EP group:
    Σ over (dispatch, combine) of max(local bytes / scale-up bw, remote bytes / NIC bw) + log2(n)·α;
    local = tokens·k·(k_dom − 1)/n·h·B, remote = tokens·copies·h·B (``remote_copies_per_token``)."""
    m, e, cl = ctx.model, ctx.efficiency, ctx.cluster
    n, per_domain = link.size, link.ranks_per_domain
    up = cl.gpu.scale_up_bytes_per_s * e.scale_up_efficiency
    out = cl.nic_bytes_per_s * e.scale_out_efficiency
    local = tokens * m.moe.num_experts_per_token * (per_domain - 1.0) / np.maximum(n, 1.0) * m.hidden_size
    remote = tokens * remote_copies_per_token(ctx, link) * m.hidden_size
    fp8 = (b.precision == FP8_PRECISION_CODE) & ctx.profile.options.moe_fp8_dispatch
    dispatch_bytes = np.where(fp8, FP8_DISPATCH_BYTES, BF16_BYTES)
    latency = np.log2(np.maximum(n, 1.0)) * link.latency_s
    total = sum(np.maximum(local * nbytes / up, remote * nbytes / out) + latency
                for nbytes in (dispatch_bytes, BF16_BYTES))
    return np.where(n > 1, total, 0.0)


def expert_weight_floor_s(ctx: CostContext, b: LayoutBatch) -> np.ndarray:
    """Least forward time of one MoE layer's routed expert GEMMs on one GPU: the local experts'
    weights, expert_per_layer/(ep·etp) elements of 2 B (BF16; 1 B for FP8 layouts, whose GEMMs
    read the quantized copy), read once from HBM at the effective bandwidth (hbm_bytes_per_s ·
    hbm_efficiency). The roofline's memory side (Williams et al. 2009); module doc."""
    element_bytes = np.where(b.precision == FP8_PRECISION_CODE, 1.0, BF16_BYTES)
    local = ctx.params.expert_per_layer / (b.ep * b.etp)
    return local * element_bytes / ctx.effective_hbm_bytes_per_s


def fixed_s(ctx: CostContext, passes: np.ndarray) -> np.ndarray:
    """Fixed seconds of one MoE layer per micro-batch: moe_layer_fixed_s (forward + backward),
    a third more per recomputed forward (``passes`` − 2: the forward is a third of the kernels);
    0 under a full-iteration CUDA graph, which replays the small kernels with no host launches
    and no host sync (``cost.host_dispatch``; their GPU time, µs each, is not counted)."""
    if ctx.training.cuda_graphs == "full_iteration":
        return zeros_like(np.asarray(passes, dtype=float))
    return ctx.efficiency.moe_layer_fixed_s * (1.0 + (passes - 2.0) / 3.0)
