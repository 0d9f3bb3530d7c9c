"""Pipeline schedules: activations in flight, bubble, parameter copies and hidden communication.

One function per quantity, each over a batch of layouts, the schedule given per layout as its
``autoplan.layout.PP_SCHEDULES`` code (``resolved_schedule`` turns 'default' into the trainer's
own). Times are in units of ``t_micro``, a stage's forward + full backward of one micro-batch,
whose shares follow the zero-bubble papers' assumption T_F = T_B = T_W (Qi et al. 2023, Sec. 2:
forward, input-gradient and weight-gradient passes of a matmul cost the same), so the weight-
gradient pass W is the forward's share of t_micro (``cost.time`` passes 1/(1 +
BACKWARD_MATMUL_FACTOR)).

| schedule | activations in flight on rank r (stage micro-batches) | bubble (× t_micro) | params |
| --- | --- | --- | --- |
| 1f1b | min(p − r, m) | p − 1 | 1× |
| interleaved | Megatron's warm-up, chunk by chunk (``interleaved_in_flight``) | (p − 1)/v | 1× |
| afab | m | p − 1 | 1× |
| zb-h1 | as 1f1b (as interleaved with v > 1) | (p − 1)(1 − 2w)/v | 1× |
| zb-v | min(p, m) | max(0, (p − 1)(1 − 3w)/2) | 1× |
| dualpipe | min(p + 1, m) | (p/2 − 1)(2 − f − 3w) | 2× |
| dualpipev | min(p + 1/2, m) | (p − 1)(2 − f − 3w)/2 | 1× |

with f = w = 1/(1 + BACKWARD_MATMUL_FACTOR) = 1/3 the forward and weight-gradient shares.
"""

from __future__ import annotations

import numpy as np

from autoplan.cost.arrays import select
from autoplan.layout import PP_SCHEDULES

CODE = {name: float(i) for i, name in enumerate(PP_SCHEDULES)}
# Schedules whose ranks each run two model chunks in a V (Qi et al. 2024; DeepSeek's DualPipeV).
V_SHAPED = ("zb-v", "dualpipev")


def resolved_schedule(codes: np.ndarray, vpp: np.ndarray, trainer_default: str) -> np.ndarray:
    """Schedule codes with 'default' replaced by the trainer's own: interleaved 1F1B where
    vpp > 1, else the profile's ``pp_schedule`` ('1f1b', or 'afab')."""
    own = np.where(vpp > 1, CODE["interleaved"], CODE[trainer_default])
    return np.where(codes == CODE["default"], own, codes)


def is_schedule(codes: np.ndarray, *names: str) -> np.ndarray:
    """True where the (resolved) schedule is one of ``names`` (comparisons: np.isin sorts)."""
    out = codes == CODE[names[0]]
    for name in names[1:]:
        out |= codes == CODE[name]
    return out


def interleaved_in_flight(chunks: np.ndarray, pp: np.ndarray, vpp: np.ndarray, num_micro: np.ndarray,
                          rank: np.ndarray) -> np.ndarray:
    """Layer-activations (layers × micro-batches) rank ``rank`` holds at the end of its warm-up
    under Megatron's interleaved 1F1B, counted chunk by chunk.

    ``megatron/core/pipeline_parallel/schedules.py`` (``get_pp_rank_microbatches``, interleaved):
    W = 2(p − r − 1) + (v − 1)·G warm-up chunk-forwards with G =
    ``microbatch_group_size_per_vp_stage`` (default p; m when m < p, as torch's
    ``ScheduleInterleaved1F1B`` rounds), capped at m·v; forward i runs chunk
    (i // G) mod v. At the end of the warm-up W + 1 chunk-forwards are live, chunk k holding
    C·G + clip(R − k·G, 0, G) of them (C, R = divmod(W + 1, G·v)): chunk 0 the most. With equal
    chunks this is Korthikanti et al. 2022 Sec. 4.2.3, L·(1 + (p − 1)/(p·v)) on rank 0; with
    Llama 3's split (``pp_split = embed-loss``: chunk 0 of rank 0 holds only the embedding) the
    extra warm-up micro-batches of chunk 0 hold no layer (Llama Team 2024, Sec. 3.3.2).
    ``chunks`` is (max vpp, layouts): layers of each of the rank's chunks, 0 past its vpp.
    """
    group = np.minimum(pp, num_micro)  # fewer micro-batches than p: one round of m (torch's Interleaved1F1B)
    live = np.minimum(2.0 * (pp - rank - 1.0) + (vpp - 1.0) * group + 1.0, num_micro * vpp)
    cycles, rest = np.floor(live / (group * vpp)), np.mod(live, group * vpp)
    k = np.arange(float(chunks.shape[0])).reshape(-1, *([1] * (chunks.ndim - 1)))  # the chunks, on their axis
    count = np.minimum(cycles * group + np.minimum(np.maximum(rest - k * group, 0.0), group), num_micro)
    return np.where(k < vpp, count * chunks, 0.0).sum(axis=0)


