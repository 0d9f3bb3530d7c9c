"""Cost terms that read a few knobs, evaluated once per distinct combination of them.

Each function here gathers a formula of another module with the arrays it needs, so that
``broadcast.per_group`` can evaluate it on one layout per distinct combination of the knobs it
reads (the stage split: pp, vpp, pp_split; what is in flight: those and grad_acc, pp_schedule;
the model states: the degrees, ZeRO, the optimizer and offload, not mbs nor recompute) and copy
the results to the other layouts. The numbers are those of the formulas evaluated on every layout.
"""

from __future__ import annotations

import numpy as np

from autoplan.cost.broadcast import on_distinct, once_per_batch, per_group
from autoplan.cost.context import CostContext
from autoplan.cost.model_states import model_state_bytes, owned_params, params_on_stage
from autoplan.cost.offload import move_to_host
from autoplan.cost.schedule import in_flight_layers, parameter_copies, resolved_schedule
from autoplan.cost.stages import StageLayers, choose_stage, heaviest_stage, trainer_stage_layers
from autoplan.layout import LayoutBatch


def _trainer_layers(ctx: CostContext, b: LayoutBatch) -> StageLayers:
    """``stages.trainer_stage_layers``: the layout's pp, vpp and pp_split, or the trainer's own
    split, evaluated once per distinct (pp, vpp, pp_split) (``broadcast.on_distinct``)."""
    model, rule = ctx.model, ctx.profile.pp_split_rule
    return on_distinct(b, ("pp", "vpp", "pp_split"),
                       lambda pp, vpp, pp_split: trainer_stage_layers(model, rule, pp, vpp, pp_split),
                       key=("trainer_stage_layers", id(model), rule))


STAGE_COUNTS = ("first", "middle", "last", "first_dense", "middle_dense", "last_dense", "most", "middle_rank")


@per_group
def stage_layer_counts(ctx: CostContext, b: LayoutBatch) -> dict[str, np.ndarray]:
    """``stages.trainer_stage_layers``' layer counts (STAGE_COUNTS) without its per-chunk arrays: what
    most formulas read of the split, and a fraction of its size to copy to every layout."""
    layers = _trainer_layers(ctx, b)
    return {name: getattr(layers, name) for name in STAGE_COUNTS}


@per_group
def stage_in_flight(ctx: CostContext, b: LayoutBatch, stage: str) -> np.ndarray:
    """Layer-activations (layers × micro-batches) the ``stage`` ('first', 'middle' or 'last' of
    ``stages.stage_layers``) holds at the end of its warm-up: ``schedule.in_flight_layers`` of
    its chunks, plus the correction ``Corrections.pp_extra_layers_per_microbatch`` extra
    layer-activations per in-flight micro-batch of a pipelined stage."""
    layers = _trainer_layers(ctx, b)
    rank = {"first": np.zeros_like(b.pp), "middle": layers.middle_rank, "last": b.pp - 1.0}[stage]
    schedule = resolved_schedule(b.pp_schedule, b.vpp, ctx.profile.pp_schedule)
    chunks = getattr(layers, f"{stage}_chunks")
    flying = in_flight_layers(chunks, b.pp, b.vpp, b.grad_acc, rank, schedule)
    extra = ctx.corrections.pp_extra_layers_per_microbatch
    if extra == 0.0:  # neutral (most profiles): 0 · a finite count, skipped
        return flying
    micro_in_flight = in_flight_layers(np.ones((1, len(b))), b.pp, np.ones_like(b.pp), b.grad_acc, rank, schedule)
    return flying + np.where(b.pp > 1, extra * micro_in_flight, 0.0)


STAGE_ENDS = {"first": True, "middle": None, "last": False}  # params_on_stage's ``ends`` per stage


def _one_stage_params(ctx: CostContext, b: LayoutBatch, layers: StageLayers, stage: str,
                      copies: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(non-expert, expert) parameters per GPU of ``stage``, times ``copies``."""
    dense, expert = params_on_stage(ctx, b, getattr(layers, f"{stage}_dense"), getattr(layers, f"{stage}_moe"),
                                    STAGE_ENDS[stage])
    return copies * dense, copies * expert


@once_per_batch
def _copies(ctx: CostContext, b: LayoutBatch) -> np.ndarray:
    """``schedule.parameter_copies`` of the resolved schedule (2 under DualPipe, else 1)."""
    return parameter_copies(resolved_schedule(b.pp_schedule, b.vpp, ctx.profile.pp_schedule))


def stage_param_counts(ctx: CostContext, b: LayoutBatch, layers: StageLayers) -> dict[str, tuple]:
    """(non-expert, expert) parameters per GPU of the first, the middle and the last stage,
    times the schedule's copies (``schedule.parameter_copies``: 2 under DualPipe)."""
    copies = _copies(ctx, b)
    return {stage: _one_stage_params(ctx, b, layers, stage, copies) for stage in STAGE_ENDS}


def heavier_stage_params(params: dict[str, tuple]) -> dict[str, np.ndarray]:
    """Parameters per GPU of the heaviest of the first, middle and last stage (dense, expert)."""
    pick = heaviest_stage(*(params[s][0] + params[s][1] for s in ("first", "middle", "last")))
    return {"dense": choose_stage(pick, *(params[s][0] for s in ("first", "middle", "last"))),
            "expert": choose_stage(pick, *(params[s][1] for s in ("first", "middle", "last")))}


@per_group
def layout_stage_params(ctx: CostContext, b: LayoutBatch) -> dict[str, np.ndarray]:
    """``heavier_stage_params`` of the batch's ``stage_param_counts``."""
    return heavier_stage_params(stage_param_counts(ctx, b, _trainer_layers(ctx, b)))


@per_group
def stage_params(ctx: CostContext, b: LayoutBatch, stage: str) -> tuple[np.ndarray, np.ndarray]:
    """``stage_param_counts`` of one stage (only that stage computed)."""
    return _one_stage_params(ctx, b, _trainer_layers(ctx, b), stage, _copies(ctx, b))


@per_group
def stage_model_states_on_gpu(ctx: CostContext, b: LayoutBatch, stage: str) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """The GPU's model-state terms of ``stage`` after ``offload.move_to_host``, and the host bytes."""
    params = stage_params(ctx, b, stage)
    terms = model_state_bytes(ctx, b, *params)
    return terms, move_to_host(ctx, b, terms, owned_params(ctx, b, *params))
