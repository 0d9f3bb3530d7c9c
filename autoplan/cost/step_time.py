"""Step time of a batch of layouts, assembled from two parts that each read few knobs.

The formulas are ``cost.time``'s (per layer and micro-batch), ``cost.data_parallel``'s and
``cost.optimizer_step``'s; this module only groups them so that each runs once per distinct
combination of the knobs it reads (``broadcast.per_group``), and combines the two parts per layout:

* ``micro_batch_parts_s``: one micro-batch on the stage that sets the pace (compute, recompute,
  exposed TP/CP/EP, offload, pipeline sends, the TP floor) and what the schedule makes of it; it
  reads the degrees, the micro-batch, recompute and the schedule, not ZeRO nor the optimizer;
* ``data_parallel_parts_s``: the data-parallel traffic, gradient accumulation, parameter fetch,
  the tied embedding's all-reduce and the optimizer step; it reads the degrees, ZeRO, the
  optimizer and offload, not the micro-batch nor recompute;
* ``time_table``: per layout, what couples them (ZeRO-3's gathers hidden behind the micro-batch's
  compute, the DP collectives behind the last backward and the first forward, the step).

Pipeline (Narayanan et al. SC'21, Sec. 2.2): step = m · t_micro + bubble + exposed DP traffic +
optimizer step; the bubble per schedule in ``cost.schedule``.
"""

from __future__ import annotations

import numpy as np

from autoplan.cost import comm, cp_comm
from autoplan.cost.arrays import stacked, zeros_like
from autoplan.cost.broadcast import per_group
from autoplan.cost.context import CostContext
from autoplan.cost.data_parallel import dp_comm_s
from autoplan.cost.host_dispatch import BACKWARD_LAUNCH_FACTOR, DISPATCH_SHARE_BOUND, host_exposed_s
from autoplan.cost.offload import offload_step_s, param_fetch_s
from autoplan.cost.optimizer_step import optimizer_step_s
from autoplan.cost.overlap import beside_cp_window_s, chunked_exposed_s, overlap_fractions
from autoplan.cost.recompute import full_recompute_share, offload_exposed_s
from autoplan.cost.schedule import (
    bubble_micro_batches,
    chunks_per_rank,
    hides_pipeline_and_expert_comm,
    is_schedule,
    resolved_schedule,
)
from autoplan.cost.shared_terms import layout_stage_params, stage_layer_counts
from autoplan.cost.stages import choose_stage, heaviest_stage
from autoplan.cost.tied_embedding import tied_embedding_allreduce_s
from autoplan.cost.time import (
    BACKWARD_MATMUL_FACTOR,
    BF16_BYTES,
    _layer_bytes,
    _micro_batch_compute_s,
    _per_layer_comm_s,
    backward_scale_up_comm_s,
    grad_accumulation_s,
)
from autoplan.layout import LayoutBatch

STAGE_PARTS = ("compute", "recompute", "tp", "cp", "cp_hidden", "ep", "offload", "host")
LAST_STAGE = np.array([[False], [False], [True]])  # the (first, middle, last) axis: the last stage


