"""Runs of the Ultra-Scale Playbook sweep that stalled at scale, found without the cost model.

The sweep ran each (model, tp, pp, micro-batch, ZeRO) layout at several node counts with one
global batch, so dp and gradient accumulation change with the nodes while the work of one GPU in
one micro-batch does not. With at least ``MIN_GRAD_ACC`` micro-batches per step the step's own
collectives (the data-parallel reduction, the optimizer) are a small share of a micro-batch's time,
so the seconds per micro-batch (step time / gradient accumulation, from the measured tokens/s
alone) of one such family should hardly move with the node count. On up to 16 nodes it does not
(median change 0.00-0.03 s; 0-12.5% of the judged runs more than ``STALL_S`` slower). On 32 and 64
nodes 38% and 89% of the judged runs are, most by 1.0-1.4 s per micro-batch (median +1.1-1.3 s
for the 64-node pipeline runs), whatever the model (1B or 8B), tp, pp and micro-batch, while other
runs of the same family and node count are not: a fixed stall per micro-batch, not a cost of the
layout.

Its cause is not established. It matches the EFA provider of libfabric, through which NCCL ran on
the sweep's p5 nodes: when a receiver has no buffer posted for a packet (receiver not ready) the
provider backs off that peer with a wait that doubles from a random 40-120 µs up to
``rnr_backoff_wait_time_cap``, 1 s by default (ofiwg/libfabric prov/efa/src/efa_env.c:
``FI_EFA_MAX_TIMEOUT``, "the maximum timeout (us) for backoff to a peer after a receiver not
ready error", default 1000000; the doubling in the RDM endpoint's RNR handling), and nanotron's
pipeline sends block on each transfer's metadata before its data
(src/nanotron/parallel/pipeline_parallel/p2p.py). A cost model of the layout cannot
predict it; ``scale_stalls`` marks such runs so that the ranking figures can be read with and
without them, and their speed is left out of the fits (``accuracy.straggler_ids``: an efficiency
fitted on a stall describes the stall). No run is dropped from the data or from the held-out rows
that the figures and the error bands are computed on.

A run is marked where its seconds per micro-batch exceed the median of its family's runs on at
most ``REFERENCE_MAX_NODES`` nodes by more than ``STALL_S`` (half the backoff cap: the gap
between the two modes is wider). Runs with fewer than ``MIN_GRAD_ACC`` micro-batches, and
families without a reference run, are not judged.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from autoplan.calibration.rows import Row
from autoplan.specs.hardware import load_gpu

REFERENCE_MAX_NODES = 8
MIN_GRAD_ACC = 4
STALL_S = 0.5


def nodes_of(row: Row) -> int:
    """The run's node count: its GPUs over its GPU preset's GPUs per node."""
    return row.num_gpus // load_gpu(row.hardware).gpus_per_node


def family_key(row: Row) -> tuple:
    """What stays fixed across node counts: the model and every layout field but the GPU count,
    dp, gradient accumulation and the global batch (which follow the nodes at a fixed batch)."""
    varying = ("gpus", "dp", "grad_acc", "gbs_seqs")
    return (row.model.name, tuple(sorted((k, v) for k, v in row.layout.items() if k not in varying)))


def seconds_per_microbatch(row: Row) -> float:
    """Measured step time / gradient accumulation: tokens per step / (GPUs · tokens/s per GPU) / m."""
    lay = row.layout
    tokens_per_step = lay["dp"] * lay["mbs"] * lay["grad_acc"] * lay["seq_len"]
    return tokens_per_step / (row.num_gpus * row.tokens_per_s_per_gpu) / lay["grad_acc"]


def stall_excess_s(rows: Sequence[Row]) -> np.ndarray:
    """Per row: seconds per micro-batch above its family's median at <= ``REFERENCE_MAX_NODES``
    nodes (NaN where the run is not judged: fewer than ``MIN_GRAD_ACC`` micro-batches, no speed,
    or no reference run)."""
    judged = [r.status == "ok" and r.has_time and r.layout["grad_acc"] >= MIN_GRAD_ACC for r in rows]
    per_mb = np.array([seconds_per_microbatch(r) if j else np.nan for r, j in zip(rows, judged)])
    reference: dict[tuple, list[float]] = {}
    for r, j, t in zip(rows, judged, per_mb):
        if j and nodes_of(r) <= REFERENCE_MAX_NODES:
            reference.setdefault(family_key(r), []).append(t)
    medians = {k: float(np.median(v)) for k, v in reference.items()}
    return np.array([t - medians.get(family_key(r), np.nan) for r, t in zip(rows, per_mb)])


def scale_stalls(rows: Sequence[Row], stall_s: float = STALL_S, excess: np.ndarray | None = None) -> np.ndarray:
    """Per row: True where the run's seconds per micro-batch exceed its family's reference by more
    than ``stall_s`` (``stall_excess_s``, or ``excess`` where the caller has it); False where not,
    or not judged."""
    if stall_s <= 0.0:
        raise ValueError(f"stall_s > 0 must hold, got stall_s={stall_s}")
    excess = stall_excess_s(rows) if excess is None else excess
    return np.where(np.isfinite(excess), excess > stall_s, False)


def stalled_share_by_nodes(rows: Sequence[Row], excess: np.ndarray | None = None) -> list[tuple[int, int, float]]:
    """(nodes, judged runs, % of them stalled) per node count of ``rows`` (NaN where none is
    judged); ``excess``: the rows' ``stall_excess_s`` where the caller has it."""
    excess = stall_excess_s(rows) if excess is None else excess
    judged, stalled = np.isfinite(excess), scale_stalls(rows, excess=excess)
    nodes = np.array([nodes_of(r) for r in rows])
    return [(n, int(judged[nodes == n].sum()),
             100.0 * float(stalled[(nodes == n) & judged].mean()) if judged[nodes == n].any() else float("nan"))
            for n in sorted(set(nodes.tolist()))]
