"""Exact pruning before costing: what a layout's rank is known to be before it is costed in full.

The recipe ranks by stage first (:mod:`autoplan.search.recipe`: feasible, batch not reached, out of
memory, illegal), and two stages are known cheaply:

* a layout that breaks a rule is ILLEGAL (:func:`autoplan.rules.legality_codes`, no cost terms);
* a legal layout whose model states on the GPU alone exceed the usable memory is OUT_OF_MEMORY:
  the peak of a GPU is the largest stage total (:func:`autoplan.cost.stage_memory.memory_table`),
  each total adds non-negative terms (activations, buffers, the allocator's reserve) to the stage's
  model states on the GPU (ZeRO paper, Fig. 1: weights, gradients, master weights, optimizer
  states; what offload leaves on the GPU, ``offload.move_to_host``), so those of each stage are
  lower bounds of the peak. The bound is the total's own first partial sum
  (``stage_memory.state_terms_by_stage``' ``states``), and floating-point addition of a non-negative
  term never lowers a sum, so it holds to the last bit.

A streamed search (:mod:`autoplan.search.exhaustive`) counts such layouts by stage without costing
them, and costs them afterwards only when the best rows kept are too few to rank them out.
"""

from __future__ import annotations

import numpy as np

from autoplan.cost.context import CostContext
from autoplan.cost.broadcast import shared_groupings
from autoplan.cost.stage_memory import state_terms_by_stage
from autoplan.layout import LayoutBatch


def bound_is_exact(ctx: CostContext) -> bool:
    """The model-state bound is a lower bound of the peak only when the allocator's reserve
    (``allocator_overhead`` × the transient bytes + ``memory_reserve_bytes``) cannot be negative."""
    c = ctx.corrections
    return c.allocator_overhead >= 0 and c.memory_reserve_bytes >= 0


def model_states_exceed_memory(ctx: CostContext, b: LayoutBatch) -> np.ndarray:
    """Per layout: True when the model states one of its stages keeps on the GPU alone exceed the
    GPU's usable memory (so its peak does too: the layout is out of memory, whatever else it
    holds). Offloaded states do not count: they are on the host."""
    capacity = ctx.cluster.gpu.usable_memory_bytes
    with np.errstate(divide="ignore", invalid="ignore"), shared_groupings():
        # once per distinct degrees, ZeRO, optimizer, ...; (the total's first partial sum)
        states = state_terms_by_stage(ctx, b)["states"]
    return (states > capacity).any(axis=0)