@per_group  # once per distinct (tp, cp, mbs, recompute, pp, vpp, ...): not ZeRO (cost.broadcast)
def micro_batch_parts_s(ctx: CostContext, b: LayoutBatch) -> dict[str, np.ndarray]:
    """Seconds of one micro-batch on the stage that takes the longest (the sum of its STAGE_PARTS:
    compute, recompute, exposed TP/CP/EP, offload and host launch time; ``pacing_stage``: 0 first,
    1 middle, 2 last), by part (STAGE_PARTS),
    before gradient accumulation; ``pp``: its pipeline sends; ``tp_floor``: the highest stage's
    floor on its TP collectives (``collective_overhead_s``, ``pp_cross_tp_sync_s``); what the
    schedule makes of it (``bubble_per_micro``, ``chunks``, ``grad_overlap``) and the TP
    collectives' passes and links (``tp_passes``, ``tp_inside_domain``)."""
    e, p, m = ctx.efficiency, ctx.profile, ctx.model
    layers = stage_layer_counts(ctx, b)
    fwd, dense_c, moe_c, recompute_s, head = _micro_batch_compute_s(ctx, b)
    tokens = b.mbs * ctx.training.seq_len / b.cp
    ov = overlap_fractions(ctx)
    st = comm.layout_strides(ctx, b)
    lc = _per_layer_comm_s(ctx, b, st)
    # The first, the middle and the last stage at once, on a leading axis of 3 (one evaluation
    # of each formula, not three: a batch of one pays per numpy call). The head is the last's.
    n = stacked(layers["first"], layers["middle"], layers["last"])
    n_dense = stacked(layers["first_dense"], layers["middle_dense"], layers["last_dense"])
    n_moe = n - n_dense
    compute = n_dense * dense_c + n_moe * moe_c + np.where(LAST_STAGE, head, 0.0)
    full = full_recompute_share(b, n)
    recompute = (n_dense * (full * recompute_s["dense_full"] + recompute_s["dense_selective"])
                 + n_moe * (full * recompute_s["moe_full"] + recompute_s["moe_selective"]))
    layer_tp, layer_ep = lc["tp"] * (1.0 - ov.tp), lc["ep"] * (1.0 - ov.ep)  # a layer's exposed TP, EP
    tp = n * layer_tp
    # A layer's exposed CP exchange: the ring's beyond what the attention hides, and (torchtitan's
    # allgather rotate method) the all-gather's and dK/dV permute's exposed parts (cp_comm).
    layer_ring = np.maximum(0.0, lc["cp"] - e.cp_overlap * (fwd["attention"] + fwd["attention_backward"]))
    cp_link = lc["cp_link"]  # (comm.group_link of the CP group)
    layer_gather = cp_comm.allgather_exposed_layer_s(ctx, b, cp_link, tokens, fwd["attention"],
                                                     fwd["attention_backward"], full)
    layer_cp = layer_ring + layer_gather
    cp = n * layer_cp
    ep = n_moe * layer_ep
    # The host link never carries the CP ring: its window is the compute and the ring's wait.
    wall = beside_cp_window_s(compute, 0.0, cp, False)
    forward = wall / (1.0 + BACKWARD_MATMUL_FACTOR)
    offload = (offload_exposed_s(ctx, b, _layer_bytes(ctx, b, n, n_dense), n, forward, wall - forward)
               if np.count_nonzero(b.offload_layers) else zeros_like(compute))  # 0 without offload, faster
    # The host's launches not hidden behind the layers' GPU work: compute and exposed collectives
    # (the CP ring's exposed wait too: the host launches on while the GPU waits on the ring, so a
    # slower attention that hides more of the ring never shortens a host-bound step).
    layer_comm = layer_tp + layer_cp
    # The forward GPU work after the MoE layer's host sync (host_dispatch, module doc): up to the
    # experts' last GEMM, the dispatch (half of one pass's exposed exchange) and the routed experts'
    # GEMMs; up to the end of the combine, the whole pass's exchange and those GEMMs.
    ep_pass = layer_ep / lc["ep_passes"]
    host = host_exposed_s(ctx, b, n_dense, n_moe, dense_c + layer_comm, moe_c + layer_comm + layer_ep,
                          gpu_moe_experts_f_s=fwd["routed_matmul"] + DISPATCH_SHARE_BOUND * ep_pass,
                          gpu_moe_post_sync_f_s=fwd["routed_matmul"] + ep_pass, moe_ep_s=layer_ep,
                          moe_ep_forward_s=ep_pass)
    # The exchange's hidden time, the ring's and the allgather method's (its gathers and permutes
    # share the links as the ring's sends do): not the stage's time.
    cp_hidden = n * (lc["cp"] - layer_ring + cp_comm.allgather_layer_s(ctx, b, cp_link, tokens, full) - layer_gather)
    stage_time = stacked(compute, recompute, tp, cp, cp_hidden, ep, offload, host).swapaxes(0, 1)  # (3, part, layouts)
    # The middle stage (0 layers where pp < 3) is the busiest interior rank: more layers
    # than an end under the embed-loss split, more MoE layers than a dense-first first stage.
    # The pipeline runs at the pace of its slowest stage (SC'21 Sec. 2.2): the stage whose micro-batch
    # takes the longest, every part counted. Each part is monotone in recompute, overlap, the links and
    # the CUDA graphs, so the pick's time is too; a host-bound stage paces even with less GPU work.
    pick = heaviest_stage(*(compute + recompute + tp + cp + ep + offload + host))
    parts = dict(zip(STAGE_PARTS, choose_stage(pick, *stage_time)))
    h_div = np.where(b.sp > 0, b.tp, 1.0)
    schedule = resolved_schedule(b.pp_schedule, b.vpp, p.pipeline.schedule)
    hidden = hides_pipeline_and_expert_comm(schedule)
    parts["ep"] = np.where(hidden, 0.0, parts["ep"])
    pp_bytes = tokens * m.hidden_size * BF16_BYTES / h_div
    pp_sends = 2.0 * chunks_per_rank(schedule, b.vpp)  # activation forward, its gradient back, per chunk
    parts["pp"] = np.where((b.pp > 1) & ~hidden,
                           pp_sends * comm.pipeline_transfer_s(ctx, st["pp"], b.pp, pp_bytes), 0.0)
    # The pipeline runs at the pace of the highest floor (the stage with the most layers,
    # whichever stage the work picked).
    parts["tp_floor"] = np.maximum.reduce(n * lc["tp_floor"])
    parts["bubble_per_micro"] = bubble_micro_batches(schedule, b.pp, b.vpp, 1.0 / (1.0 + BACKWARD_MATMUL_FACTOR))
    # A pipeline engine that reduces after its schedule (pp_overlaps_grad_reduce false) hides nothing.
    # Under the interleaved schedule each model chunk reduces and gathers on its own (overlap.py).
    parts["grad_overlap"] = np.where((b.pp > 1) & (not p.pipeline.overlaps_grad_reduce), 0.0, ov.grad_reduce)
    parts["chunks"] = np.where(is_schedule(schedule, "interleaved") & (b.pp > 1), b.vpp, 1.0)
    parts["tp_passes"], parts["tp_inside_domain"] = lc["tp_passes"], lc["tp_inside_domain"]
    parts["cp_inside_domain"] = lc["cp_inside_domain"]
    parts["pacing_stage"] = pick.astype(float)
    return parts


