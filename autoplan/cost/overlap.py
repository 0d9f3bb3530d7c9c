"""The overlap fractions the time model applies, after the trainer's options.

An overlap efficiency (``tp_overlap``, ``dp_overlap``, ``ep_overlap``; ``PhysicalEfficiency``)
is the share of a communication hidden behind compute *when the trainer overlaps it*; the
profile's ``options:`` (:class:`autoplan.profiles.trainer_options.TrainerOptions`) say whether
it does. Switched off, the communication is exposed whole (fraction 0): Megatron-LM without
``--tp-comm-overlap`` blocks on each sequence-parallel collective
(``megatron/core/tensor_parallel/layers.py``), without ``--overlap-grad-reduce`` reduces the
gradients after the backward (``megatron/core/distributed/distributed_data_parallel.py``,
``finish_grad_sync``), without ``--overlap-param-gather`` gathers the parameters after the
optimizer step (``megatron/core/optimizer/distrib_optimizer.py``); nanotron's ZeRO-1 gathers the
updated shards synchronously in its optimizer step (``src/nanotron/optim/zero.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from autoplan.cost.context import CostContext, per_context
from autoplan.profiles.efficiency import PhysicalEfficiency
from autoplan.profiles.trainer_options import TrainerOptions


@dataclass(frozen=True)
class Overlap:
    """Fractions hidden behind compute: TP collectives, gradient reduction, parameter gather,
    expert all-to-all."""

    tp: float
    grad_reduce: float
    param_gather: float
    ep: float


@per_context
def overlap_fractions(ctx: CostContext) -> Overlap:
    """The profile's overlap efficiencies where its options overlap, else 0."""
    return overlap_of(ctx.efficiency, ctx.profile.options)


def overlap_of(e: PhysicalEfficiency, o: TrainerOptions) -> Overlap:
    """:func:`overlap_fractions` from an efficiency and the trainer's options (exports use it
    without a cost context)."""
    return Overlap(tp=e.tp_overlap if o.tp_comm_overlap else 0.0,
                   grad_reduce=e.dp_overlap if o.overlap_grad_reduce else 0.0,
                   param_gather=e.dp_overlap if o.overlap_param_gather else 0.0,
                   ep=e.ep_overlap if o.moe_a2a_overlap else 0.0)


def chunked_exposed_s(comm_s: np.ndarray, window_s: np.ndarray, chunks: np.ndarray, pp: np.ndarray,
                      overlap: np.ndarray | float) -> np.ndarray:
    """Seconds of a once-per-step data-parallel collective left exposed when the pipeline
    launches it model chunk by model chunk.

    ``window_s`` is the compute of one micro-batch on the whole stage that the collective hides
    behind (the last backward for the gradient reduction, the first forward for the parameter
    gather); the stage's parameters sit in ``chunks`` model chunks (vpp under the interleaved
    schedule, else 1), each with 1/chunks of the traffic c and of the window w. Megatron's
    interleaved schedule launches a chunk's gradient reduction once that chunk's last micro-batch
    backward ends (``backward_step_helper_postprocess`` -> ``grad_sync_func[chunk]``), and gathers
    chunk k + 1's parameters while chunk k runs its first forward (``param_sync_func``,
    ``megatron/core/pipeline_parallel/schedules.py``, ``forward_backward_pipelining_with_interleaving``);
    the chunks run their last backwards (first forwards) in groups of pp micro-batches, so
    consecutive chunks finish pp·w apart. On one queue of collectives, the last chunk's share
    hides only behind its own w and the rest behind the chunks still running:
    exposed = max(0, max(c, comm − (chunks − 1)·pp·w) − w) (pp·w between chunks is a floor: the
    cool-down's bubbles lengthen it). One chunk gives max(0, comm − window), the 1F1B figure.
    ``overlap`` (the trainer's dp_overlap where it overlaps) scales the hidden part.
    """
    w = window_s / chunks
    # hidden = comm − exposed, written so that one chunk gives min(comm, window) exactly
    hidden = np.minimum(comm_s, w + np.minimum(comm_s - comm_s / chunks, (chunks - 1.0) * pp * w))
    return comm_s - overlap * hidden


def beside_cp_window_s(window_s: np.ndarray, cp_hidden_s: np.ndarray, cp_exposed_s: np.ndarray,
                       shares_cp_link: np.ndarray | bool) -> np.ndarray:
    """The window behind which a transfer hides, beside the context-parallel ring exchange of the
    same compute: window − hidden ring time where the transfer runs on the ring's links, window +
    exposed ring time where it runs on others (``cp_hidden_s``, ``cp_exposed_s``: the ring's share
    in that window).

    Transformer Engine's ring attention (transformer_engine/pytorch/attention/dot_product_attention/
    context_parallel.py ``AttnFuncWithCPAndKVP2P``, Megatron-Core's ``cp_comm_type`` p2p) sends the
    next K/V block (backward: K/V and dK/dV) with batched isend/irecv while the current block's
    attention runs, and waits for it before the next; the data-parallel reduction
    (``start_grad_sync``), ZeRO-3's gathers and the host copies run on streams of their own beside
    it. Compute hides both, but a link carries one transfer's bytes at a time: on a shared tier the
    ring's hidden transfer takes that much of the window from the other; on another tier the ring's
    exposed wait is wall time in which the other transfer goes on (as the backward's TP
    collectives on NVLink lengthen the window of a reduction on the NICs,
    ``time.backward_scale_up_comm_s``). Either way a slower attention, which hides more of the ring,
    never widens another transfer's window by more than it lengthens the micro-batch."""
    return np.where(shares_cp_link, window_s - cp_hidden_s, window_s + cp_exposed_s)
