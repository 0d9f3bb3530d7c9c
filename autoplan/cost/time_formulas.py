"""The formulas of the time terms (``cost.formula``): each an expression over intermediates that
``cost.step_time.step_parts_s`` and the per-layer functions of ``cost.time`` compute, so that the
expression evaluated on them is the column ``time_<term>_s``. The pacing stage is the one whose
micro-batch takes the longest, every part counted (``step_time.micro_batch_parts_s``).
"""

from __future__ import annotations

import numpy as np

from autoplan.cost import comm, cp_comm
from autoplan.cost.context import CostContext
from autoplan.cost.evaluate import MEMORY_PRESSURE_RAMP
from autoplan.cost.formula import Formula, Quantity
from autoplan.cost.model_states import owned_split
from autoplan.cost.optimizer import state_bytes_per_param, step_bytes_per_param
from autoplan.cost.overlap import overlap_fractions
from autoplan.cost.recompute import full_recompute_share
from autoplan.cost.schedule import chunks_per_rank, hides_pipeline_and_expert_comm, resolved_schedule
from autoplan.cost.shared_terms import layout_stage_params, stage_layer_counts
from autoplan.cost.stage_memory import memory_table
from autoplan.cost.stages import choose_stage
from autoplan.cost.step_time import micro_batch_parts_s, step_parts_s, time_table
from autoplan.cost.time import (
    BF16_BYTES,
    TP_COLLECTIVES_PER_PASS,
    _micro_batch_compute_s,
    _per_layer_comm_s,
)
from autoplan.cost.tp_comm import tp_collective_s
from autoplan.layout import OFFLOADS, LayoutBatch

Values = dict[str, np.ndarray]
STAGES = ("first", "middle", "last")


def pacing_stage(ctx: CostContext, b: LayoutBatch) -> Values:
    """The pacing stage's layers (``layers``, ``n_dense``, ``n_moe``), per-layer compute
    (``t_layer_dense``, ``t_layer_moe``), LM head (``t_head``, last stage only), per-layer
    recompute and the stage's full-recompute share: what ``micro_batch_parts_s`` picks from."""
    layers = stage_layer_counts(ctx, b)
    fwd, dense_c, moe_c, re, head = _micro_batch_compute_s(ctx, b)
    per_stage = {}
    for name in STAGES:
        n, n_dense = layers[name], layers[f"{name}_dense"]
        extra = head if name == "last" else np.zeros(len(b))
        per_stage[name] = {"layers": n, "n_dense": n_dense, "n_moe": n - n_dense, "t_head": extra,
                           "full_share": full_recompute_share(b, n)}
    pick = micro_batch_parts_s(ctx, b)["pacing_stage"]  # the stage micro_batch_parts_s paces by
    out = {k: choose_stage(pick, *(per_stage[s][k] for s in STAGES)) for k in per_stage["first"]}
    out.update(t_layer_dense=dense_c, t_layer_moe=moe_c, t_attention=fwd["attention"] + fwd["attention_backward"],
               t_refwd_dense=re["dense_full"], t_refwd_moe=re["moe_full"], t_selective_dense=re["dense_selective"],
               t_selective_moe=re["moe_selective"])
    return out


def _full(b: LayoutBatch, value: float) -> np.ndarray:
    return np.full(len(b), float(value))


def _compute(ctx, b, _stage=None) -> Values:
    s, p = step_parts_s(ctx, b), pacing_stage(ctx, b)
    return {"grad_acc": s["grad_acc"], "grad_accumulation": s["grad_accumulation"],
            **{k: p[k] for k in ("n_dense", "n_moe", "t_layer_dense", "t_layer_moe", "t_head")}}


def _recompute(ctx, b, _stage=None) -> Values:
    p = pacing_stage(ctx, b)
    return {"grad_acc": b.grad_acc, **{k: p[k] for k in ("n_dense", "n_moe", "full_share", "t_refwd_dense",
                                                         "t_selective_dense", "t_refwd_moe", "t_selective_moe")}}


def _tp(ctx, b, _stage=None) -> Values:
    s, p = step_parts_s(ctx, b), pacing_stage(ctx, b)
    st = comm.strides(b.placement, b.tp, b.cp, b.dp, b.pp)
    lc = _per_layer_comm_s(ctx, b, st)
    activation_bytes = b.mbs * ctx.training.seq_len / b.cp * ctx.model.hidden_size * BF16_BYTES
    return {"grad_acc": b.grad_acc, "layers": p["layers"], "passes": lc["tp_passes"],
            "collectives": _full(b, TP_COLLECTIVES_PER_PASS),
            "t_collective": tp_collective_s(comm.group_link(ctx, b.tp, st["tp"]), activation_bytes),
            "tp_overlap": _full(b, overlap_fractions(ctx).tp), "tp_wait": s["tp_wait"]}


