"""Host (CPU) dispatch time: the launches of eager PyTorch, the syncs that expose them, and the
CUDA graphs that replay them.

**Launches.** Eager PyTorch launches every kernel from Python: the op's Python call, the
dispatcher, autograd's recording and ``cudaLaunchKernel`` take ``host_launch_s`` of host time
each, whatever the kernel's size. A layer's host time per micro-batch is its launches times that,
the launches counted from the layer's structure as Megatron-Core runs it with Transformer
Engine's layer spec (``megatron/core/transformer/transformer_layer.py``,
``models/gpt/gpt_layer_specs.py``; the counts below, forward):

* attention (``ATTENTION_LAUNCHES``): TELayerNormColumnParallelLinear (the norm and the QKV GEMM),
  RoPE on q and k, TEDotProductAttention, TERowParallelLinear, the bias-dropout-add;
* a dense MLP (``DENSE_MLP_LAUNCHES``): TELayerNormColumnParallelLinear (norm and fc1), SwiGLU, fc2,
  the bias-dropout-add;
* a MoE layer: the router (``MOE_ROUTER_LAUNCHES``: norm, router GEMM, fp32 score function, top-k,
  renormalisation, the routing map, the auxiliary loss, as the measured layer's), the dispatcher's
  preprocessing (``MOE_PREPROCESS_LAUNCHES``: tokens per expert, the splits, their all-gather over
  EP and their copies to the host), the dispatch around the experts (``MOE_DISPATCH_LAUNCHES``:
  permute, all-to-all, chunk sorts, SwiGLU, the combine back, unpermute, bias-dropout-add) and the
  experts' GEMMs, two per local expert (``EXPERT_GEMMS_PER_LOCAL_EXPERT``: Transformer Engine's
  GroupedLinear runs one GEMM per expert, transformer_engine/pytorch/module/grouped_linear.py,
  ``general_grouped_gemm``);
* under FP8 one quantization kernel more per GEMM (``FP8_QUANTIZE_LAUNCHES_PER_GEMM``);
* backward ``BACKWARD_LAUNCH_FACTOR`` × the forward's (a GEMM's data and weight gradients, an
  element-wise op's gradient and its accumulation).

**The rule: the host runs ahead except across a sync.** Launches are asynchronous: the host
enqueues a kernel and goes on while the GPU runs the queue, so over a stretch without a
synchronisation the stretch takes max(host, GPU) and the host's time hides behind the GPU's
(PyTorch, "CUDA semantics: asynchronous execution": an operation that copies to the host or
``synchronize`` waits for the queue to drain). Dropless MoE needs the tokens per expert on the
host before it can size the all-to-all and the grouped GEMM: Megatron-Core's
``MoEAlltoAllTokenDispatcher._maybe_dtoh_and_synchronize`` (token_dispatcher.py) copies them at
``cuda_dtoh_point`` and waits on that copy's event (``d2h_event.synchronize()``) in every MoE
layer's forward; the flex (DeepEP) dispatcher likewise waits for its receive counts. The GPU then
drains, and the host starts the next launches from an empty queue: each MoE layer's forward is a
stretch of its own. **Order within that stretch.** A stream runs its kernels in launch order and
none before its launch (PyTorch, "CUDA semantics"), so host and GPU form a two-machine flow shop
with a fixed job order, whose makespan is max over k of (Σ_{i≤k} h_i + Σ_{i≥k} g_i) (Johnson 1954,
"Optimal two- and three-stage production schedules with setup times included", Naval Research
Logistics Quarterly 1(1), the makespan of a given sequence). Megatron-Core syncs at
``before_ep_alltoall`` (token_dispatcher.py ``preprocess``: with ep > 1 the splits are needed for
the all-to-all), so the stretch opens with the dispatch, the local experts' GEMMs and the combine
(A: ``post_sync_launches``, host H_A, GPU G_A: the forward's EP exchange and routed-expert GEMMs),
then the next layer's attention, router and preprocessing (B). With the GPU work of each part
spread over its launches, the makespan's maximum lies at a part's boundary: max(G_f, H_A + G_B,
H_f), so exposed = max(0, H_A − G_A, H_f − G_f). A boundary inside A gives a bound too: by the
last expert GEMM's launch the host has launched at least the experts' (H_E,
``expert_launches``) and the GPU has had at most the dispatch (half of the pass's exchange) and
the expert GEMMs (G_E) to run, so exposed ≥ H_E − G_E, whatever the split of the dispatch's own
launches around the experts. Many experts per GPU make A launch-heavy and GPU-light
(Qwen3-30B-A3B at ep 8: 16 local experts, 4 launches each under fp8): the GPU waits there even
when the whole stretch's GPU work would hide its launches. (G_A and G_E leave out the experts'
casts and SwiGLU, a few percent of them.) The backward knows its splits and holds no sync,
so the micro-batch's backward (and its dense layers' forward) is one stretch:
exposed = max(0, ΣH − ΣG). With no MoE sync (a dense model, capacity-padded MoE: ``drop_and_pad``
skips it) the whole micro-batch is one stretch. G is the layer's GPU time: its compute and its
exposed TP and EP collectives (the collectives run on the GPU's queue too).

**CUDA graphs** (``TrainingSpec.cuda_graphs``, Megatron ``--cuda-graph-impl`` /
``--cuda-graph-scope``; megatron/core/transformer/cuda_graphs.py, full_cuda_graph.py) replay a
captured sequence with one launch: Transformer Engine's ``make_graphed_callables`` graphs of a
scope (attn; moe_router with moe_preprocess) cost one launch forward and one backward per layer
instead of theirs, and the MoE sync stays (the preprocessing's copy moves to before the
all-to-all, ``cuda_dtoh_point``). ``full_iteration`` replays the whole forward-backward: no
launches per layer, no sync, and no eager small-kernel time of the MoE layer either
(``moe_time.fixed_s``, measured host-bound). A graph never adds launches, so graphs never slow a
step.

The host's speed: ``host_launch_s`` is stated for the x86 (Intel Xeon) hosts of DGX H100/B200; a
GPU preset whose host CPU is slower says so in ``host_launch_slowdown`` (Grace, GB200/GB300
NVL72: 2.75, measured on one torch.nn.Linear forward, NVIDIA/TransformerEngine issue #2053).

Not counted: the recomputed forward's launches, TP collectives' launches (their floor is
``collective_overhead_s``) and the optimizer's launches (``step_overhead_s``).
"""