def in_flight_layers(chunks: np.ndarray, pp: np.ndarray, vpp: np.ndarray, num_micro: np.ndarray,
                     rank: np.ndarray, schedule: np.ndarray) -> np.ndarray:
    """Layer-activations (in units of one layer × one micro-batch) a stage holds at its peak.

    ``chunks``: (max vpp, layouts) layers of each chunk of the rank; ``schedule``: resolved codes.
    1F1B (Narayanan et al. 2021 Sec. 2.2; schedules.py ``forward_backward_pipelining_without_
    interleaving``: p − r − 1 warm-up forwards) min(p − r, m) stage micro-batches; AFAB/GPipe all m;
    ZB-H1 as 1F1B (Qi et al. 2023 Table 1: peak memory p·M_B, the same as 1F1B; with v > 1
    torch's InterleavedZeroBubble keeps the interleaved warm-up); ZB-V min(p, m) on every rank
    (Qi et al. 2023 Sec. 6, the V-shape balances memory at 1F1B's peak); DualPipe p + 1 (DeepSeek-V3
    report Table 2) and DualPipeV (DualPipe of 2p half-size stages on p ranks) p + 1/2.
    """
    layers = chunks.sum(axis=0)
    plain = layers * np.minimum(pp - rank, num_micro)
    # (each choice (stages, layouts), as plain: computed only where some layout runs its schedule)
    return select(
        [is_schedule(schedule, "afab"), is_schedule(schedule, "zb-v"), is_schedule(schedule, "dualpipe"),
         is_schedule(schedule, "dualpipev"), vpp > 1],
        [lambda: layers * num_micro, lambda: layers * np.minimum(pp, num_micro),
         lambda: layers * np.minimum(pp + 1.0, num_micro), lambda: layers * np.minimum(pp + 0.5, num_micro),
         lambda: interleaved_in_flight(chunks, pp, vpp, num_micro, rank)],
        plain)


def bubble_micro_batches(schedule: np.ndarray, pp: np.ndarray, vpp: np.ndarray,
                         forward_share: float) -> np.ndarray:
    """Pipeline bubble per step in units of t_micro (a stage's forward + full backward).

    1F1B and AFAB (p − 1) (Narayanan et al. 2021 Sec. 2.2.1); interleaved (p − 1)/v (Sec. 2.2.2);
    ZB-H1 (p − 1)(F + B − 2W) (Qi et al. 2023 Sec. 3.1; "ZB1P" in the DeepSeek-V3 report
    Table 2; B is the full backward), over v for torch's InterleavedZeroBubble; ZB-V the ZB-H2
    bound (p − 1)(T_F + T_B − 2T_W) (B the input gradient only) of half-stage chunks (Qi et al.
    2024), clipped at 0; DualPipe (p/2 − 1)(F&B + B − 3W) (DeepSeek-V3 Table 2), F&B taken as
    F + B (the overlap hides communication, not compute); DualPipeV the same with 2p half-size
    stages on p ranks: (p − 1)(F&B + B − 3W)/2.
    """
    f = w = forward_share  # T_W = T_F (Qi et al. 2023, Sec. 2)
    b_full = 1.0 - f
    dualpipe = 1.0 + b_full - 3.0 * w  # F&B + B − 3W in units of t_micro
    # (each choice of the default's shape: computed only where some layout runs its schedule)
    return select(
        [is_schedule(schedule, "zb-h1"), is_schedule(schedule, "zb-v"), is_schedule(schedule, "dualpipe"),
         is_schedule(schedule, "dualpipev")],
        [lambda: (pp - 1.0) * (1.0 - 2.0 * w) / vpp, lambda: np.maximum(0.0, (pp - 1.0) * (1.0 - 3.0 * w) / 2.0),
         lambda: np.maximum(pp / 2.0 - 1.0, 0.0) * dualpipe, lambda: (pp - 1.0) * dualpipe / 2.0],
        (pp - 1.0) / vpp)


def parameter_copies(schedule: np.ndarray) -> np.ndarray:
    """Copies of a stage's parameters (and their gradients and optimizer states) per rank: 2 for
    DualPipe, whose rank i holds stage i and stage p − 1 − i (DeepSeek-V3 report Sec. 3.2.1,
    Table 2 "Parameter 2×"), else 1."""
    return np.where(is_schedule(schedule, "dualpipe"), 2.0, 1.0)


def hides_pipeline_and_expert_comm(schedule: np.ndarray) -> np.ndarray:
    """True where the schedule overlaps a forward chunk with a backward chunk so that the MoE
    all-to-all and the pipeline sends run under the other chunk's compute (DualPipe, DualPipeV:
    DeepSeek-V3 report Sec. 3.2.1, "both all-to-all and PP communication can be fully hidden";
    the warm-up and drain, where no pair exists, are left out)."""
    return is_schedule(schedule, "dualpipe", "dualpipev")


def chunks_per_rank(schedule: np.ndarray, vpp: np.ndarray) -> np.ndarray:
    """Model chunks each rank runs, and so pipeline sends per micro-batch and direction: vpp
    (2 for the V-shaped schedules, whose vpp must be 2)."""
    return np.where(is_schedule(schedule, *V_SHAPED), 2.0, vpp)
