"""The recipe's order of the feasible plans: by predicted throughput, then the near-tied ones by
robustness (see :mod:`autoplan.report.near_ties` for the reasoning and the numbers).

``search`` applies :func:`robust_order` to every result, so the library (``autoplan.search``),
the CLI, ``capacity`` and the per-trainer searches of an export all put the same plan first. A
row moved by the re-ordering is marked (column ``robust_moved``) so a table can say why rank 2
has the higher tokens/s.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from autoplan.calibration.uncertainty import ErrorBand, error_band
from autoplan.cost.comm import strides
from autoplan.units import GiB

HEADROOM_MARGIN = 0.10  # fraction of the GPU's usable memory
REORDER_WITHIN = 0.05  # re-order by robustness only plans predicted within 5% of the best
CROSSING_DIMS = ("tp", "cp", "ep", "pp", "dp")
ROBUST_MARK = "*"  # after the rank of a plan placed by robustness, in tables


def cross_node_dims(result, rows: np.ndarray) -> np.ndarray:
    """Per row: how many of tp, cp, ep, pp, dp form groups that leave the scale-up domain
    (stride · size > domain size, the test of ``autoplan.cost.comm.group_link``)."""
    b = result.table.batch.take(rows)
    st = strides(b.placement, b.tp, b.cp, b.dp, b.pp)
    st["ep"] = b.etp  # expert groups are laid out over the etp-strided ranks (cost.time)
    domain = float(result.ctx.cluster.scale_up_domain_size)
    sizes = {"tp": b.tp, "cp": b.cp, "ep": b.ep, "pp": b.pp, "dp": b.dp}
    return sum(((sizes[d] > 1) & (st[d] * sizes[d] > domain)).astype(int) for d in CROSSING_DIMS)


def result_band(result) -> ErrorBand:
    """The error band of a search's predictions (its trainer, GPU and model kind)."""
    return context_band(result.ctx)


def context_band(ctx) -> ErrorBand:
    """The error band of predictions in ``ctx`` (a ``CostContext``: its trainer, GPU, model kind
    and GPU count); a ``--profile`` calibrated with its own band for this GPU
    (``calibration.own_band``) gives that band, its memory side the shipped one where the
    calibration had too few memory rows."""
    shipped = error_band(ctx.profile.name, ctx.cluster.gpu, ctx.model.is_moe, gpus=ctx.training.gpus)
    own = ctx.profile.own_bands.get(ctx.cluster.gpu.name)
    if own is None:
        return shipped
    memory = own.get("peak_memory")
    return replace(shipped, group=f"your calibration ({own['rows']} cross-validated runs)", measured=True,
                   num_heldout_rows=own["rows"], tokens_low_factor=own["tokens_per_s"][0],
                   tokens_high_factor=own["tokens_per_s"][1],
                   **({} if memory is None else {"memory_low_factor": memory[0], "memory_high_factor": memory[1],
                                                 "memory_measured": True,
                                                 "num_heldout_memory_rows": own.get("memory_rows", 0)}))


def near_tied_count(tokens_per_s: np.ndarray, band: ErrorBand) -> int:
    """How many of the leading rows (feasible, ranked by tokens/s) have an interval that
    overlaps the best one's: tokens · high >= best · low."""
    if len(tokens_per_s) == 0:
        return 0
    best = float(np.max(tokens_per_s))
    return leading_run(tokens_per_s * band.tokens_high_factor >= best * band.tokens_low_factor)


def leading_feasible(result) -> np.ndarray:
    return np.arange(leading_run(np.asarray(result.feasible, dtype=bool)))


def leading_run(mask: np.ndarray) -> int:
    """How many leading entries of ``mask`` are true."""
    return int(np.argmin(mask)) if not mask.all() else len(mask)


def reordered_count(tokens_per_s: np.ndarray, num_near_tied: int) -> int:
    """How many leading plans ``robust_order`` re-orders: the near-tied ones predicted within
    ``REORDER_WITHIN`` of the best (``tokens_per_s`` ranked, best first)."""
    if num_near_tied < 2:
        return num_near_tied
    head = np.asarray(tokens_per_s[:num_near_tied], dtype=float)
    return leading_run(head >= (1.0 - REORDER_WITHIN) * float(np.max(head)))


def robust_order(result):
    """``result`` with its near-tied plans re-ordered by robustness (stable; see the module
    docstring); the Pareto display of nsga2 and a lone best plan are left as they are."""
    from autoplan.search.recipe import take

    if result.sampler == "nsga2":
        return result
    n = reordered_count(result.table["tokens_per_s_per_gpu"], near_tied_count(result.table["tokens_per_s_per_gpu"][leading_feasible(result)],
                                                                    result_band(result)))
    # (idempotent: ordered once, the head is in its robust order and comes back unchanged)
    moved = np.asarray(result.table.columns.get("robust_moved", np.zeros(len(result.table), dtype=bool)))
    if n < 2:
        return replace(result, table=_with_column(result.table, "robust_moved", moved))
    head = np.arange(n)
    usable = result.ctx.cluster.gpu.usable_memory_bytes / GiB
    tight = result.table["memory_headroom_gib"][head] < HEADROOM_MARGIN * usable
    order = np.lexsort((head, cross_node_dims(result, head), tight))
    permutation = np.concatenate([order, np.arange(n, len(result.table))])
    moved = moved[permutation]
    moved[:n] |= order != head
    table = _with_column(take(result.table, permutation), "robust_moved", moved)
    return replace(result, table=table, reasons=result.reasons[permutation])


def _with_column(table, name: str, values: np.ndarray):
    from autoplan.cost.evaluate import CostTable

    return CostTable(batch=table.batch, columns={**table.columns, name: values}, training=table.training)
