"""Per-GPU memory of the first, a middle (interior) and the last pipeline stage, each term
evaluated once per distinct combination of the knobs it reads, then added per layout.

The terms are ``cost.memory``'s (per layer and micro-batch), ``cost.model_states``' and
``cost.schedule``'s (what is in flight). The product that sets the activations, bytes per layer
(the micro-batch's knobs: tp, sp, cp, mbs, recompute, precision) × layer-activations in flight
(the pipeline's: pp, vpp, grad_acc, schedule), is formed per layout from its two factors, each
computed by ``broadcast.per_group`` on its own few distinct values. Each term is evaluated for
the three stages at once (``*_by_stage``: ``shared_terms.STAGES`` on a leading axis of 3, one
numpy call where there were three; ``stage_memory`` and the like give one stage's row):

* ``state_terms_by_stage``: the model states on the GPU (weights, gradients, master weights,
  optimizer states), what offload keeps on the host, and the buffers that scale with one layer's
  parameters (ZeRO-3's gathered layer, the sharded gradients' transient);
* ``layer_bytes_by_stage``: one layer's activation bytes under the layout's recompute, and the
  working bytes recompute re-materialises in backward;
* ``shared_terms.in_flight_by_stage``: the layer-activations in flight;
* ``buffer_bytes_by_stage``: the embedding output, logits and loss, the TP all-gather and MoE
  dispatch buffers;
* ``memory_by_stage``: the activations, the communication buffers, the allocator's reserve
  (which scales with every transient term) and each stage's total; ``memory_table``: per layout,
  each stage's terms, the peak and its stage, and the firm peak (the peak less what the allocator
  can give back when memory runs out).

Each total is summed in ``MEMORY_TERMS`` order, the model states first, so that it is never below
their sum (``search.prune`` relies on it to the last bit).
"""

from __future__ import annotations

import numpy as np

from autoplan.cost.arrays import select, stacked, zeros_like
from autoplan.cost.broadcast import per_group
from autoplan.cost.context import CostContext
from autoplan.cost.memory import (
    BF16_BYTES,
    MEMORY_TERMS,
    TRANSIENT_TERMS,
    layer_activation_bytes,
    moe_dispatch_bytes,
    selective_module_bytes,
)
from autoplan.cost.loss_kernel import loss_bytes_per_logit
from autoplan.cost.model_states import sharded_gradient_transient_bytes, zero3_gathered_bytes
from autoplan.cost.recompute import OFFLOAD_STAGING_LAYERS, full_recompute_share, offloaded_share
from autoplan.cost.shared_terms import (
    STAGES,
    in_flight_by_stage,
    model_states_by_stage,
    of_stage,
    params_by_stage,
    stage_layer_counts,
)
from autoplan.cost.stages import choose_stage, heaviest_stage
from autoplan.layout import LayoutBatch

STATE_TERMS = ("weights", "gradients", "master_weights", "optimizer_states")
FIRST_STAGE = np.array([[True], [False], [False]])  # of STAGES (shared_terms): the first stage
# The stages that exist: the middle one only where pp >= 3 (there is no interior rank).
ENDS = np.array([[True], [False], [True]])


