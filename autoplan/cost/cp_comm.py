"""Context-parallel K/V exchange of one layer, and what the attention hides of it.

Two ways a trainer moves the K/V blocks of ring attention (the profile's ``cp_rotate_method``):

* ``ring`` (Liu et al. 2023, arXiv 2310.01889, Sec. 3; Megatron-Core / Transformer Engine
  ``AttnFuncWithCPAndKVP2P``): cp − 1 point-to-point K/V sends per forward, each overlapped with
  the previous block's attention; the backward sends K/V and their gradients. What the attention
  does not hide is costed against ``cp_overlap`` of the layer's whole attention (``ring_layer_s``).
* ``allgather`` (PyTorch's context parallel, torch/distributed/tensor/experimental/_attention.py,
  ``_templated_ring_attention`` with ``_AllGatherRotater``, the default ``_ContextParallelOptions.
  rotate_method``; torchtitan's ``experimental.context_parallel_rotate_method`` default
  "allgather"): one all-gather of every rank's K/V, launched before the first (diagonal) SDPA call
  and waited for before the second, so only that call hides it. The backward
  (``_templated_ring_attention_backward``) gathers K/V again the same way and passes the dK/dV
  accumulators round the ring with one permute per step (``_AllToAllRotater`` for ``dkv_rotater``,
  whatever the rotate method), in float32 (``accum_dtype`` under ``convert_to_f32``): the permute
  after step i is waited for after step i + 1's SDPA backward, the last after the loop.
  Under the head-tail load balance (``enable_load_balance``) every step computes the same two
  c×c blocks (c = s/(2·cp)), so each SDPA call is 1/cp of the layer's attention pass.

The exchanged K/V has the query's heads where the model repeats K/V before attention
(``cp_kv_repeated``: torchtitan's Llama ``repeat_kv`` before ``F.scaled_dot_product_attention``,
torchtitan/models/llama/model.py, Attention.forward), else the KV heads (``ModelSpec.kv_size``).
"""

from __future__ import annotations

import numpy as np

from autoplan.cost.comm import GroupLink
from autoplan.cost.context import CostContext
from autoplan.cost.memory import BF16_BYTES
from autoplan.cost.tp_comm import tp_collective_s
from autoplan.layout import LayoutBatch


def exchanged_kv_width(ctx: CostContext) -> float:
    """Width per token of the K (= V) a context-parallel rank exchanges: the query heads × head
    dim where the profile repeats K/V before attention (``cp_kv_repeated``), else ``kv_size``."""
    m = ctx.model
    return float(m.num_attention_heads * m.head_dim if ctx.profile.cp_kv_repeated else m.kv_size)


def ring_layer_s(ctx: CostContext, b: LayoutBatch, link: GroupLink, tokens: np.ndarray,
                 full: np.ndarray) -> np.ndarray:
    """One layer's ring K/V exchanges, all passes: (3 + full)·(cp − 1)·(S_kv/busbw + α), S_kv =
    2·tokens·kv_width/tp·2 B (K and V of the local block in bf16): cp − 1 sends in the forward
    (and again in a fully recomputed forward), K/V and their gradients in the backward (2×).
    Source: Liu et al. 2023, Sec. 3 (ring attention); 0 under the allgather rotate method."""
    step_bytes = 2.0 * tokens * exchanged_kv_width(ctx) / b.tp * BF16_BYTES
    ring = (3.0 + full) * (b.cp - 1.0) * (step_bytes / link.bus_bytes_per_s + link.latency_s)
    return np.where(ctx.profile.cp_rotate_method == "ring", ring, 0.0)


def _allgather_parts_s(ctx: CostContext, b: LayoutBatch, link: GroupLink,
                       tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(AG, P): the ring all-gather of cp·S_kv (``tp_comm.tp_collective_s``), S_kv =
    2·tokens·kv_width/tp·2 B, and one permute of the dK/dV accumulators, S_dkv/busbw + α with
    S_dkv = 2·tokens·kv_width/tp·``cp_grad_exchange_bytes``."""
    width = exchanged_kv_width(ctx) / b.tp
    gather = tp_collective_s(link, b.cp * 2.0 * tokens * width * BF16_BYTES)
    permute = 2.0 * tokens * width * ctx.profile.cp_grad_exchange_bytes / link.bus_bytes_per_s + link.latency_s
    return gather, permute


def _allgather_applies(ctx: CostContext, b: LayoutBatch) -> np.ndarray:
    return (ctx.profile.cp_rotate_method == "allgather") & (b.cp > 1)


def allgather_layer_s(ctx: CostContext, b: LayoutBatch, link: GroupLink, tokens: np.ndarray,
                      full: np.ndarray) -> np.ndarray:
    """One layer's K/V all-gathers and dK/dV permutes under the allgather rotate method, all
    passes of one micro-batch, hidden or not: (2 + full)·AG + cp·P (``_allgather_parts_s``;
    0 under the ring method or with cp = 1)."""
    gather, permute = _allgather_parts_s(ctx, b, link, tokens)
    return np.where(_allgather_applies(ctx, b), (2.0 + full) * gather + b.cp * permute, 0.0)


def allgather_exposed_layer_s(ctx: CostContext, b: LayoutBatch, link: GroupLink, tokens: np.ndarray,
                              attention_forward_s: np.ndarray, attention_backward_s: np.ndarray,
                              full: np.ndarray) -> np.ndarray:
    """Seconds of one layer's K/V exchange that the attention does not hide under the allgather
    rotate method (module doc), all passes of one micro-batch:

        (1 + full)·max(0, AG − F/cp) + max(0, AG − B/cp) + (cp − 1)·max(0, P − B/cp) + P

    AG, P: the K/V all-gather and one dK/dV permute (``_allgather_parts_s``); F, B: the layer's
    attention forward and backward (``time.attention_s``), of which the first SDPA call is 1/cp.
    0 under the ring method or with cp = 1."""
    gather, permute = _allgather_parts_s(ctx, b, link, tokens)
    forward_call, backward_call = attention_forward_s / b.cp, attention_backward_s / b.cp
    exposed = ((1.0 + full) * np.maximum(0.0, gather - forward_call) + np.maximum(0.0, gather - backward_call)
               + (b.cp - 1.0) * np.maximum(0.0, permute - backward_call) + permute)
    return np.where(_allgather_applies(ctx, b), exposed, 0.0)
