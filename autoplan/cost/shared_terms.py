"""Cost terms that read a few knobs, evaluated once per distinct combination of them.

Each function here gathers a formula of another module with the arrays it needs, so that
``broadcast.per_group`` can evaluate it on one layout per distinct combination of the knobs it
reads (the stage split: pp, vpp, pp_split; what is in flight: those and grad_acc, pp_schedule;
the model states: the degrees, ZeRO, the optimizer and offload, not mbs nor recompute) and copy
the results to the other layouts. The numbers are those of the formulas evaluated on every layout.
"""

from __future__ import annotations

import numpy as np

from autoplan.cost.arrays import ones_like, stacked, zeros_like
from autoplan.cost.broadcast import on_distinct, once_per_batch, per_group
from autoplan.cost.context import CostContext
from autoplan.cost.model_states import model_state_bytes, owned_params, params_on_stages
from autoplan.cost.offload import move_to_host
from autoplan.cost.schedule import in_flight_layers, parameter_copies, resolved_schedule
from autoplan.cost.stages import StageLayers, choose_stage, heaviest_stage, trainer_stage_layers
from autoplan.layout import LayoutBatch


def _trainer_layers(ctx: CostContext, b: LayoutBatch) -> StageLayers:
    """``stages.trainer_stage_layers``: the layout's pp, vpp and pp_split, or the trainer's own
    split, evaluated once per distinct (pp, vpp, pp_split) (``broadcast.on_distinct``)."""
    model, rule = ctx.model, ctx.profile.pipeline.split_rule
    return on_distinct(b, ("pp", "vpp", "pp_split"),
                       lambda pp, vpp, pp_split: trainer_stage_layers(model, rule, pp, vpp, pp_split),
                       key=("trainer_stage_layers", id(model), rule))


STAGE_COUNTS = ("first", "middle", "last", "first_dense", "middle_dense", "last_dense", "most", "middle_rank")
# The stages a term ``*_by_stage`` is evaluated for at once, on a leading axis of 3: one
# evaluation of each formula, not three (a batch of one pays per numpy call, not per layout).
STAGES = ("first", "middle", "last")


def of_stage(value, stage: str):
    """One stage's part of a term ``*_by_stage`` (arrays with STAGES on their leading axis; an
    array of one dimension is the same on every stage), of dicts and tuples of them too."""
    if isinstance(value, dict):
        return {name: of_stage(v, stage) for name, v in value.items()}
    if isinstance(value, tuple):
        return tuple(of_stage(v, stage) for v in value)
    return value[STAGES.index(stage)] if np.ndim(value) == 2 else value


@per_group
def stage_layer_counts(ctx: CostContext, b: LayoutBatch) -> dict[str, np.ndarray]:
    """``stages.trainer_stage_layers``' layer counts (STAGE_COUNTS) without its per-chunk arrays: what
    most formulas read of the split, and a fraction of its size to copy to every layout."""
    layers = _trainer_layers(ctx, b)
    return {name: getattr(layers, name) for name in STAGE_COUNTS}


@per_group
def in_flight_by_stage(ctx: CostContext, b: LayoutBatch) -> np.ndarray:
    """Layer-activations (layers × micro-batches) each stage (STAGES, ``stages.stage_layers``)
    holds at the end of its warm-up: ``schedule.in_flight_layers`` of its chunks, plus the
    correction ``Corrections.pp_extra_layers_per_microbatch`` extra layer-activations per in-flight
    micro-batch of a pipelined stage."""
    layers = _trainer_layers(ctx, b)
    rank = stacked(zeros_like(b.pp), layers.middle_rank, b.pp - 1.0)
    schedule = resolved_schedule(b.pp_schedule, b.vpp, ctx.profile.pipeline.schedule)
    chunks = stacked(layers.first_chunks, layers.middle_chunks, layers.last_chunks).swapaxes(0, 1)
    flying = in_flight_layers(chunks, b.pp, b.vpp, b.grad_acc, rank, schedule)
    extra = ctx.corrections.pp_extra_layers_per_microbatch
    if extra == 0.0:  # neutral (most profiles): 0 · a finite count, skipped
        return flying
    micro_in_flight = in_flight_layers(np.ones((1, 1, len(b))), b.pp, ones_like(b.pp), b.grad_acc, rank, schedule)
    return flying + np.where(b.pp > 1, extra * micro_in_flight, 0.0)


def stage_in_flight(ctx: CostContext, b: LayoutBatch, stage: str) -> np.ndarray:
    """``in_flight_by_stage`` of one stage ('first', 'middle' or 'last')."""
    return of_stage(in_flight_by_stage(ctx, b), stage)


@once_per_batch
def _copies(ctx: CostContext, b: LayoutBatch) -> np.ndarray:
    """``schedule.parameter_copies`` of the resolved schedule (2 under DualPipe, else 1)."""
    return parameter_copies(resolved_schedule(b.pp_schedule, b.vpp, ctx.profile.pipeline.schedule))


@per_group
def params_by_stage(ctx: CostContext, b: LayoutBatch) -> tuple[np.ndarray, np.ndarray]:
    """(non-expert, expert) parameters per GPU of each stage (STAGES), times the schedule's
    copies (``schedule.parameter_copies``: 2 under DualPipe)."""
    layers = _trainer_layers(ctx, b)
    dense, expert = params_on_stages(ctx, b, stacked(layers.first_dense, layers.middle_dense, layers.last_dense),
                                     stacked(layers.first_moe, layers.middle_moe, layers.last_moe))
    copies = _copies(ctx, b)
    return copies * dense, copies * expert


def stage_params(ctx: CostContext, b: LayoutBatch, stage: str) -> tuple[np.ndarray, np.ndarray]:
    """``params_by_stage`` of one stage."""
    return of_stage(params_by_stage(ctx, b), stage)


def heavier_stage_params(dense: np.ndarray, expert: np.ndarray) -> dict[str, np.ndarray]:
    """Parameters per GPU of the heaviest of the stages (``params_by_stage``: dense, expert)."""
    pick = heaviest_stage(*(dense + expert))
    return {"dense": choose_stage(pick, *dense), "expert": choose_stage(pick, *expert)}


@per_group
def layout_stage_params(ctx: CostContext, b: LayoutBatch) -> dict[str, np.ndarray]:
    """``heavier_stage_params`` of the batch's ``params_by_stage``."""
    return heavier_stage_params(*params_by_stage(ctx, b))


@per_group
def model_states_by_stage(ctx: CostContext, b: LayoutBatch) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """The GPU's model-state terms of each stage after ``offload.move_to_host``, and the host bytes."""
    params = params_by_stage(ctx, b)
    terms = model_state_bytes(ctx, b, *params)
    return terms, move_to_host(ctx, b, terms, owned_params(ctx, b, *params))