def _cp(ctx, b, _stage=None) -> Values:
    p = pacing_stage(ctx, b)
    st = comm.strides(b.placement, b.tp, b.cp, b.dp, b.pp)
    lc = _per_layer_comm_s(ctx, b, st)
    fwd = _micro_batch_compute_s(ctx, b)[0]
    allgather = cp_comm.allgather_exposed_layer_s(ctx, b, comm.group_link(ctx, b.cp, st["cp"]),
                                                  b.mbs * ctx.training.seq_len / b.cp, fwd["attention"],
                                                  fwd["attention_backward"], p["full_share"])
    return {"grad_acc": b.grad_acc, "layers": p["layers"], "t_cp_layer": lc["cp"],
            "cp_overlap": _full(b, ctx.efficiency.cp_overlap), "t_attention": p["t_attention"],
            "t_cp_allgather": allgather}


def _schedule_hides(ctx, b) -> np.ndarray:
    return hides_pipeline_and_expert_comm(resolved_schedule(b.pp_schedule, b.vpp, ctx.profile.pipeline.schedule))


def _ep(ctx, b, _stage=None) -> Values:
    p = pacing_stage(ctx, b)
    lc = _per_layer_comm_s(ctx, b, comm.strides(b.placement, b.tp, b.cp, b.dp, b.pp))
    return {"grad_acc": b.grad_acc, "n_moe": p["n_moe"], "t_ep_layer": lc["ep"],
            "ep_overlap": _full(b, overlap_fractions(ctx).ep), "exposed": (~_schedule_hides(ctx, b)).astype(float)}


def _pp(ctx, b, _stage=None) -> Values:
    st = comm.strides(b.placement, b.tp, b.cp, b.dp, b.pp)
    schedule = resolved_schedule(b.pp_schedule, b.vpp, ctx.profile.pipeline.schedule)
    h_div = np.where(b.sp > 0, b.tp, 1.0)
    send_bytes = b.mbs * ctx.training.seq_len / b.cp * ctx.model.hidden_size * BF16_BYTES / h_div
    sends = np.where((b.pp > 1) & ~_schedule_hides(ctx, b), 2.0 * chunks_per_rank(schedule, b.vpp), 0.0)
    return {"grad_acc": b.grad_acc, "sends": sends, "t_send": comm.pipeline_transfer_s(ctx, st["pp"], b.pp, send_bytes)}


def _parts(*names: str):
    def values(ctx, b, _stage=None) -> Values:
        s = step_parts_s(ctx, b)
        out = {n: s[n] for n in names}
        if "grad_reduce_total" in out:
            out["grad_reduce_hidden"] = out["grad_reduce_total"] - s["grad_reduce"]
            out["param_gather_hidden"] = out["param_gather_total"] - s["param_gather"]
        return out
    return values


def _optimizer(ctx, b, _stage=None) -> Values:
    stage = layout_stage_params(ctx, b)
    owned, expert_owned = owned_split(ctx, b, stage["dense"], stage["expert"])
    on_host = b.offload >= OFFLOADS.index("optimizer")
    dense_state, expert_state = state_bytes_per_param(ctx, b)
    return {"on_gpu": (~on_host).astype(float), "owned": owned, "expert_owned": expert_owned,
            "step_bytes": step_bytes_per_param(ctx, dense_state, on_host) + np.zeros(len(b)),
            "expert_step_bytes": step_bytes_per_param(ctx, expert_state, on_host) + np.zeros(len(b)),
            "hbm_bytes_per_s": _full(b, ctx.effective_hbm_bytes_per_s)}


def _pressure(ctx, b, _stage=None) -> Values:
    c = ctx.corrections
    peak = memory_table(ctx, b)["peak_memory_bytes"]
    return {"t_before": time_table(ctx, b)["step_time_s"], "slowdown": _full(b, c.memory_pressure_slowdown),
            "peak_share": peak / ctx.cluster.gpu.usable_memory_bytes,
            "threshold": _full(b, c.memory_pressure_threshold), "ramp": _full(b, MEMORY_PRESSURE_RAMP)}


def q(name: str, unit: str, meaning: str, code: str) -> Quantity:
    return Quantity(name, unit, meaning, code)


GRAD_ACC = q("grad_acc", "micro-batches", "micro-batches per step", "Layout.grad_acc")
N_DENSE = q("n_dense", "layers", "dense layers on the pacing stage", "shared_terms.stage_layer_counts")
N_MOE = q("n_moe", "layers", "MoE layers on the pacing stage", "shared_terms.stage_layer_counts")
LAYERS = q("layers", "layers", "layers on the pacing stage", "shared_terms.stage_layer_counts")
SCHEDULE = "step_time.micro_batch_parts_s"
STEP = "step_time.step_parts_s"

