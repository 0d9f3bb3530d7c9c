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

PyTorch's ring also merges the per-step SDPA results and accumulates the per-step gradients with
separate ATen element-wise ops, in float32, between the SDPA calls (``ring_merge_s``): the
DTensor op dispatcher runs ``_sdpa_handler`` / ``_templated_ring_attention`` at run time, so
torch.compile never fuses them; Transformer Engine's ring (``ring``) corrects its outputs inside
its own kernels and is not charged this.
"""

from __future__ import annotations

import numpy as np

from autoplan.cost.arrays import zeros_like
from autoplan.cost.comm import GroupLink
from autoplan.cost.context import CostContext
from autoplan.cost.memory import BF16_BYTES
from autoplan.cost.tp_comm import tp_collective_s
from autoplan.layout import LayoutBatch


def exchanged_kv_width(ctx: CostContext) -> float:
    """Width per token of the K (= V) a context-parallel rank exchanges: the query heads × head
    dim where the profile repeats K/V before attention (``cp_kv_repeated``), else ``kv_size``."""
    m = ctx.model
    return float(m.num_attention_heads * m.head_dim if ctx.profile.context_parallel.kv_repeated else m.kv_size)


def ring_layer_s(ctx: CostContext, b: LayoutBatch, link: GroupLink, tokens: np.ndarray,
                 full: np.ndarray) -> np.ndarray:
    """One layer's ring K/V exchanges, all passes: (3 + full)·(cp − 1)·(S_kv/busbw + α), S_kv =
    2·tokens·kv_width/tp·2 B (K and V of the local block in bf16): cp − 1 sends in the forward
    (and again in a fully recomputed forward), K/V and their gradients in the backward (2×).
    Source: Liu et al. 2023, Sec. 3 (ring attention); 0 under the allgather rotate method."""
    step_bytes = 2.0 * tokens * exchanged_kv_width(ctx) / b.tp * BF16_BYTES
    ring = (3.0 + full) * (b.cp - 1.0) * (step_bytes / link.bus_bytes_per_s + link.latency_s)
    return ring if ctx.profile.context_parallel.rotate_method == "ring" else zeros_like(ring)


def _allgather_parts_s(ctx: CostContext, b: LayoutBatch, link: GroupLink,
                       tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(AG, P): the ring all-gather of cp·S_kv (``tp_comm.tp_collective_s``), S_kv =
    2·tokens·kv_width/tp·2 B, and one permute of the dK/dV accumulators, S_dkv/busbw + α with
    S_dkv = 2·tokens·kv_width/tp·``cp_grad_exchange_bytes``."""
    width = exchanged_kv_width(ctx) / b.tp
    gather = tp_collective_s(link, b.cp * 2.0 * tokens * width * BF16_BYTES)
    permute = 2.0 * tokens * width * ctx.profile.context_parallel.grad_exchange_bytes / link.bus_bytes_per_s + link.latency_s
    return gather, permute


