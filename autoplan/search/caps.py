"""Why a knob is capped: values of the space that no layout can use, and the reason.

On 72 GPUs the MoE space's ep 16 is never legal: ep·etp must divide dp·cp·tp = 72/pp, and 72
has no factor 16. The exhaustive search tallies, per knob value of the space, how many layouts
were legal and which rule the others broke first (:func:`tally`, over every layout, the pruned
and the dropped ones included); :func:`cap_notes` turns the values never legal above the
largest legal one into one line per knob.
"""

from __future__ import annotations

import numpy as np

from autoplan.rules import REASON_CODES, REASON_MESSAGES
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


def cap_notes(space: SearchSpace, tallies: dict[str, np.ndarray], gpus: int) -> list[str]:
    """'ep <= 8 on 72 GPUs: ep 16, 32 are never legal (72 has no factor 16)' for each knob
    whose largest values are never legal while a smaller one is."""
    notes = []
    for k, counts in tallies.items():
        values = space.values[k]
        legal = counts[:, 0] > 0
        if not legal.any() or legal[-1]:
            continue
        top = int(np.flatnonzero(legal)[-1])
        capped = list(values[top + 1:])
        notes.append(f"{k} <= {values[top]} on {gpus} GPUs: {k} {', '.join(map(str, capped))} "
                     f"{'is' if len(capped) == 1 else 'are'} never legal "
                     f"({_why(k, capped[0], counts[top + 1], gpus)})")
    return notes


def _why(knob: str, value: int, codes: np.ndarray, gpus: int) -> str:
    """The reason of the first capped value: the GPU count's factors, else its commonest rule."""
    if gpus % value and knob in ("tp", "pp", "cp", "ep", "etp"):
        return f"{gpus} has no factor {value}"
    code = int(np.argmax(codes[1:])) + 1
    if code == DEGREES:
        return f"tp·pp·cp must divide {gpus}"
    return REASON_MESSAGES.get(REASON_CODES[code], REASON_CODES[code])
