"""The host link as offloading uses it, read off a copy benchmark measured on a GPU.

``benchmarks/gpu_host_link.py`` times pinned and pageable copies between host and device memory,
both directions at once, and a bf16 GEMM with and without copies running beside it; its output for
an H200 on a PCIe Gen5 x16 link (as nvidia-smi reported it) is shipped as
``validation/h200_host_link.csv``. This module derives, without a GPU, what the cost model takes
from it (:class:`HostLinkFigures`):

* the payload share of the link's datasheet rate one direction reaches with large pinned copies
  (the median over copies of at least ``LARGE_COPY_BYTES``), which is ``HOST_LINK_EFFICIENCY`` in
  ``autoplan/cost/host_link.py`` (optimizer-state offload, activation offload);
* the same share per direction with both directions busy;
* pageable copies' share (the driver stages them through its own pinned buffer);
* how much slower a compute-bound GEMM runs while both directions copy (the copy engines' share of
  the HBM and the memory system), which the cost model does not charge (see ``cost/host_link.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from autoplan.calibration.kernels import Table, read_table
from autoplan.paths import data_dir
from autoplan.specs.hardware import load_gpu

HOST_LINK_FILE = "h200_host_link.csv"
HOST_LINK_GPU = "h200"  # the hardware_db preset of the GPU the shipped table was measured on
LARGE_COPY_BYTES = 64 * 2**20  # copies at least this large: away from the per-copy launch time


@dataclass(frozen=True)
class HostLinkFigures:
    """Shares of the datasheet rate per direction (``one_way``, ``both_ways`` per direction,
    ``pageable_h2d`` / ``pageable_d2h``) and the GEMM's slowdown under copies (0.08 = 8% slower)."""

    one_way: float
    both_ways: float
    pageable_h2d: float
    pageable_d2h: float
    gemm_slowdown: float


def _rate(row: dict) -> float:
    return float(row["bytes"]) / float(row["seconds"])


def host_link_figures(table: Table, link_bytes_per_s: float) -> HostLinkFigures:
    """The figures of one table against the link's datasheet rate per direction."""
    if not link_bytes_per_s > 0:
        raise ValueError(f"link_bytes_per_s must be > 0, got {link_bytes_per_s}")
    large = [_rate(r) for r in table.rows
             if r["kind"] in ("h2d", "d2h") and r["note"] == "pinned" and r["bytes"] >= LARGE_COPY_BYTES]
    if not large:
        raise ValueError(f"no pinned copies of at least {LARGE_COPY_BYTES} bytes in the table")
    both = [_rate(r) / 2.0 for r in table.select(kind="bidirectional")]
    pageable = {r["kind"]: _rate(r) for r in table.select(note="pageable")}
    alone = table.select(kind="gemm_alone")
    slowed = table.select(kind="gemm_with_copies")
    slowdown = (slowed[0]["seconds"] / alone[0]["seconds"] - 1.0) if alone and slowed else float("nan")
    return HostLinkFigures(
        one_way=float(np.median(large)) / link_bytes_per_s,
        both_ways=(float(np.median(both)) / link_bytes_per_s) if both else float("nan"),
        pageable_h2d=pageable.get("h2d", float("nan")) / link_bytes_per_s,
        pageable_d2h=pageable.get("d2h", float("nan")) / link_bytes_per_s,
        gemm_slowdown=slowdown)


def shipped_host_link_figures() -> HostLinkFigures:
    """The figures of the shipped table, against its GPU preset's ``host_link``."""
    table = read_table(data_dir("validation") / HOST_LINK_FILE)
    return host_link_figures(table, load_gpu(HOST_LINK_GPU).host_bytes_per_s)
