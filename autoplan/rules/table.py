"""The machinery of the rule table: a rule as data, and what rules read.

A ``Rule`` names an invariant a trainer checks before it starts, in words, with the trainer
source it restates. Its predicate is vectorised over a ``LayoutBatch`` (True = broken) so the
search checks 10^6 layouts in one call, and export checks its one plan with the same code as a
batch of one (STYLE.md §2, "one rule, one place").

Rules read a ``RuleContext``: the model, the trainer profile (its capability facts: ZeRO stages,
vpp, cp, ep), the cluster when the hardware is known (export does not know it; rules that need
it are skipped there) and whether the user allowed uneven pipeline stages.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from autoplan.layout import Layout, LayoutBatch
from autoplan.profiles import TrainerProfile
from autoplan.specs.hardware import Cluster
from autoplan.specs.model import ModelSpec

ALL = ("all",)  # a rule that binds every trainer, hf and calibrated profiles included


@dataclass(frozen=True)
class RuleContext:
    """What the rules read besides the layouts."""

    model: ModelSpec
    profile: TrainerProfile
    cluster: Cluster | None = None  # None where the hardware is unknown (export)
    allow_uneven_pp: bool = False  # --allow-uneven-pp: layers need not divide into pp·vpp stages

    @classmethod
    def of(cls, ctx: Any, allow_uneven_pp: bool = False) -> RuleContext:
        """A ``RuleContext`` from a ``CostContext`` (or another ``RuleContext``)."""
        if isinstance(ctx, RuleContext):
            return ctx if not allow_uneven_pp else cls(ctx.model, ctx.profile, ctx.cluster, True)
        return cls(model=ctx.model, profile=ctx.profile, cluster=ctx.cluster, allow_uneven_pp=allow_uneven_pp)


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
    needs_hardware: bool = False  # reads ctx.cluster; skipped where the hardware is unknown

    def binds(self, ctx: RuleContext) -> bool:
        if self.needs_hardware and ctx.cluster is None:
            return False
        return self.trainers == ALL or ctx.profile.name in self.trainers

    def broken_mask(self, ctx: RuleContext, batch: LayoutBatch) -> np.ndarray:
        """The predicate as a bool array with one entry per layout."""
        return np.broadcast_to(np.asarray(self.broken(ctx, batch), dtype=bool), (len(batch),))

    def message(self, ctx: RuleContext, layout: Layout) -> str:
        return f"{self.invariant} ({self.values(ctx, layout)})"


# The training setup (gpus, sequence length, global batch) is read through these three, so it
# can move out of the layout into a TrainingSpec by changing them alone. ``x`` is a LayoutBatch
# or a Layout.
def gpus_of(ctx: RuleContext, x: Any) -> Any:
    return x.gpus


def seq_len_of(ctx: RuleContext, x: Any) -> Any:
    return x.seq_len


def gbs_seqs_of(ctx: RuleContext, x: Any) -> Any:
    return x.gbs_seqs


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