TIME_FORMULAS: dict[str, Formula] = {
    "compute": Formula(
        "grad_acc * (n_dense * t_layer_dense + n_moe * t_layer_moe + t_head + grad_accumulation)",
        (GRAD_ACC, N_DENSE, N_MOE,
         q("t_layer_dense", "s", "forward + backward of one dense layer: (1 + BACKWARD_MATMUL_FACTOR)·t_matmul + "
           "attention forward and backward + 3·element-wise (+ fp8 casts)", "time._layer_compute_s"),
         q("t_layer_moe", "s", "the same for one MoE layer (grouped expert GEMMs, + moe_layer_fixed_s)",
           "time._layer_compute_s, moe_time"),
         q("t_head", "s", "LM head GEMMs and the memory-bound loss (last stage; × (1 + num_mtp_layers))",
           "time._micro_batch_compute_s, time.loss_s"),
         q("grad_accumulation", "s", "memory-bound gradient accumulation after each backward "
           "(grad_accumulation_bytes_per_param)", "time.grad_accumulation_s")), _compute),
    "recompute": Formula(
        "grad_acc * (n_dense * (full_share * t_refwd_dense + t_selective_dense)"
        " + n_moe * (full_share * t_refwd_moe + t_selective_moe))",
        (GRAD_ACC, N_DENSE, N_MOE,
         q("full_share", "1", "share of the stage's layers under full recompute", "recompute.full_recompute_share"),
         q("t_refwd_dense", "s", "one dense layer's forward, recomputed under full", "time._layer_recompute_s"),
         q("t_selective_dense", "s", "one dense layer's selectively recomputed forward", "time._layer_recompute_s"),
         q("t_refwd_moe", "s", "one MoE layer's forward, recomputed under full", "time._layer_recompute_s"),
         q("t_selective_moe", "s", "one MoE layer's selectively recomputed forward", "time._layer_recompute_s")),
        _recompute),
    "tp_exposed": Formula(
        "grad_acc * (layers * passes * collectives * t_collective * (1 - tp_overlap) + tp_wait)",
        (GRAD_ACC, LAYERS, q("passes", "1", "forward, backward (+ recomputed forward; + selective_recompute_tp_collectives "
                                             "under the profile's selective recompute)", "time._per_layer_comm_s"),
         q("collectives", "1", "TP collectives per layer and pass (TP_COLLECTIVES_PER_PASS)",
           "time.TP_COLLECTIVES_PER_PASS"),
         q("t_collective", "s", "one ring collective of a micro-batch's activations, (tp − 1)/tp·S/busbw + "
           "(tp − 1)·α", "tp_comm.tp_collective_s"),
         q("tp_overlap", "1", "share hidden under tp_comm_overlap (0 without)", "overlap.overlap_fractions"),
         q("tp_wait", "s", "wait up to the TP collectives' floor (collective_overhead_s, pp_cross_tp_sync_s)",
           STEP)), _tp),
    "cp_exposed": Formula(
        "grad_acc * (max(0, layers * t_cp_layer - cp_overlap * layers * t_attention) + layers * t_cp_allgather)",
        (GRAD_ACC, LAYERS, q("t_cp_layer", "s", "one layer's ring K/V exchanges, forward and backward "
                             "(0 under the allgather rotate method)", "cp_comm.ring_layer_s"),
         q("cp_overlap", "1", "share of attention that hides the ring exchange", "PhysicalEfficiency.cp_overlap"),
         q("t_attention", "s", "one layer's attention, forward + backward", "time.attention_s"),
         q("t_cp_allgather", "s", "one layer's K/V all-gathers and dK/dV permutes not hidden by the "
           "SDPA call each waits behind (0 under the ring method)", "cp_comm.allgather_exposed_layer_s")), _cp),
    "ep_exposed": Formula(
        "grad_acc * n_moe * t_ep_layer * (1 - ep_overlap) * exposed",
        (GRAD_ACC, N_MOE, q("t_ep_layer", "s", "one MoE layer's all-to-all dispatch and combine, all passes",
                            "moe_time.dispatch_combine_s"),
         q("ep_overlap", "1", "share hidden under moe_a2a_overlap", "overlap.overlap_fractions"),
         q("exposed", "1", "0 under dualpipe/dualpipev (hidden under the paired chunk), else 1",
           "schedule.hides_pipeline_and_expert_comm")), _ep),
    "pp_exposed": Formula(
        "grad_acc * sends * t_send",
        (GRAD_ACC, q("sends", "1", "sends per micro-batch: 2 per model chunk (0 without a pipeline or "
                     "under dualpipe)", "schedule.chunks_per_rank"),
         q("t_send", "s", "one activation send, exposed (1 − pp_overlap; blocking metadata messages)",
           "comm.pipeline_transfer_s")), _pp),
    "offload_exposed": Formula(
        "grad_acc * offload", (GRAD_ACC, q("offload", "s", "one micro-batch's host-link traffic not hidden",
                                           "recompute.offload_exposed_s")), _parts("grad_acc", "offload")),
    "host_exposed": Formula(
        "grad_acc * host", (GRAD_ACC, q("host", "s", "one micro-batch's host launch time not hidden behind its GPU "
                                        "work: per MoE layer forward max(0, H_E − G_E, H_A − G_A, H_f − G_f) across the dropless "
                                        "sync (E: up to the experts' last GEMM, A: to the combine; a flow "
                                        "shop's boundaries), "
                                        "the rest max(0, ΣH − ΣG); H = host_launch_s × launches after CUDA graphs",
                                        "host_dispatch.host_exposed_s")), _parts("grad_acc", "host")),
    "dp_exposed": Formula(
        "grad_reduce_total - grad_reduce_hidden + param_gather_total - param_gather_hidden + dp_floor"
        " + tied_embedding + grad_acc * zero3",
        (q("grad_reduce_total", "s", "the gradient reduction (AR, RS, or the pipeline engine's AR)",
           "data_parallel.dp_comm_s"),
         q("grad_reduce_hidden", "s", "its part hidden behind the last backward (dp_overlap, per model chunk; "
           "beside the CP ring: overlap.beside_cp_window_s)", "overlap.chunked_exposed_s"),
         q("param_gather_total", "s", "ZeRO-1/2's parameter all-gather", "data_parallel.dp_comm_s"),
         q("param_gather_hidden", "s", "its part hidden behind the first forward", "overlap.chunked_exposed_s"),
         q("dp_floor", "s", "ZeRO-3's first gather and last reduce-scatter", "data_parallel.dp_comm_s"),
         q("tied_embedding", "s", "the tied embedding's gradient all-reduce", "tied_embedding.tied_embedding_allreduce_s"),
         GRAD_ACC, q("zero3", "s", "ZeRO-3's per-micro-batch gathers not hidden (fsdp_overlap)", STEP)),
        _parts("grad_reduce_total", "param_gather_total", "dp_floor", "tied_embedding", "grad_acc", "zero3")),
    "bubble": Formula(
        "bubble_per_micro * t_micro",
        (q("bubble_per_micro", "micro-batches", "fill and drain in micro-batches of the schedule",
           "schedule.bubble_micro_batches"),
         q("t_micro", "s", "one micro-batch: compute + recompute + exposed tp, cp, ep, pp, offload, ZeRO-3", STEP)),
        _parts("bubble_per_micro", "t_micro")),
    "optimizer": Formula(
        "on_gpu * (owned * step_bytes + expert_owned * expert_step_bytes) / hbm_bytes_per_s",
        (q("on_gpu", "1", "0 under optimizer offload", "Layout.offload"),
         q("owned", "params", "non-expert parameters whose state the GPU updates", "model_states.owned_split"),
         q("step_bytes", "B", "update bytes per parameter (read gradient, master, states; write them and the weight)",
           "optimizer.step_bytes_per_param"),
         q("expert_owned", "params", "expert parameters the GPU updates", "model_states.owned_split"),
         q("expert_step_bytes", "B", "update bytes per expert parameter", "optimizer.step_bytes_per_param"),
         q("hbm_bytes_per_s", "B/s", "hbm_bytes_per_s·hbm_efficiency", "CostContext.effective_hbm_bytes_per_s")),
        _optimizer),
    "muon": Formula("muon", (q("muon", "s", "Newton–Schulz FLOPs and distributed Muon's gradient gather",
                               "optimizer_step.muon_time_s"),), _parts("muon")),
    "optimizer_offload": Formula(
        "optimizer_offload", (q("optimizer_offload", "s", "the host step and its transfers (offload)",
                                "offload.offload_step_s"),), _parts("optimizer_offload")),
    "overhead": Formula("step_overhead_s", (q("step_overhead_s", "s", "fixed per-step time (calibrated)",
                                              "Corrections.step_overhead_s"),),
                        lambda ctx, b, _s=None: {"step_overhead_s": _full(b, ctx.corrections.step_overhead_s)}),
    "memory_pressure": Formula(
        "t_before * slowdown * clip((peak_share - threshold) / ramp, 0, 1)",
        (q("t_before", "s", "the step without this term", "step_time.time_table"),
         q("slowdown", "1", "memory_pressure_slowdown (calibrated)", "Corrections.memory_pressure_slowdown"),
         q("peak_share", "1", "peak memory / usable memory", "stage_memory.memory_table"),
         q("threshold", "1", "memory_pressure_threshold (calibrated)", "Corrections.memory_pressure_threshold"),
         q("ramp", "1", "MEMORY_PRESSURE_RAMP", "evaluate.MEMORY_PRESSURE_RAMP")), _pressure),
}