from __future__ import annotations

import numpy as np

from autoplan.cost.arrays import zeros_like
from autoplan.cost.context import CostContext
from autoplan.cost.fp8 import FP8_PRECISION_CODE
from autoplan.layout import LayoutBatch

ATTENTION_LAUNCHES = 7.0
DENSE_MLP_LAUNCHES = 5.0
MOE_ROUTER_LAUNCHES = 15.0
MOE_PREPROCESS_LAUNCHES = 9.0
MOE_DISPATCH_LAUNCHES = 12.0
EXPERT_GEMMS_PER_LOCAL_EXPERT = 2.0
ATTENTION_GEMMS = 2.0  # QKV and the output projection
DENSE_MLP_GEMMS = 2.0  # fc1 and fc2
FP8_QUANTIZE_LAUNCHES_PER_GEMM = 1.0
BACKWARD_LAUNCH_FACTOR = 2.0
GRAPH_LAUNCHES = 1.0  # one replay per captured scope and pass
# The dispatch's share of a pass's EP exchange, at most: it moves no more bytes than the combine
# (moe_time.dispatch_combine_s: bf16 or fp8 dispatch, bf16 combine) with the same latency term.
DISPATCH_SHARE_BOUND = 0.5
# The scopes of each TrainingSpec.cuda_graphs value (specs.training.CUDA_GRAPHS).
GRAPHED_SCOPES = {"none": (), "attn": ("attn",), "moe_router,moe_preprocess": ("moe_router",),
                  "attn,moe_router,moe_preprocess": ("attn", "moe_router"), "full_iteration": ("full_iteration",)}


def _scoped(launches: np.ndarray | float, graphed: bool) -> np.ndarray | float:
    """A scope's forward launches, or the one replay of its graph."""
    return np.minimum(launches, GRAPH_LAUNCHES) if graphed else launches


def forward_launches(ctx: CostContext, b: LayoutBatch) -> tuple[np.ndarray, np.ndarray]:
    """Forward launches of one (dense, MoE) layer per micro-batch, after the setup's CUDA graphs
    (module doc: the counts, + one quantization per GEMM under fp8; ``full_iteration``: 0)."""
    scopes = GRAPHED_SCOPES[ctx.training.cuda_graphs]
    quantize = np.where(b.precision == FP8_PRECISION_CODE, FP8_QUANTIZE_LAUNCHES_PER_GEMM, 0.0)
    attention = _scoped(ATTENTION_LAUNCHES + ATTENTION_GEMMS * quantize, "attn" in scopes)
    dense = attention + DENSE_MLP_LAUNCHES + DENSE_MLP_GEMMS * quantize
    moe = zeros_like(dense)
    if ctx.model.moe is not None:
        local_gemms = EXPERT_GEMMS_PER_LOCAL_EXPERT * ctx.model.moe.num_experts / b.ep
        router = _scoped(MOE_ROUTER_LAUNCHES + MOE_PREPROCESS_LAUNCHES, "moe_router" in scopes)
        moe = attention + router + MOE_DISPATCH_LAUNCHES + local_gemms * (1.0 + quantize)
    if "full_iteration" in scopes:
        return zeros_like(dense), zeros_like(moe)
    return dense, moe


