"""Time of a MoE layer beyond its FLOPs: grouped-GEMM size, fixed cost, token dispatch.

* **Grouped GEMM.** Megatron-Core ``--moe-grouped-gemm`` (Transformer Engine ``GroupedLinear``)
  and torchtitan (``torch._grouped_mm``) run all local experts' tokens in one kernel, so the
  GEMM efficiency follows the size of that grouped GEMM: each EP rank receives on average
  tokens·top_k routed copies (balanced routing), F = 2·tokens·top_k·h·f_e/etp. Without it
  (``TrainerOptions.moe_grouped_gemm`` off, a loop over experts) F is one expert's share,
  ·ep/E of that.
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


def fixed_s(ctx: CostContext, passes: np.ndarray) -> np.ndarray:
    """Fixed seconds of one MoE layer per micro-batch: moe_layer_fixed_s (forward + backward),
    a third more per recomputed forward (``passes`` − 2: the forward is a third of the kernels)."""
    return ctx.efficiency.moe_layer_fixed_s * (1.0 + (passes - 2.0) / 3.0)
