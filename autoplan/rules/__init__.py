"""Each trainer's rules as one vectorised table, used by search, estimate, compare and export.

``RULES`` (in :mod:`autoplan.rules.evaluate`) is the table: each ``Rule`` names the trainers it
binds, the invariant in words, a predicate over a ``LayoutBatch`` (True = broken), the values to
show, a nearest fix and the trainer source it restates. Generic rules live in ``common``, the
capability facts of the trainer profiles in ``capabilities``, uneven pipeline stages in
``stages``, recompute and offload knobs in ``recompute``, and each trainer's own checks in
``megatron``, ``torchtitan`` and ``deepspeed``.
"""

from autoplan.rules.evaluate import (
    REASON_CODES,
    REASON_MESSAGES,
    RULES,
    TrainerRuleError,
    broken_rules,
    check_layout,
    explain_reason,
    legality_codes,
    rules_for,
    suggest_fix,
)
from autoplan.rules.table import ALL, Rule, RuleContext

__all__ = ["ALL", "REASON_CODES", "REASON_MESSAGES", "RULES", "Rule", "RuleContext", "TrainerRuleError",
           "broken_rules", "check_layout", "explain_reason", "legality_codes", "rules_for", "suggest_fix"]
