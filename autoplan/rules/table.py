"""The machinery of the rule table: a rule as data, and what rules read.

A ``Rule`` names an invariant a trainer checks before it starts, in words, with the trainer
source it restates. Its predicate is vectorised over a ``LayoutBatch`` (True = broken) so the
search checks 10^6 layouts in one call, and export checks its one plan with the same code as a
batch of one (STYLE.md §2, "one rule, one place").

Rules read a ``RuleContext``: the model, the trainer profile (its capability facts: ZeRO stages,
vpp, cp, ep), the training setup (cluster, GPU count, sequence length) and whether uneven pipeline stages are
allowed (the default; ``--even-stages-only`` turns them off).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from autoplan.layout import Layout, LayoutBatch
from autoplan.profiles import TrainerProfile
from autoplan.specs.hardware import Cluster
from autoplan.specs.model import ModelSpec
from autoplan.specs.training import TrainingSpec

ALL = ("all",)  # a rule that binds every trainer, hf and calibrated profiles included


@dataclass(frozen=True)
class RuleContext:
    """What the rules read besides the layouts."""

    model: ModelSpec
    profile: TrainerProfile
    training: TrainingSpec
    allow_uneven_pp: bool = True  # False under --even-stages-only: layers must divide into pp·vpp stages

    @property
    def cluster(self) -> Cluster:
        return self.training.cluster

    def __getstate__(self) -> dict[str, Any]:
        """The fields alone: what ``cost.context.per_context`` keeps (rules, whose predicates
        are lambdas) is rebuilt where the context is unpickled."""
        return {k: v for k, v in self.__dict__.items() if k != "_per_context"}

    @classmethod
    def of(cls, ctx: Any, allow_uneven_pp: bool | None = None) -> RuleContext:
        """A ``RuleContext`` from a ``CostContext`` (or another ``RuleContext``); ``None`` keeps a
        ``RuleContext``'s choice and allows uneven stages for a ``CostContext``."""
        if not isinstance(ctx, RuleContext):
            # (a CostContext keeps its own, built once: ``CostContext.rule_context``)
            kept = getattr(ctx, "rule_context", None)
            ctx = kept if kept is not None else cls(model=ctx.model, profile=ctx.profile, training=ctx.training)
        if allow_uneven_pp is None or ctx.allow_uneven_pp == allow_uneven_pp:
            return ctx
        return replace(ctx, allow_uneven_pp=allow_uneven_pp)


Predicate = Callable[[RuleContext, LayoutBatch], Any]  # bool array (or scalar) over layouts
Formatter = Callable[[RuleContext, Layout], str]


@dataclass(frozen=True)
class Rule:
    """One invariant: the trainers it binds, the words, the predicate, the values, the source."""

    name: str
    trainers: tuple[str, ...]
    invariant: str
    broken: Predicate
    values: Formatter
    source: str
    fix: Formatter | None = None  # the nearest change that repairs it ('' when none is obvious)
    # The rule's condition on the context alone (the model, the setup, the trainer's capabilities),
    # where it has one: ``broken`` is then the condition on the layouts, and the rule breaks where
    # both hold. The rule table checks it once per context (rules.evaluate).
    when: Callable[[RuleContext], bool] | None = None

    def binds(self, ctx: RuleContext) -> bool:
        """Whether the rule binds the context's trainer: by its name or a base it inherits
        (``TrainerProfile.family``: Megatron-Core's rules bind Megatron-Bridge too)."""
        return self.binds_family(ctx.profile.family)

    def binds_family(self, family: tuple[str, ...]) -> bool:
        """``binds`` of a trainer whose ``TrainerProfile.family`` is ``family``."""
        return self.trainers == ALL or any(name in self.trainers for name in family)

    def can_break(self, ctx: RuleContext) -> bool:
        """Whether the rule's condition on the context (``when``) holds."""
        return self.when is None or bool(self.when(ctx))

    def broken_mask(self, ctx: RuleContext, batch: LayoutBatch) -> np.ndarray:
        """The predicate as a bool array with one entry per layout (False where ``when`` fails)."""
        if not self.can_break(ctx):
            return np.zeros(len(batch), dtype=bool)
        broken = self.broken(ctx, batch)
        if isinstance(broken, np.ndarray) and broken.dtype == bool and broken.shape == (len(batch),):
            return broken  # (most predicates: skip the ~4 µs of asarray and broadcast_to)
        return np.broadcast_to(np.asarray(broken, dtype=bool), (len(batch),))

    def message(self, ctx: RuleContext, layout: Layout) -> str:
        return f"{self.invariant} ({self.values(ctx, layout)})"


# What rules read of the training setup (``x`` is a LayoutBatch or a Layout). The GPU count must
# be whole nodes beyond one node: the Cluster refuses anything else before a rule runs.
def gpus_of(ctx: RuleContext, x: Any) -> Any:
    return ctx.training.gpus


def indivisible(value: Any, divisor: Any) -> Any:
    """``value % divisor != 0`` without the float modulo (np.remainder is ~4x slower than the
    three operations here). Exact for the integer-valued floats of a layout below 2^53: where the
    divisor divides the value the quotient is an exact integer; where it does not, the quotient is
    at least 1/divisor away from one, far more than its rounding error, so floor·divisor differs."""
    return np.floor(value / divisor) * divisor != value


def one_of(values: Any, allowed: Any) -> Any:
    """``np.isin(values, allowed)`` by one comparison per allowed value: the lists are a few
    codes long, and np.isin's set-up costs ~8 µs a call (most of a small batch's legality check)."""
    if not allowed:
        return np.zeros(np.shape(values), dtype=bool)
    out = np.equal(values, allowed[0])  # (a bool array for an array, np.bool_ for a number)
    for value in allowed[1:]:
        out |= values == value
    return out


def seq_len_of(ctx: RuleContext, x: Any) -> Any:
    return ctx.training.seq_len


def num_experts(ctx: RuleContext) -> int:
    """Routed experts of the model (0 for a dense model)."""
    return ctx.model.moe.num_experts if ctx.model.moe is not None else 0


def nearest(value: int, ok: Callable[[int], bool], reach: int = 4096) -> int | None:
    """The integer >= 1 closest to ``value`` for which ``ok`` holds (smaller first on ties)."""
    for delta in range(reach):
        for candidate in (value - delta, value + delta):
            if candidate >= 1 and ok(candidate):
                return candidate
    return None
