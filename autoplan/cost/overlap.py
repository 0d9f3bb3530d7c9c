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

from autoplan.cost.context import CostContext
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
