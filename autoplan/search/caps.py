"""Why a knob is capped: values of the space that no layout can use, and the reason.

On 72 GPUs the MoE space's ep 16 is never legal: ep·etp must divide dp·cp·tp = 72/pp, and 72
has no factor 16. The exhaustive search tallies, per knob value of the space, how many layouts
were legal and which rule the others broke first (:func:`tally`, over every layout, the pruned
and the dropped ones included); :func:`cap_notes` turns the values never legal above the
largest legal one into one line per knob, its reason read off legal layouts given the capped
value (:func:`probe_reason`) where the GPU count's factors do not decide it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from autoplan.layout import Layout, LayoutBatch
from autoplan.rules import REASON_CODES, REASON_MESSAGES, RULES, RuleContext
from autoplan.space import INT_KNOBS, KNOBS, SearchSpace

DEGREES = len(REASON_CODES)  # the code of a layout dropped because tp·pp·cp does not divide the GPUs
NUM_CODES = DEGREES + 1
TALLIED = tuple(k for k in INT_KNOBS if k not in ("zero", "recompute_layers", "offload_layers", "hsdp"))


def tally(space: SearchSpace, flat_index: np.ndarray, codes: np.ndarray,
          axes: tuple[np.ndarray, ...] | None = None) -> dict[str, np.ndarray]:
    """Per degree knob with several values: an array [value index, code] of layout counts,
    where ``codes`` is each layout's first broken rule (0 = legal, ``DEGREES`` = dropped);
    ``axes``: ``np.unravel_index(flat_index, space.shape)`` when the caller has it."""
    axes = np.unravel_index(flat_index, space.shape) if axes is None else axes
    out = {}
    for k, axis in zip(KNOBS, axes):
        n = len(space.values[k])
        if k in TALLIED and n > 1:
            out[k] = np.bincount(axis * NUM_CODES + codes, minlength=n * NUM_CODES).reshape(n, NUM_CODES)
    return out


MAX_REASONS = 3  # rules named for one capped value when no single rule breaks every probed layout
Probe = Callable[[str, int, int], "str | None"]  # (knob, largest legal value, capped value) -> reason


def cap_notes(space: SearchSpace, tallies: dict[str, np.ndarray], gpus: int, probe: Probe | None = None) -> list[str]:
    """'ep <= 8 on 72 GPUs: ep 16, 32 are never legal (72 has no factor 16)' for each knob
    whose largest values are never legal while a smaller one is. The reason: the GPU count's
    factors where they decide, else ``probe`` (:func:`probe_reason` on legal layouts), else
    the tallies' rule whose share rises most (``_why``)."""
    notes = []
    for k, counts in tallies.items():
        values = space.values[k]
        legal = counts[:, 0] > 0
        if not legal.any() or legal[-1]:
            continue
        top = int(np.flatnonzero(legal)[-1])
        capped = list(values[top + 1:])
        reason = _factor_reason(k, capped[0], gpus) or (probe and probe(k, values[top], capped[0]))
        notes.append(f"{k} <= {values[top]} on {gpus} GPUs: {k} {', '.join(map(str, capped))} "
                     f"{'is' if len(capped) == 1 else 'are'} never legal "
                     f"({reason or _why(counts[top + 1], counts[top], gpus)})")
    return notes


def probe_reason(ctx: Any, legal: Sequence[Layout], knob: str, value: int, gpus: int,
                 allow_uneven: bool = True) -> str | None:
    """Why ``value`` of ``knob`` is never legal, read off ``legal`` layouts: each is given
    ``value`` (dp rescaled to keep the GPUs and grad_acc to keep the batch where the knob changes
    them; sequence parallelism following tp as it did), and the first rule of the table that
    breaks every one of them names the reason. The first-broken
    tallies cannot tell it: a rule earlier in the table can break the same layouts for a reason
    that holds at every value (nanotron on 512 GPUs: 'vpp needs virtual stages' breaks 2 of 3
    cp 2 layouts first, as it does cp 1 layouts). Where no one rule breaks them all, the rules
    that together do (at most MAX_REASONS, the one breaking most first), joined by 'or'. None
    when no layout can be given ``value``."""
    mods = [m for m in (_with_value(layout, knob, value) for layout in legal) if m is not None]
    if not mods:
        return None
    rctx = RuleContext.of(ctx, allow_uneven)
    batch = LayoutBatch.from_layouts(mods)
    masks = [(rule.name, rule.broken_mask(rctx, batch)) for rule in RULES if rule.binds(rctx)]
    for name, broken in masks:
        if broken.all():
            return REASON_MESSAGES.get(name, name)
    # No one rule breaks them all: the rules that do, the one breaking most first (greedy cover).
    left, names = np.ones(len(mods), dtype=bool), []
    while left.any() and len(names) < MAX_REASONS:
        name, broken = max(masks, key=lambda m: int((m[1] & left).sum()))
        if not (broken & left).any():
            break
        names.append(REASON_MESSAGES.get(name, name))
        left &= ~broken
    return ", or ".join(names) or None


def _with_value(layout: Layout, knob: str, value: int) -> Layout | None:
    """``layout`` with ``knob`` = ``value``, the GPUs and the global batch kept (None where the
    rescaled dp or grad_acc would not be whole)."""
    old = getattr(layout, knob)
    change: dict[str, Any] = {knob: value}
    dp, grad_acc = layout.dp, layout.grad_acc
    if knob in ("tp", "pp", "cp"):  # dp·tp·pp·cp = GPUs; dp·mbs·grad_acc = the batch
        if (dp * old) % value or (grad_acc * value) % old:
            return None
        change.update(dp=dp * old // value, grad_acc=grad_acc * value // old)
        if knob == "tp" and layout.sp == (old > 1):
            change["sp"] = value > 1
    elif knob == "mbs":
        if (grad_acc * old) % value:
            return None
        change["grad_acc"] = grad_acc * old // value
    return replace(layout, **change)


def _factor_reason(knob: str, value: int, gpus: int) -> str | None:
    """'N has no factor v' where a degree knob's value does not divide the GPU count."""
    if gpus % value and knob in ("tp", "pp", "cp", "ep", "etp"):
        return f"{gpus} has no factor {value}"
    return None


def _why(codes: np.ndarray, legal_codes: np.ndarray, gpus: int) -> str:
    """The reason of the first capped value from the tallies alone (no legal layout to probe):
    the rule whose share of the layouts rises most from the largest legal value
    (``legal_codes``) to this one (``codes``); each layout counts under the first rule it
    breaks, so the commonest rule of the capped value can be one that breaks as often at every value."""
    rise = codes[1:] / max(codes.sum(), 1) - legal_codes[1:] / max(legal_codes.sum(), 1)
    code = int(np.argmax(rise)) + 1
    if code == DEGREES:
        return f"tp·pp·cp must divide {gpus}"
    return REASON_MESSAGES.get(REASON_CODES[code], REASON_CODES[code])
