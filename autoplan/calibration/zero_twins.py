"""Runs of the Ultra-Scale Playbook sweep that their ZeRO twin shows to be failed or straggling.

The sweep often ran one layout twice, with ZeRO-0 and with ZeRO-1 (same model, nodes, dp, tp,
pp, micro-batch and gradient accumulation). In nanotron the two differ only in how the optimizer
states are sharded and in one collective per step (ZeRO-0 all-reduces the fp32 gradients inside
the last backward, ZeRO-1 also all-gathers the updated bf16 parameters after the optimizer step:
src/nanotron/optim/gradient_accumulator.py ``get_fp32_accum_hook``, src/nanotron/optim/zero.py
``_all_gather_params``), so the layout bounds how far apart their speeds can be: the cost model
puts the two twins of every pair within ``max_predicted_twin_ratio`` of each other (2.4 on the
shipped profile, printed by ``benchmarks/accuracy.py``, but where ZeRO-0's larger optimizer
states push one twin into the allocator's retry regime, cost.evaluate.memory_pressure_s: one
pair, 3.2x). Yet 31 of the sweep's 166 twin pairs differ by more than 3x, up to 41x (e.g. 8B tp2
pp8 on 8 nodes: 1.3% MFU with ZeRO-0, 31.9% with ZeRO-1), none of them near the card (measured
peaks at most 0.83 of it, where the regime starts at 0.85-0.95). A gap that size is no property of
the layout: the slower twin is a failed or straggling job (a slow node, a congested link).

``zero_twin_anomalies`` marks the slower twin of each such pair, with a threshold ``factor``
(default ``TWIN_FACTOR`` = 3, above the model's largest twin ratio outside the retry regime). The ranking figures of
``benchmarks/accuracy.py`` are reported both with these runs and without them, with their count;
no run is dropped from the data or the error bands' held-out rows, and only their speed is left
out of the fits (``accuracy.straggler_ids``). Runs without a twin cannot be checked this way, so
the same kind of failure stays in the rest of the sweep unmarked.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from autoplan.calibration.rows import Row

TWIN_FACTOR = 3.0


def twin_key(row: Row) -> tuple:
    """What a run shares with its ZeRO twin: model, cell (model and nodes) and every layout field
    but ``zero``."""
    return (row.model.name, row.cell, tuple(sorted((k, v) for k, v in row.layout.items() if k != "zero")))


def twin_groups(rows: Sequence[Row]) -> list[np.ndarray]:
    """Indices of the ``ok`` runs with a measured speed that share a ``twin_key``, groups of two or more."""
    groups: dict[tuple, list[int]] = {}
    for i, row in enumerate(rows):
        if row.status == "ok" and row.has_time:
            groups.setdefault(twin_key(row), []).append(i)
    return [np.asarray(g) for g in groups.values() if len(g) > 1]


def zero_twin_anomalies(rows: Sequence[Row], factor: float = TWIN_FACTOR,
                        groups: Sequence[np.ndarray] | None = None) -> np.ndarray:
    """Per row: True where the run is more than ``factor`` times slower (tokens/s) than a ZeRO twin
    (``groups``: the rows' ``twin_groups`` where the caller has them)."""
    if factor <= 1.0:
        raise ValueError(f"factor > 1 must hold, got factor={factor}")
    out = np.zeros(len(rows), dtype=bool)
    tokens = np.array([row.tokens_per_s_per_gpu for row in rows], dtype=float)
    for group in twin_groups(rows) if groups is None else groups:
        out[group] = tokens[group] * factor < tokens[group].max()
    return out


def max_predicted_twin_ratio(rows: Sequence[Row], predicted_tokens: np.ndarray,
                             groups: Sequence[np.ndarray] | None = None) -> float:
    """The largest ratio of predicted tokens/s between ZeRO twins (1.0 when no run has a twin)."""
    groups = twin_groups(rows) if groups is None else groups
    return float(max((predicted_tokens[g].max() / predicted_tokens[g].min() for g in groups), default=1.0))
