"""The one evaluation of the rule table, used by search, estimate, explain, compare and export.

``legality_codes`` gives the first broken rule of every layout of a batch (an index into
``REASON_CODES``, 0 = legal); ``broken_rules`` lists every broken rule of one layout with its
message and values; ``suggest_fix`` the nearest change that repairs a rule; ``check_layout``
refuses one plan for a trainer the way export does. The order of ``RULES`` is the order in which
a layout's problems are told: structure first, then the batch, then what the trainer lacks.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import numpy as np

from autoplan.cost.context import per_context
from autoplan.errors import LayoutError
from autoplan.layout import Layout, LayoutBatch
from autoplan.rules import (
    capabilities,
    common,
    deepspeed,
    hybrid,
    megatron,
    optimizers,
    recompute,
    schedules,
    stages,
    torchtitan,
)
from autoplan.rules.table import Rule, RuleContext

RULES: list[Rule] = [
    *common.RULES, *stages.RULES, *common.PIPELINE_RULES,
    *megatron.RULES, *torchtitan.RULES, *capabilities.RULES, *deepspeed.RULES, *recompute.RULES,
    *common.BATCH_RULES, *capabilities.PROFILE_RULES, *schedules.RULES, *optimizers.RULES,
    *hybrid.RULES,
]
REASON_CODES = ["ok"] + [rule.name for rule in RULES]
REASON_MESSAGES = {rule.name: rule.invariant for rule in RULES}
_BY_NAME = {rule.name: rule for rule in RULES}
assert len(_BY_NAME) == len(RULES), "rule names must be unique"


class TrainerRuleError(LayoutError):
    """A plan that a trainer would refuse; ``broken`` lists (rule name, message) pairs."""

    def __init__(self, trainer: str, broken: list[tuple[str, str]]):
        self.trainer = trainer
        self.broken = broken
        lines = "; ".join(message for _, message in broken)
        super().__init__(f"{trainer} refuses this plan: {lines}")


def rules_for(ctx: Any) -> list[Rule]:
    """The rules that bind the context's trainer (and its hardware, when known)."""
    rctx = RuleContext.of(ctx)
    return [rule for rule in RULES if rule.binds(rctx)]


@lru_cache(maxsize=None)
def _binding(family: tuple[str, ...]) -> tuple[tuple[int, ...], tuple[Rule, ...]]:
    """(reason codes, rules) of the rules that bind a trainer of ``family`` (``Rule.binds`` reads
    nothing else of the context), in table order."""
    pairs = [(index, rule) for index, rule in enumerate(RULES, start=1) if rule.binds_family(family)]
    return tuple(index for index, _ in pairs), tuple(rule for _, rule in pairs)


@per_context
def _live(rctx: RuleContext) -> tuple[tuple[int, ...], tuple[Rule, ...]]:
    """``_binding`` of the context's trainer less the rules whose condition on the context
    (``Rule.when``) fails: those break nowhere."""
    pairs = [(index, rule) for index, rule in zip(*_binding(rctx.profile.family)) if rule.can_break(rctx)]
    return tuple(index for index, _ in pairs), tuple(rule for _, rule in pairs)


def legality_codes(ctx: Any, batch: LayoutBatch, *, allow_uneven: bool | None = None) -> np.ndarray:
    """Index into ``REASON_CODES`` of the first broken rule per layout (0 = legal).

    ``ctx`` is a ``CostContext`` or a ``RuleContext``; ``allow_uneven`` is False under --even-stages-only.
    """
    rctx = RuleContext.of(ctx, allow_uneven)
    indices, rules = _live(rctx)
    # One row per binding rule, True where it breaks: each predicate's array (or scalar) is written
    # into its row as Rule.broken_mask makes it (cast to bool, broadcast over the layouts), without
    # that call's checks; one reduction then finds the rules that break anywhere (most break
    # nowhere), instead of a count per rule (on a batch of one most of this function's time).
    broken = np.empty((len(rules), len(batch)), dtype=bool)
    for row, rule in enumerate(rules):
        broken[row] = rule.broken(rctx, batch)
    codes = np.zeros(len(batch), dtype=np.int64)
    # Last rule first, so an earlier rule overwrites a later one: the first broken rule wins.
    for row in np.flatnonzero(broken.any(axis=1))[::-1]:
        codes[broken[row]] = indices[row]
    return codes


def broken_rules(ctx: Any, batch: LayoutBatch, i: int, *, allow_uneven: bool | None = None) -> list[tuple[str, str]]:
    """(rule name, 'invariant (values)') for every rule layout ``i`` breaks, in table order."""
    rctx = RuleContext.of(ctx, allow_uneven)
    one, layout = batch.take(np.array([i])), batch.layout(i)
    return [(rule.name, rule.message(rctx, layout)) for rule in RULES
            if rule.binds(rctx) and rule.broken_mask(rctx, one)[0]]


def explain_reason(ctx: Any, batch: LayoutBatch, i: int, code: int) -> str:
    """'invariant (values)' of rule ``code`` for layout ``i`` ('' for code 0)."""
    if code == 0:
        return ""
    return _BY_NAME[REASON_CODES[code]].message(RuleContext.of(ctx), batch.layout(i))


def suggest_fix(ctx: Any, batch: LayoutBatch, i: int, code: int) -> str:
    """The nearest change that repairs rule ``code`` for layout ``i`` ('' when none is obvious)."""
    rule = _BY_NAME.get(REASON_CODES[code]) if code else None
    if rule is None or rule.fix is None:
        return ""
    return rule.fix(RuleContext.of(ctx), batch.layout(i))


def check_layout(ctx: RuleContext, layout: Layout) -> None:
    """Raise ``TrainerRuleError`` naming every rule ``layout`` breaks for ``ctx``'s trainer."""
    broken = broken_rules(ctx, LayoutBatch.from_layouts([layout]), 0)
    if broken:
        raise TrainerRuleError(ctx.profile.name, broken)
