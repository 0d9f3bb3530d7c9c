"""A search's result folder: plans.csv (every evaluated layout, ranked), plans.json (the top
plans as flat records, with a ``columns`` dictionary), columns.md (what each column means, its
unit and formula) and manifest.json (inputs, versions, seed, command line).

plans.csv holds no timestamp and writes floats with a fixed format, so identical inputs and
seed give a byte-identical file; the manifest carries the run's time and duration.
"""

from __future__ import annotations

import datetime
import json
import math
import platform
import re
from pathlib import Path
from typing import Any

from autoplan.report.columns import columns_markdown, plain_dictionary
from autoplan.search import SearchResult

CSV_FLOAT_FORMAT = "%.9g"
# plans.csv keeps every evaluated layout up to this many rows (pandas writes ~10^4 rows/s with
# 50 columns on this machine); beyond it, the best-ranked rows (feasible ones first) and the
# manifest says how many were left out. The reason counts always cover every layout.
MAX_CSV_ROWS = 100_000


def default_out_dir(model: str, gpus: int, root: str | Path = "results") -> Path:
    """``results/<UTC timestamp>-<model>-<gpus>/``, made unique with a suffix if it exists."""
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%d-%H%M%S")
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", Path(model).stem if "/" in model else model)
    base = Path(root) / f"{stamp}-{safe}-{gpus}"
    path, n = base, 1
    while path.exists():
        n += 1
        path = base.with_name(f"{base.name}-{n}")
    return path


def summary(result: SearchResult, top: int) -> dict[str, Any]:
    """The JSON document of a search: inputs, recipe counts and the top plans."""
    t, ctx = result.training, result.ctx
    plans = result.top_records(top)
    return {"model": ctx.model.name, "hardware": ctx.cluster.gpu.name, "trainer": ctx.profile.name,
            "gpus": t.gpus, "seq_len": t.seq_len, "gbs_seqs": t.gbs_seqs,
            "gbs_tokens": t.gbs_seqs * t.seq_len, "gbs_tolerance": t.gbs_tolerance,
            "space": result.space.name, "sampler": result.sampler, "seed": result.options.seed,
            "allow_uneven_pp": result.options.allow_uneven_pp,
            "recipe": result.counts.to_dict(), "plans": plans,
            "columns": plain_dictionary(plans[0] if plans else [])}


def versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": platform.python_version()}
    for package in ("autoplan", "numpy", "optuna", "pandas"):
        try:
            out[package] = version(package)
        except PackageNotFoundError:  # pragma: no cover
            out[package] = "unknown"
    return out


def manifest(result: SearchResult, inputs: dict[str, Any], command_line: list[str]) -> dict[str, Any]:
    opts = result.options
    rows = len(result.table)
    return {
        "created_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command_line": command_line,
        "inputs": inputs,
        "space": {"name": result.space.name, "description": result.space.description,
                  "values": result.space.to_dict()},
        "sampler": {"requested": opts.sampler, "used": result.sampler, "trials": opts.trials,
                    "timeout_s": opts.timeout_s, "seed": opts.seed, "workers": opts.workers},
        "storage": {"url": opts.storage, "study_name": _study_name(result)},
        "recipe": result.counts.to_dict(),
        "elapsed_s": round(result.elapsed_s, 3),
        "versions": versions(),
        "files": ["plans.csv", "plans.json", "columns.md", "manifest.json"],
        "plans_csv": {"rows": min(rows, MAX_CSV_ROWS), "omitted_rows": max(0, rows - MAX_CSV_ROWS)},
    }


def _study_name(result: SearchResult) -> str | None:
    if result.store is None:
        return result.options.study_name
    return result.store.study.study_name


def write_results(result: SearchResult, out_dir: str | Path, *, top: int, inputs: dict[str, Any],
                  command_line: list[str]) -> Path:
    """Write plans.csv, plans.json, columns.md and manifest.json into ``out_dir`` (created)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    frame = result.to_frame(MAX_CSV_ROWS)
    frame.to_csv(out / "plans.csv", index=False, float_format=CSV_FLOAT_FORMAT, lineterminator="\n")
    (out / "columns.md").write_text(columns_markdown(frame.columns), encoding="utf-8")
    _write_json(out / "plans.json", summary(result, top))
    _write_json(out / "manifest.json", manifest(result, inputs, command_line))
    return out


def _write_json(path: Path, data: Any) -> None:
    path.write_text(json.dumps(clean_json(data), indent=2) + "\n", encoding="utf-8")


def clean_json(data: Any) -> Any:
    """NaN and infinities (not JSON) become null; tuples become lists."""
    if isinstance(data, dict):
        return {str(k): clean_json(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [clean_json(v) for v in data]
    if isinstance(data, float) and not math.isfinite(data):
        return None
    return data
