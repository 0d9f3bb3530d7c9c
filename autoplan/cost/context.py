"""CostContext: everything the cost model needs besides the layouts."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

from autoplan.cost.params import ParamCounts, count_params
from autoplan.profiles import (
    CalibratedParameters,
    Corrections,
    PhysicalEfficiency,
    TrainerProfile,
)
from autoplan.specs.hardware import Cluster
from autoplan.specs.model import ModelSpec
from autoplan.specs.training import MASTER_WEIGHT_BYTES, OPTIMIZER_STATE_BYTES, TrainingSpec

if TYPE_CHECKING:
    from autoplan.rules.table import RuleContext


@dataclass(frozen=True)
class CostContext:
    """The model, the training setup (cluster, sequence, batch), the trainer profile and its
    calibrated parameters (physical efficiencies and named corrections)."""

    model: ModelSpec
    training: TrainingSpec
    profile: TrainerProfile
    parameters: CalibratedParameters

    @property
    def cluster(self) -> Cluster:
        return self.training.cluster

    @property
    def flops_convention(self) -> str:
        """How model FLOPs are counted (see :class:`TrainingSpec`)."""
        return self.training.flops_convention

    @cached_property
    def params(self) -> ParamCounts:
        return count_params(self.model)

    def __getstate__(self) -> dict[str, Any]:
        """The fields alone: what ``per_context`` and ``rule_context`` keep is rebuilt where the
        context is unpickled (search.parallel's workers; the rules hold lambdas)."""
        return {k: v for k, v in self.__dict__.items() if k not in (_MEMO, "rule_context")}

    @cached_property
    def rule_context(self) -> RuleContext:
        """The ``RuleContext`` of this context (uneven stages allowed), built once: the rule table
        reads it on every ``legality_codes`` call."""
        from autoplan.rules.table import RuleContext  # (autoplan.rules imports from autoplan.cost)

        return RuleContext(model=self.model, profile=self.profile, training=self.training)

    @property
    def efficiency(self) -> PhysicalEfficiency:
        return self.parameters.efficiency

    @property
    def corrections(self) -> Corrections:
        return self.parameters.corrections

    @property
    def effective_hbm_bytes_per_s(self) -> float:
        """HBM bandwidth a memory-bound kernel reaches: hbm_bytes_per_s · hbm_efficiency."""
        return self.cluster.gpu.hbm_bytes_per_s * self.efficiency.hbm_efficiency

    @property
    def grad_reduce_bytes(self) -> float:
        """Bytes per gradient element the data-parallel reduction moves: 2 under
        ``TrainingSpec.grad_reduce_in_bf16`` (Megatron ``--grad-reduce-in-bf16`` keeps the DDP
        gradient buffer in bf16 and reduce-scatters that buffer: megatron/core/distributed/
        distributed_data_parallel.py, param_and_grad_buffer.py), else the profile's
        ``grad_reduce_bytes``."""
        return 2.0 if self.training.grad_reduce_in_bf16 else self.profile.model_states.grad_reduce_bytes

    @property
    def master_bytes(self) -> float:
        """Bytes per parameter of the optimizer's master weights: the profile's ``master_bytes``
        (fp32) unless ``TrainingSpec.master_weights`` names a smaller copy (MASTER_WEIGHT_BYTES)."""
        chosen = MASTER_WEIGHT_BYTES[self.training.master_weights]
        return self.profile.model_states.master_bytes if chosen is None else chosen

    @property
    def adam_state_bytes(self) -> float:
        """Bytes per parameter of AdamW's two moments: the profile's ``optimizer_bytes`` (fp32),
        or two moments of ``TrainingSpec.optimizer_state_dtype`` (OPTIMIZER_STATE_BYTES)."""
        if self.training.optimizer_state_dtype == "fp32":
            return self.profile.model_states.optimizer_bytes
        return 2.0 * OPTIMIZER_STATE_BYTES[self.training.optimizer_state_dtype]


# Where a context keeps what ``per_context`` computed of it (an entry of the instance's __dict__,
# as functools.cached_property keeps its values: a frozen dataclass's fields are untouched).
_MEMO = "_per_context"


def per_context(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Decorate a quantity of the context alone, ``fn(ctx, *options)`` (a ``CostContext`` or a
    ``RuleContext``; hashable ``options``, never layout values; an immutable result: numbers,
    tuples, frozen dataclasses): computed once per context and options, then kept with the context
    (both are frozen, so it never goes stale; ``dataclasses.replace`` makes a new context that
    computes afresh, and a pickled one leaves them behind: ``CostContext.__getstate__``). One
    evaluate() of one layout otherwise recomputed the same FLOP counts, overlap fractions and
    settings checks on every call."""
    name = f"{fn.__module__}.{fn.__qualname__}"

    @functools.wraps(fn)
    def wrapper(ctx: Any, *options: Any) -> Any:
        memo = ctx.__dict__.get(_MEMO)
        if memo is None:
            memo = ctx.__dict__[_MEMO] = {}
        key = (name, options)
        if key not in memo:
            memo[key] = fn(ctx, *options)
        return memo[key]

    return wrapper