def expert_launches(ctx: CostContext, b: LayoutBatch) -> np.ndarray:
    """Forward launches of a MoE layer's local experts: EXPERT_GEMMS_PER_LOCAL_EXPERT GEMMs per
    local expert (E/ep), one quantization each under fp8; 0 under a full-iteration graph."""
    quantize = np.where(b.precision == FP8_PRECISION_CODE, FP8_QUANTIZE_LAUNCHES_PER_GEMM, 0.0)
    local_gemms = EXPERT_GEMMS_PER_LOCAL_EXPERT * ctx.model.moe.num_experts / b.ep
    return np.where(ctx.training.cuda_graphs == "full_iteration", 0.0, local_gemms * (1.0 + quantize))


def post_sync_launches(ctx: CostContext, b: LayoutBatch) -> np.ndarray:
    """Forward launches of a MoE layer from its host sync (``before_ep_alltoall``) to the end of
    the combine: the dispatch's (MOE_DISPATCH_LAUNCHES) and the local experts'
    (``expert_launches``) (module doc, part A); 0 under a full-iteration graph."""
    return _post_sync_launches(ctx, expert_launches(ctx, b))


def _post_sync_launches(ctx: CostContext, experts: np.ndarray) -> np.ndarray:
    """``post_sync_launches`` from the local experts' launches (``expert_launches``, already 0
    under a full-iteration graph)."""
    dispatch = 0.0 if ctx.training.cuda_graphs == "full_iteration" else MOE_DISPATCH_LAUNCHES
    return dispatch + experts


def host_syncs_per_moe_layer(ctx: CostContext) -> bool:
    """Whether each MoE layer's forward waits on the host for its token counts: dropless routing
    (no ``moe_capacity_factor``) outside a full-iteration graph (module doc)."""
    return (ctx.model.moe is not None and ctx.training.moe_capacity_factor is None
            and ctx.training.cuda_graphs != "full_iteration")


def host_exposed_s(ctx: CostContext, b: LayoutBatch, n_dense: np.ndarray, n_moe: np.ndarray,
                   gpu_dense_s: np.ndarray, gpu_moe_s: np.ndarray, *,
                   gpu_moe_experts_f_s: np.ndarray | float, gpu_moe_post_sync_f_s: np.ndarray | float,
                   moe_ep_s: np.ndarray | float = 0.0, moe_ep_forward_s: np.ndarray | float = 0.0) -> np.ndarray:
    """Host launch time of one micro-batch on a stage not hidden behind its GPU work, seconds.
    H = host_launch_s × the GPU preset's host_launch_slowdown (its host CPU) × launches (forward F, backward BACKWARD_LAUNCH_FACTOR·F); G = the layer's
    GPU seconds (``gpu_*_s``, forward + backward; a third forward). With a sync per MoE layer:
    n_moe·max(0, H_E − G_E, H_A − G_A, H_f − G_f) + max(0, n_dense·(H_df − G_df) + Σ_backward (H_b − G_b)),
    H_E = the local experts' launches (``expert_launches``) and G_E the forward GPU seconds up to
    their last (``gpu_moe_experts_f_s``: the dispatch and the expert GEMMs), H_A = the launches
    from the sync to the combine (``post_sync_launches``) and G_A their forward GPU seconds
    (``gpu_moe_post_sync_f_s``); without: max(0, ΣH − ΣG) over the micro-batch (module doc).
    A MoE layer's exposed EP exchange (``moe_ep_s``, inside ``gpu_moe_s``) splits by its passes,
    not by thirds: the forward holds ``moe_ep_forward_s`` of it, as its G_E and G_A do, and the
    backward the rest, so that hiding more of the exchange never adds more host exposure than it
    removes GPU time (tests/property: more overlap never slows a step)."""
    dense_f, moe_f = forward_launches(ctx, b)
    launch = ctx.efficiency.host_launch_s * ctx.cluster.gpu.host_launch_slowdown
    host_dense_f, host_moe_f = launch * dense_f, launch * moe_f
    third = 1.0 / (1.0 + BACKWARD_LAUNCH_FACTOR)
    gpu_dense_f, gpu_moe_f = third * gpu_dense_s, third * (gpu_moe_s - moe_ep_s) + moe_ep_forward_s
    backward = (n_dense * (BACKWARD_LAUNCH_FACTOR * host_dense_f - (gpu_dense_s - gpu_dense_f))
                + n_moe * (BACKWARD_LAUNCH_FACTOR * host_moe_f - (gpu_moe_s - gpu_moe_f)))
    if host_syncs_per_moe_layer(ctx):
        expert_count = expert_launches(ctx, b)  # counted once for both bounds
        experts = launch * expert_count - gpu_moe_experts_f_s
        post_sync = launch * _post_sync_launches(ctx, expert_count) - gpu_moe_post_sync_f_s
        per_moe = n_moe * np.maximum(np.maximum(0.0, host_moe_f - gpu_moe_f), np.maximum(experts, post_sync))
        return per_moe + np.maximum(0.0, n_dense * (host_dense_f - gpu_dense_f) + backward)
    return np.maximum(0.0, n_dense * (host_dense_f - gpu_dense_f) + n_moe * (host_moe_f - gpu_moe_f) + backward)