@per_group  # once per distinct (tp, pp, dp, zero, optimizer, offload, ...): not mbs nor recompute
def data_parallel_parts_s(ctx: CostContext, b: LayoutBatch) -> dict[str, np.ndarray]:
    """The heaviest stage's data-parallel traffic (``data_parallel.dp_comm_s``: per step
    ``grads``, ``gathers``, ``per_step_floor``; per micro-batch ``per_micro``), its gradient
    accumulation per micro-batch (``time.grad_accumulation_s``), offload's parameter fetch per
    micro-batch (``offload.param_fetch_s``), the tied embedding's all-reduce per step, and the
    optimizer step on the GPU and Muon's (``optimizer_step.optimizer_step_s``; the host step of
    optimizer offload, which hides behind the last backward, is ``time_table``'s)."""
    most = stage_layer_counts(ctx, b)["most"]
    stage_params = layout_stage_params(ctx, b)
    st = comm.layout_strides(ctx, b)
    parts = dict(dp_comm_s(ctx, b, st, stage_params["dense"], stage_params["expert"], most))
    parts["grad_accumulation"] = grad_accumulation_s(ctx, b, stage_params["dense"] + stage_params["expert"])
    parts["fetch"] = param_fetch_s(ctx, b, stage_params, most)  # 0 without offload
    parts["tied_embedding"] = tied_embedding_allreduce_s(ctx, b, st["pp"])
    step = optimizer_step_s(ctx, b, st, stage_params, most)
    parts.update(optimizer=step["optimizer"], muon=step["muon"], owned=step["owned"],
                 host_bytes_per_param=step["host_bytes_per_param"])
    return parts