# HBM bytes per element of PyTorch's ring attention's own element-wise ops on the CP rank whose
# every step i ≥ 1 has i ≤ rank (the last rank: whole query, first half of the K/V chunk; the
# heaviest, the partial-query ranks touch half the output), torch/distributed/tensor/experimental/
# _attention.py as run by torchtitan at 9dec370 (convert_to_f32, enable_load_balance). Forward
# (_templated_ring_attention, _SDPAMerger): per step the block output cast to float32 (read 2 B,
# write 4 B); per step after the first the merge out − sigmoid(lse_b − lse)·(out − out_b): three
# float32 ops of 12, 8 and 12 B; once the result cast back (4 + 2 B); per step but the last
# torch.cat of the local K and V for the rotater (read 2, write 2 B each). Backward
# (_templated_ring_attention_backward): zeros_like float32 dQ, dK, dV (4 B each); per step but the
# last the K/V torch.cat (4 B each of K, V); step 0 dK, dV += the bf16 block gradient (4 + 2 + 4 B
# each); later steps _partial_update(add) on the chunk (10 B × ½) then torch.cat of the whole
# (8 B): 13 B each of dK, dV; per step torch.cat of the float32 dK, dV for the permute (8 B each),
# dQ += block dQ (10 B); once dQ and the received dK, dV cast to bf16 (6 B each).
RING_CAST_UP_BYTES = 6.0
RING_MERGE_BYTES = 32.0
RING_CAST_DOWN_BYTES = 6.0
RING_KV_CAT_BYTES = 8.0  # K and V of one element position: 2 × (2 + 2)
RING_GRAD_ZEROS_BYTES = 4.0
RING_GRAD_ACCUMULATE_BYTES = 10.0  # float32 += bf16: read 4 + 2, write 4
RING_GRAD_PARTIAL_ACCUMULATE_BYTES = 13.0
RING_GRAD_CAT_BYTES = 8.0
RING_GRAD_CAST_BYTES = 6.0


def ring_merge_bytes(cp: np.ndarray, query_elements: np.ndarray,
                     kv_elements: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(forward, backward) HBM bytes of one layer's ring merge and gradient accumulation for one
    micro-batch on the heaviest CP rank (the byte constants above), E_q the local query (= output)
    elements, E_kv those of the local K (= V):

        forward  = [6·cp + 32·(cp − 1) + 6]·E_q + 8·(cp − 1)·E_kv
        backward = [4 + 10·cp + 6]·E_q + [2·4 + 4·(cp − 1)·2 + 2·10 + 2·13·(cp − 1) + 2·8·cp + 2·6]·E_kv

    i.e. (38·cp − 26)·E_q + 8·(cp − 1)·E_kv and (10·cp + 10)·E_q + (50·cp + 6)·E_kv."""
    forward = ((RING_CAST_UP_BYTES * cp + RING_MERGE_BYTES * (cp - 1.0) + RING_CAST_DOWN_BYTES) * query_elements
               + RING_KV_CAT_BYTES * (cp - 1.0) * kv_elements)
    per_kv = (2.0 * RING_GRAD_ZEROS_BYTES + RING_KV_CAT_BYTES * (cp - 1.0) + 2.0 * RING_GRAD_ACCUMULATE_BYTES
              + 2.0 * RING_GRAD_PARTIAL_ACCUMULATE_BYTES * (cp - 1.0) + 2.0 * RING_GRAD_CAT_BYTES * cp
              + 2.0 * RING_GRAD_CAST_BYTES)
    per_q = RING_GRAD_ZEROS_BYTES + RING_GRAD_ACCUMULATE_BYTES * cp + RING_GRAD_CAST_BYTES
    return forward, per_q * query_elements + per_kv * kv_elements


def ring_merge_s(ctx: CostContext, b: LayoutBatch, tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(forward, backward) seconds of one layer's ring merge and gradient accumulation for one
    micro-batch (``ring_merge_bytes`` / the effective HBM bandwidth), E_q = tokens·a·d/tp, E_kv =
    tokens·``exchanged_kv_width``/tp; 0 outside PyTorch's ring (the allgather rotate method) or
    with cp = 1. They run on the compute stream between the SDPA calls, hidden by nothing."""
    m = ctx.model
    query = tokens * m.num_attention_heads * m.head_dim / b.tp
    kv = tokens * exchanged_kv_width(ctx) / b.tp
    forward, backward = ring_merge_bytes(b.cp, query, kv)
    applies = _allgather_applies(ctx, b)
    bandwidth = ctx.effective_hbm_bytes_per_s
    return np.where(applies, forward / bandwidth, 0.0), np.where(applies, backward / bandwidth, 0.0)


def _allgather_applies(ctx: CostContext, b: LayoutBatch) -> np.ndarray:
    return (ctx.profile.context_parallel.rotate_method == "allgather") & (b.cp > 1)


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
