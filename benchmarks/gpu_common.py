"""What benchmarks/gpu_kernels.py and gpu_layer.py share: their command line, the device line
that heads each table, and the table writer. Needs PyTorch with CUDA."""

from __future__ import annotations

import argparse
import csv
import json
import sys
import time
from pathlib import Path


def start(name: str, doc: str, quick_help: str, argv=None,
          options: tuple[tuple[str, dict], ...] = ()) -> tuple[Path, argparse.Namespace, dict] | None:
    """Parse ``--out``, ``--quick`` and the script's own ``options`` (flag, add_argument keywords);
    the output path, the parsed arguments and the device line, or None (after saying why)
    without a CUDA device."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--out", default=f"results/{name}.csv")
    parser.add_argument("--quick", action="store_true", help=quick_help)
    for flag, keywords in options:
        parser.add_argument(flag, **keywords)
    args = parser.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print(f"{name}: no CUDA device; this benchmark measures GPU kernels", file=sys.stderr)
        return None
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    meta = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "cuda": torch.version.cuda,
            "cudnn": torch.backends.cudnn.version(), "date": time.strftime("%Y-%m-%d")}
    return out, args, meta


def write_table(out: Path, meta: dict, fields, rows) -> None:
    """'# ' + the device line as JSON, then the rows as CSV (autoplan/calibration/kernels.py reads it)."""
    with out.open("w", newline="") as fh:
        fh.write(f"# {json.dumps(meta)}\n")
        writer = csv.DictWriter(fh, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)