def step_parts_s(ctx: CostContext, b: LayoutBatch) -> dict[str, np.ndarray]:
    """The named intermediates of the step (seconds; ``grad_acc`` a count): per micro-batch the
    pacing stage's parts, ``tp_wait`` (the TP floor's wait), ``zero3`` (ZeRO-3's exposed gathers),
    ``t_micro``; per step the exposed ``grad_reduce`` and ``param_gather`` (of the totals
    ``grad_reduce_total``, ``param_gather_total``), the ZeRO-3 ``dp_floor``, the ``tied_embedding``
    all-reduce, the ``optimizer``, ``muon`` and ``optimizer_offload`` steps and the ``bubble``.
    ``time_table``'s columns are formed from them (``cost.time_formulas`` shows how)."""
    e, c = ctx.efficiency, ctx.corrections
    ov = overlap_fractions(ctx)
    mb = micro_batch_parts_s(ctx, b)
    dp = data_parallel_parts_s(ctx, b)
    compute = mb["compute"] + dp["grad_accumulation"]
    micro_compute = compute + mb["recompute"]
    # The windows of the data-parallel traffic and of the host copies beside the CP ring
    # (overlap.beside_cp_window_s): the DP group shares the ring's links where both sit on one tier.
    shares = (b.cp > 1) & (mb["cp_inside_domain"] == dp["inside_domain"])
    dp_window = beside_cp_window_s(micro_compute, mb["cp_hidden"], mb["cp"], shares)
    host_window = beside_cp_window_s(micro_compute, 0.0, mb["cp"], False)
    # ZeRO-3's gathers run on their own stream in wall time, host-bound gaps included (as the
    # reduction's windows below): a host-bound micro-batch hides as much whatever its GPU share.
    zero3_exposed = np.maximum(0.0, dp["per_micro"] + dp["fetch"] - e.fsdp_overlap * (dp_window + mb["host"]))
    t_micro = (micro_compute + mb["tp"] + mb["cp"] + mb["ep"] + mb["offload"] + mb["pp"] + zero3_exposed
               + mb["host"])
    tp = mb["tp"]
    sync_wait = zeros_like(tp)
    # The TP collectives' floor: what the micro-batch's time falls short of it is spent waiting
    # in the TP collectives. Skipped where both are neutral (every profile but nanotron's).
    if c.pp_cross_tp_sync_s > 0.0 or c.collective_overhead_s > 0.0:
        sync_wait = np.maximum(0.0, mb["tp_floor"] - t_micro)
        tp = tp + sync_wait
        t_micro = t_micro + sync_wait
    bubble = mb["bubble_per_micro"] * t_micro
    # Gradient reduction hides behind the last micro-batch's backward; the parameter all-gather
    # (ZeRO-1/2, Megatron --overlap-param-gather) behind the first forward of the next step; the
    # tied embedding's gradient all-reduce (cost.tied_embedding) runs after both, exposed.
    # The windows are wall time: they hold the host-bound gaps too (the exposed launch time, shared
    # as the launches are: BACKWARD_LAUNCH_FACTOR in the backward to 1 in the forward).
    host_backward = mb["host"] * (BACKWARD_LAUNCH_FACTOR / (1.0 + BACKWARD_LAUNCH_FACTOR))
    backward_share = BACKWARD_MATMUL_FACTOR / (1.0 + BACKWARD_MATMUL_FACTOR)
    backward_window = dp_window * backward_share + host_backward + backward_scale_up_comm_s(
        b, tp, mb["tp_passes"], mb["tp_inside_domain"], dp["inside_domain"])
    forward_first = dp_window / (1.0 + BACKWARD_MATMUL_FACTOR) + (mb["host"] - host_backward)
    chunks = mb["chunks"]
    grad_reduce = chunked_exposed_s(dp["grads"], backward_window, chunks, b.pp, mb["grad_overlap"])
    param_gather = chunked_exposed_s(dp["gathers"], forward_first, chunks, b.pp, ov.param_gather)
    dp_exposed = grad_reduce + param_gather + dp["per_step_floor"] + dp["tied_embedding"]
    # The optimizer step (autoplan.cost.optimizer_step): on the GPU, or on the host under offload.
    offload = offload_step_s(ctx, b, dp["owned"], dp["host_bytes_per_param"], host_window * backward_share)
    return {"grad_acc": b.grad_acc, "compute": mb["compute"], "grad_accumulation": dp["grad_accumulation"],
            "recompute": mb["recompute"], "tp": mb["tp"], "tp_wait": sync_wait, "cp": mb["cp"], "ep": mb["ep"],
            "pp": mb["pp"], "offload": mb["offload"], "host": mb["host"], "zero3": zero3_exposed, "t_micro": t_micro,
            "bubble_per_micro": mb["bubble_per_micro"], "bubble": bubble,
            "grad_reduce": grad_reduce, "grad_reduce_total": dp["grads"], "param_gather": param_gather,
            "param_gather_total": dp["gathers"], "dp_floor": dp["per_step_floor"],
            "tied_embedding": dp["tied_embedding"], "dp_exposed": dp_exposed, "optimizer": dp["optimizer"],
            "muon": dp["muon"], "optimizer_offload": offload}


def time_table(ctx: CostContext, b: LayoutBatch) -> dict[str, np.ndarray]:
    """Every time term (seconds per step) and the step time."""
    c = ctx.corrections
    s = step_parts_s(ctx, b)
    m_count = s["grad_acc"]
    t_micro, bubble, dp_exposed, offload = s["t_micro"], s["bubble"], s["dp_exposed"], s["optimizer_offload"]
    step = m_count * t_micro + bubble + dp_exposed + s["optimizer"] + s["muon"] + offload + c.step_overhead_s
    return {
        "time_compute_s": m_count * (s["compute"] + s["grad_accumulation"]),
        "time_recompute_s": m_count * s["recompute"],
        "time_tp_exposed_s": m_count * (s["tp"] + s["tp_wait"]),
        "time_cp_exposed_s": m_count * s["cp"],
        "time_ep_exposed_s": m_count * s["ep"],
        "time_pp_exposed_s": m_count * s["pp"],
        "time_offload_exposed_s": m_count * s["offload"],
        "time_host_exposed_s": m_count * s["host"],
        "time_dp_exposed_s": dp_exposed + m_count * s["zero3"],
        "time_bubble_s": bubble,
        "time_optimizer_s": s["optimizer"],
        "time_muon_s": s["muon"],
        "time_optimizer_offload_s": offload,
        "time_overhead_s": np.full_like(b.tp, c.step_overhead_s),
        "step_time_s": step,
        "bubble_fraction": bubble / step,
    }
