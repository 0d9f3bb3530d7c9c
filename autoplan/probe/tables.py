"""The probe's measurement tables: the rows, their columns and their CSV text (no PyTorch).

The kernel rows have the columns of the tables ``benchmarks/gpu_kernels.py`` writes
(``validation/h100_sxm_kernels.csv``, ``h200_kernels.csv``), with the same ``kind`` names
(``gemm_bf16``, ``gemm_fp8_tensorwise``, ``attention_flash``, ``hbm_copy``, ...), so that the fits of
:mod:`autoplan.calibration.kernels` read a probe's table and the shipped ones alike; host-link
rows have the columns of ``validation/h200_host_link.csv`` (:mod:`autoplan.calibration.host_link`).
Collective rows hold one timed collective each: its name, the ranks of its group, the level it
ran on (``scale_up`` inside one node, ``scale_out`` one rank per node) and the buffer bytes in
nccl-tests' convention (the whole gathered or reduced buffer per rank).

Each table is written as ``# {provenance as JSON}`` and then CSV, which
:func:`autoplan.calibration.kernels.read_table` reads back.
"""

from __future__ import annotations

import csv
import io
import json

from autoplan.calibration.kernels import Table, _number

KERNEL_FIELDS = ("kind", "h", "tp", "tokens", "m", "n", "k", "experts", "seq", "heads", "head_dim",
                 "pass", "flops", "bytes", "seconds", "tflops_per_s", "gb_per_s", "note")
HOST_LINK_FIELDS = ("kind", "bytes", "seconds", "gb_per_s", "flops", "tflops_per_s", "note")
COLLECTIVE_FIELDS = ("collective", "level", "ranks", "bytes", "seconds", "algbw_gb_per_s", "busbw_gb_per_s", "note")


def kernel_row(kind: str, *, flops: float = 0.0, seconds: float = 0.0, num_bytes: float = 0.0, **columns) -> dict:
    """One kernel row (``columns``: the shape columns of KERNEL_FIELDS), rates filled in."""
    row = {f: "" for f in KERNEL_FIELDS}
    row.update(kind=kind, flops=float(flops), bytes=float(num_bytes), seconds=float(seconds),
               tflops_per_s=flops / seconds / 1e12 if flops and seconds else "",
               gb_per_s=num_bytes / seconds / 1e9 if num_bytes and seconds else "")
    unknown = set(columns) - set(KERNEL_FIELDS)
    if unknown:
        raise KeyError(f"not kernel table columns: {sorted(unknown)}")
    row.update(columns)
    return row


def host_link_row(kind: str, num_bytes: float, seconds: float, note: str) -> dict:
    """One copy between host and device memory (kind h2d or d2h; note pinned or pageable)."""
    return {"kind": kind, "bytes": float(num_bytes), "seconds": float(seconds),
            "gb_per_s": num_bytes / seconds / 1e9 if seconds else "", "flops": 0.0, "tflops_per_s": "", "note": note}


def collective_row(collective: str, level: str, ranks: int, num_bytes: float, seconds: float, note: str = "") -> dict:
    """One timed collective; the bandwidth columns are left to :mod:`autoplan.probe.fit`."""
    return {"collective": collective, "level": level, "ranks": int(ranks), "bytes": float(num_bytes),
            "seconds": float(seconds), "algbw_gb_per_s": "", "busbw_gb_per_s": "", "note": note}


def as_table(meta: dict, rows: list[dict]) -> Table:
    """``rows`` as :class:`~autoplan.calibration.kernels.Table` reads them from a file: numbers as
    floats, empty cells as ''."""
    return Table(dict(meta), [{k: _number(str(v)) for k, v in r.items()} for r in rows])


def _cell(value) -> str:
    return f"{value:.6g}" if isinstance(value, float) else str(value)


def table_text(meta: dict, fields: tuple[str, ...], rows: list[dict]) -> str:
    """``# {meta}`` and the CSV of ``rows`` (floats to 6 significant digits, as gpu_kernels.py)."""
    out = io.StringIO()
    out.write(f"# {json.dumps(meta, sort_keys=True)}\n")
    writer = csv.DictWriter(out, fieldnames=fields, lineterminator="\n")
    writer.writeheader()
    writer.writerows({k: _cell(r.get(k, "")) for k in fields} for r in rows)
    return out.getvalue()