def _on_rank(b: LayoutBatch, terms: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """``terms`` of each stage (STAGES) as they are on the stage's rank: the middle stage's are 0
    where pp < 3 (there is no interior rank)."""
    exists = ENDS | (b.pp >= 3)
    # (where every layout has its interior rank, a float64 term of each stage is kept as it is)
    every, shape = np.count_nonzero(exists) == exists.size, exists.shape
    # (``getattr(value, "shape", ())``: np.shape of an array or a number, without its dispatch)
    return {name: value if every and getattr(value, "shape", ()) == shape and getattr(value, "dtype", None) == np.float64
            else np.where(exists, value, 0.0) for name, value in terms.items()}


@per_group  # once per distinct (tp, pp, dp, zero, optimizer, offload, ...): cost.broadcast
def state_terms_by_stage(ctx: CostContext, b: LayoutBatch) -> dict[str, np.ndarray]:
    """Bytes per GPU of each stage (STAGES of ``StageLayers``): the model states on the GPU
    (STATE_TERMS; offload, ``Layout.offload``, moves some to the host: never more GPU bytes) and
    ``states`` their sum; ``host``: what offload keeps on the host; ``zero3``: ZeRO-3's gathered
    layer and the sharded gradients' transient, of one layer's parameters."""
    counts = stage_layer_counts(ctx, b)
    n_layers = stacked(counts["first"], counts["middle"], counts["last"])
    dense_params, expert_params = params_by_stage(ctx, b)
    terms, host = model_states_by_stage(ctx, b)  # of params_by_stage (shared_terms)
    out = {name: terms[name] for name in STATE_TERMS}
    out["states"] = sum(out[name] for name in STATE_TERMS)
    out["host"] = host
    one_layer_params = (dense_params + expert_params) / np.maximum(n_layers, 1.0)
    zero3 = np.where(b.zero >= 3, zero3_gathered_bytes(ctx.profile, one_layer_params), 0.0)
    out["zero3"] = zero3 + sharded_gradient_transient_bytes(ctx, b, one_layer_params)
    return _on_rank(b, out)


@per_group  # once per distinct (tp, sp, cp, mbs, recompute, precision, ...): cost.broadcast
def layer_bytes_by_stage(ctx: CostContext, b: LayoutBatch) -> dict[str, np.ndarray]:
    """One layer's activation bytes on each stage (STAGES) for one micro-batch under the layout's
    recompute (``per_layer``: ``memory.layer_activation_bytes`` of its dense and MoE layers,
    weighted by their shares of the stage; full recompute keeps only the input of its share of
    the layers, recompute_layers), and ``working``: what recompute re-materialises one layer at a
    time in backward (full keeps the layer input and rebuilds the rest; selective rebuilds what it
    dropped). The stage's layers are read only where they matter (MoE layers, recompute_layers):
    elsewhere each term is one array, the same on every stage."""
    p, m = ctx.profile, ctx.model
    layers = lambda suffix: stacked(*(stage_layer_counts(ctx, b)[f"{s}{suffix}"] for s in STAGES))  # noqa: E731
    acts = {mode: layer_activation_bytes(ctx, b, mode) for mode in ("none", "selective")}
    acts["selective"] = selective_module_bytes(ctx, b, acts)
    act_none, act_sel = acts["none"], acts["selective"]
    moe_share = 0.0
    if m.moe is not None:  # (read only where needed)
        n_layers, n_dense = layers(""), layers("_dense")
        moe_share = np.where(n_layers > 0, (n_layers - n_dense) / np.maximum(n_layers, 1.0), 0.0)
    mean_none = act_none[0] * (1 - moe_share) + act_none[1] * moe_share
    mean_sel = act_sel[0] * (1 - moe_share) + act_sel[1] * moe_share
    h_div = np.where(b.sp > 0, b.tp, 1.0)
    tokens = b.mbs * ctx.training.seq_len / b.cp
    full_input = tokens * p.recompute.full_recompute_input_bytes_per_h * m.hidden_size / h_div
    full_share = full_recompute_share(b, lambda: layers(""))
    mean_full = full_share * full_input + (1.0 - full_share) * mean_none
    per_layer = select([b.recompute == 0, b.recompute == 1], [mean_none, mean_sel], mean_full)
    working = select([(b.recompute == 2) & (full_share > 0), b.recompute == 1],
                        [np.maximum(mean_none - full_input, 0.0), mean_none - mean_sel], 0.0)
    return {"per_layer": per_layer, "working": working}


def stage_layer_bytes(ctx: CostContext, b: LayoutBatch, stage: str) -> dict[str, np.ndarray]:
    """``layer_bytes_by_stage`` of one stage."""
    return of_stage(layer_bytes_by_stage(ctx, b), stage)


@per_group  # once per distinct (tp, sp, cp, mbs, pp, ...): cost.broadcast
def buffer_bytes_by_stage(ctx: CostContext, b: LayoutBatch) -> dict[str, np.ndarray]:
    """Bytes per GPU of each stage (STAGES) for one micro-batch besides the layers' activations:
    ``embedding_output`` (first stage), ``logits_and_loss`` (last stage, and the first where
    pp = 1), ``tp_buffer`` (the TP all-gather's full-sequence buffer) and ``moe_dispatch``
    (``memory.moe_dispatch_bytes``, MoE models only)."""
    m = ctx.model
    tokens = b.mbs * ctx.training.seq_len / b.cp
    h_div = np.where(b.sp > 0, b.tp, 1.0)
    embedding_output = tokens * m.hidden_size * BF16_BYTES / h_div
    logits = tokens * m.vocab_size / b.tp * loss_bytes_per_logit(ctx)  # eager or compiled: cost.loss_kernel
    # Each MTP depth computes its own vocab-sized logits and loss on the last stage (DeepSeek-V3 Sec. 2.2).
    mtp_logits = logits * (1.0 + m.num_mtp_layers) if m.num_mtp_layers else logits
    out = {"embedding_output": np.where(FIRST_STAGE, embedding_output, 0.0),
           "logits_and_loss": stacked(np.where(b.pp == 1, logits, 0.0), zeros_like(logits), mtp_logits),
           "tp_buffer": np.where(b.tp > 1, tokens * m.hidden_size * BF16_BYTES, 0.0)}
    if m.moe is not None:
        layers = stage_layer_counts(ctx, b)
        moe_layers = stacked(*(layers[s] - layers[f"{s}_dense"] for s in STAGES))
        out["moe_dispatch"] = moe_dispatch_bytes(ctx, b, tokens, moe_layers)
    return _on_rank(b, out)


def stage_buffer_bytes(ctx: CostContext, b: LayoutBatch, stage: str) -> dict[str, np.ndarray]:
    """``buffer_bytes_by_stage`` of one stage."""
    return of_stage(buffer_bytes_by_stage(ctx, b), stage)


def memory_by_stage(ctx: CostContext, b: LayoutBatch) -> dict[str, np.ndarray]:
    """Every memory term (bytes per GPU, MEMORY_TERMS) of each stage (STAGES: (3, layouts)
    arrays), its ``total``, ``host`` and ``firm`` (the total less the allocator's cache,
    ``memory_table``)."""
    c = ctx.corrections
    states = state_terms_by_stage(ctx, b)
    layer, buffers = layer_bytes_by_stage(ctx, b), buffer_bytes_by_stage(ctx, b)
    terms = {name: states[name] for name in STATE_TERMS}
    # In flight under the schedule, with Corrections.pp_extra_layers_per_microbatch (in_flight.py).
    flying = kept = in_flight_by_stage(ctx, b)
    host = states["host"]
    exists = ENDS | (b.pp >= 3)
    # Offload (offload_layers): the offloaded layers' activations leave the GPU but for the one
    # layer in transfer (recompute.OFFLOAD_STAGING_LAYERS).
    # The host holds what left (Megatron-Core cpu_offload.py: pinned CPU tensors per offloaded layer).
    if np.count_nonzero(b.offload_layers):  # (the same result without the arithmetic when nothing is offloaded)
        staging = np.where(b.offload_layers > 0, OFFLOAD_STAGING_LAYERS, 0.0)
        counts = stage_layer_counts(ctx, b)
        share = offloaded_share(b, stacked(*(counts[s] for s in STAGES)))
        kept = flying * (1.0 - share) + staging
        host = host + np.where(exists, layer["per_layer"] * flying * share, 0.0)
    terms["activations"] = np.where(exists, layer["per_layer"] * kept + layer["working"], 0.0)
    terms["embedding_output"], terms["logits_and_loss"] = buffers["embedding_output"], buffers["logits_and_loss"]
    comm = states["zero3"] + buffers["tp_buffer"]
    terms["communication_buffers"] = comm + buffers["moe_dispatch"] if "moe_dispatch" in buffers else comm
    # The allocator's fragmentation scales with what is allocated and freed every step
    # (memory.transient_bytes); the reserve adds the context and library workspaces.
    cache = c.allocator_overhead * sum(terms[name] for name in TRANSIENT_TERMS)
    terms["reserve"] = np.where(exists, cache + c.memory_reserve_bytes, 0.0)
    total = states["states"]
    for name in MEMORY_TERMS[len(STATE_TERMS):]:
        total = total + terms[name]
    terms["total"], terms["host"] = total, host
    terms["firm"] = total - cache  # (0 on a middle stage where pp < 3: its transient terms are)
    # What torch.cuda.max_memory_allocated reports: the tensors alone, without the allocator's
    # cache and the CUDA context / NCCL workspaces the reserve adds (neither is a tensor).
    terms["allocated"] = total - terms["reserve"]
    shape = (len(STAGES), len(b))  # (a term the same on every stage, one array: copied to each)
    return {name: value if getattr(value, "shape", ()) == shape else np.broadcast_to(value, shape).copy()
            for name, value in terms.items()}


def stage_memory(ctx: CostContext, b: LayoutBatch, stage: str) -> dict[str, np.ndarray]:
    """``memory_by_stage`` of one stage."""
    return of_stage(memory_by_stage(ctx, b), stage)


def _largest(stages: np.ndarray) -> np.ndarray:
    """Per layout, the largest of the first, middle and last stage's figure (rows of ``stages``)."""
    first, middle, last = stages
    return np.maximum(np.maximum(first, middle), last)


# (term, column name) of each stage's columns: each stage's MEMORY_TERMS and its total.
STAGE_COLUMNS = tuple(tuple((name, f"mem_{stage}_{name}_bytes") for name in (*MEMORY_TERMS, "total")) for stage in STAGES)


def memory_table(ctx: CostContext, b: LayoutBatch) -> dict[str, np.ndarray]:
    """Per-stage terms, totals, the peak over stages and which stage holds it. The middle
    stage's terms are 0 where pp < 3 (there is no interior rank).

    ``firm_peak_memory_bytes``: the largest over the stages of a stage's total less its cached
    share (``allocator_overhead`` × its transient bytes), the least the run needs. When cudaMalloc
    fails, PyTorch's caching allocator frees cached blocks and retries before it raises out of
    memory (c10/cuda/CUDACachingAllocator.cpp, ``DeviceCachingAllocator::malloc``:
    ``release_available_cached_blocks``, then ``release_cached_blocks``), so a reserved peak above
    the card is not yet an OOM; only segments with no live block go back, so the firm peak is a
    lower bound: between it and the reserved peak a run may go on in the allocator's
    free-and-retry regime (slow: ``evaluate.memory_pressure_s``) or fail.

    ``peak_allocated_memory_bytes``: the largest stage total less its whole reserve (the cache and
    ``memory_reserve_bytes``: CUDA context, NCCL and library workspaces), what
    ``torch.cuda.max_memory_allocated`` reports; ``peak_memory_bytes`` is the reserved figure
    (``torch.cuda.max_memory_reserved`` plus the context), and allocated ≤ firm ≤ reserved."""
    layers = stage_layer_counts(ctx, b)
    terms = memory_by_stage(ctx, b)
    out: dict[str, np.ndarray] = {}
    for i, names in enumerate(STAGE_COLUMNS):
        for name, column in names:
            out[column] = terms[name][i]
    out["peak_memory_bytes"] = _largest(terms["total"])
    out["firm_peak_memory_bytes"] = _largest(terms["firm"])
    out["peak_allocated_memory_bytes"] = _largest(terms["allocated"])
    out["host_memory_bytes"] = _largest(terms["host"])
    out["peak_stage"] = choose_stage(heaviest_stage(*terms["total"]), 0.0, layers["middle_rank"], b.pp - 1.0)
    out["layers_first_stage"] = layers["first"]
    out["layers_last_stage"] = layers["last"]
    return out
