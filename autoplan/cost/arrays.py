"""Array helpers of the cost model that numpy has, but with less overhead on a small batch."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np


def select(conditions: Sequence[Any], choices: Sequence[Any], default: Any) -> np.ndarray:
    """``np.select(conditions, choices, default)``: per element the choice of the first true
    condition, else ``default``, as nested ``np.where`` from the last condition out. The same
    values and dtype (no arithmetic, numpy's type promotion over the choices and the default);
    np.select broadcasts every condition and choice first: 15-20 µs a call on a one-layout batch
    against 3-6 µs nested (2-5 conditions); about even at 65,536 layouts
    (tests/unit/cost/test_arrays.py).

    A choice may be a function that gives it, called only where its condition holds for some
    element (a schedule no layout of the batch runs costs nothing). Where a choice is a function,
    the default must have the result's shape and dtype, and so the choice and conditions no wider
    ones: skipping a np.where whose condition holds nowhere then changes nothing."""
    if len(conditions) != len(choices):
        raise ValueError(f"select: one choice per condition must hold, but got "
                         f"{len(conditions)} conditions and {len(choices)} choices")
    out = default
    for condition, choice in zip(reversed(conditions), reversed(choices)):
        if callable(choice):
            if not np.count_nonzero(condition):
                continue
            choice = choice()
        out = np.where(condition, choice, out)
    return np.asarray(out)


def stacked(*values: Any) -> np.ndarray:
    """``np.stack(np.broadcast_arrays(*values))``: the values (arrays or numbers) broadcast to one
    shape, on a new leading axis. The same values and dtype; ~2 µs a call on a small batch
    against ~8 µs (np.stack and np.broadcast_arrays check and reshape every input in Python), and
    ~0.8 µs where every value is an array of the first's shape (most calls: one ``np.array`` of
    them, whose dtype is numpy's promotion over the arrays, as ``np.result_type``'s; tried first,
    without a check of each value in Python)."""
    shape = getattr(values[0], "shape", None)
    if shape and type(values[0]) is np.ndarray:
        # (numpy refuses values of other shapes, numbers beside arrays among them, as
        # inhomogeneous: a result of the stacked shape means every value had the first's shape)
        try:
            out = np.array(values)
        except ValueError:
            pass
        else:
            if out.shape[1:] == shape:
                return out
    shape = np.broadcast(*values).shape if len(values) <= 32 else np.broadcast_shapes(*map(np.shape, values))
    out = np.empty((len(values), *shape), dtype=np.result_type(*values))
    for i, value in enumerate(values):
        out[i] = value
    return out


def zeros_like(value: Any, dtype: Any = None) -> np.ndarray:
    """``np.zeros_like(value, dtype)`` (C order): ~0.2 µs a call against ~0.9 µs."""
    value = np.asarray(value)
    return np.zeros(value.shape, dtype=value.dtype if dtype is None else dtype)


def ones_like(value: Any) -> np.ndarray:
    """``np.ones_like(value)`` (C order): ~0.3 µs a call against ~1.5 µs."""
    value = np.asarray(value)
    return np.ones(value.shape, dtype=value.dtype)
