"""The ``recompute_modules`` knob: a set of Megatron-Core selective-recompute module names,
stored in a ``LayoutBatch`` as one float code (the sum of 2**index of each module), so the cost
model and the rules test membership with array arithmetic."""

from __future__ import annotations

from typing import Any

import numpy as np

from autoplan.errors import LayoutError

# Megatron-Core's selective-recompute modules (core_v0.15.3 transformer_config.py,
# ``recompute_modules``), in the bit order of their code: a set of modules is stored in a
# LayoutBatch as the sum of 2**index.
RECOMPUTE_MODULES = ("core_attn", "mlp", "layernorm", "moe", "moe_act", "shared_experts", "mla_up_proj")


def modules_code(value: Any) -> int:
    """The code of a set of recompute modules ('mlp,core_attn', a list, or '' for none)."""
    names = value if isinstance(value, (list, tuple)) else str(value).replace(" ", ",").split(",")
    code = 0
    for name in (str(n).strip().lower() for n in names):
        if not name:
            continue
        if name not in RECOMPUTE_MODULES:
            raise LayoutError(f"recompute_modules: {name!r} is not one of {', '.join(RECOMPUTE_MODULES)}")
        code |= 1 << RECOMPUTE_MODULES.index(name)
    return code


def modules_text(code: float) -> str:
    """The comma-separated modules of a code, in ``RECOMPUTE_MODULES`` order ('' for none)."""
    return ",".join(name for i, name in enumerate(RECOMPUTE_MODULES) if int(code) >> i & 1)


def modules_texts(codes: np.ndarray) -> np.ndarray:
    """``modules_text`` of an array of codes, as an object array (one lookup, no loop over rows)."""
    table = np.asarray([modules_text(c) for c in range(2 ** len(RECOMPUTE_MODULES))], dtype=object)
    return table[np.asarray(codes).astype(int)]


def module_bit(codes: np.ndarray, name: str) -> np.ndarray:
    """1.0 where the module set ``codes`` (a LayoutBatch's ``recompute_modules``) holds ``name``."""
    if not np.count_nonzero(codes):  # the common batch names no module: the same zeros, without the arithmetic
        return np.zeros(np.shape(codes), dtype=np.asarray(codes).dtype)
    return np.floor(codes / 2.0 ** RECOMPUTE_MODULES.index(name)) % 2.0
