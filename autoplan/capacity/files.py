"""The files of a capacity run: capacity.csv (every point, ranked), plans.json (the chosen
point's layout per batch phase, the format ``autoplan export`` reads), manifest.json (inputs,
prices with their sources, versions, the files written).

capacity.csv writes floats with a fixed format and no timestamp; :func:`read_capacity_csv`
parses it back with the column types.
"""

from __future__ import annotations

import datetime
import hashlib
import json
from pathlib import Path
from typing import Any

import pandas as pd

from autoplan.capacity.run import CapacityResult
from autoplan.report.destination import write_text
from autoplan.report.plan_inputs import inputs_record
from autoplan.report.results import CSV_FLOAT_FORMAT, clean_json, versions

CSV_COLUMNS = (
    "rank", "chosen", "hardware", "gpus", "job_gpus", "train_days", "days_low", "days_high", "gpu_hours",
    "gpu_hours_low", "gpu_hours_high", "usd_per_gpu_hour", "cost_usd", "cost_low_usd", "cost_high_usd",
    "band_group", "tokens_per_s_per_gpu", "mfu",
    "on_front", "on_type_front", "feasible", "constraint_reason", "layout")
BOOL_COLUMNS = ("chosen", "on_front", "on_type_front", "feasible")
TEXT_COLUMNS = ("hardware", "job_gpus", "constraint_reason", "layout", "band_group")
FILES = ("capacity.csv", "plans.json", "manifest.json")


def capacity_frame(result: CapacityResult) -> pd.DataFrame:
    """The ranked points with the columns of capacity.csv (uncertainty columns when known)."""
    points = result.points
    return points[[c for c in CSV_COLUMNS if c in points.columns]]


def capacity_csv(result: CapacityResult) -> str:
    from autoplan.report.csv_text import safe_frame

    return safe_frame(capacity_frame(result)).to_csv(index=False, float_format=CSV_FLOAT_FORMAT, lineterminator="\n")


def read_capacity_csv(path: str | Path) -> pd.DataFrame:
    """capacity.csv back as a DataFrame: booleans as bool, empty reasons as ''."""
    frame = pd.read_csv(path, keep_default_na=True, dtype={c: str for c in TEXT_COLUMNS})
    for column in BOOL_COLUMNS:
        frame[column] = frame[column].astype(str).str.lower().map({"true": True, "false": False})
    for column in TEXT_COLUMNS:
        if column in frame:
            frame[column] = frame[column].fillna("")
    return frame


def chosen_plans(result: CapacityResult, hardware_refs: dict[str, str] | None = None) -> dict[str, Any] | None:
    """The chosen point as a plans.json: one flat record per batch phase (rank = phase number),
    each with gpus (the GPUs the job uses), seq_len, gbs_seqs and every prediction of the layout
    search; None when no point meets the deadline and the budget. ``hardware_refs``: GPU name ->
    how --hardware named it (a YAML path is recorded as that file, inputs_record)."""
    chosen = result.chosen
    if chosen is None:
        return None
    bests = result.phase_bests(chosen["hardware"], int(chosen["gpus"]))
    plans = []
    for best in bests:
        record = best.result.top_records(1)[0]
        record.update(rank=best.phase, phase_tokens=best.phase_tokens, rented_gpus=best.rented_gpus)
        plans.append(record)
    setup = result.setup
    return {"model": setup.model.name, "hardware": chosen["hardware"], "trainer": setup.trainer,
            "inputs": inputs_record(bests[0].result.ctx, {"hardware": (hardware_refs or {}).get(chosen["hardware"])}),
            "gpus": int(chosen["gpus"]), "train_days": float(chosen["train_days"]),
            "cost_usd": float(chosen["cost_usd"]), "note": "rank = batch phase; export one with "
            "`autoplan export plans.json --to TRAINER --rank PHASE` (the plan's model and hardware are recorded)",
            "setup": dict(setup.settings), "plans": plans}


def inputs_key(inputs: dict[str, Any]) -> str:
    """A hash of the resolved inputs: a result folder of the same inputs may be overwritten."""
    text = json.dumps(clean_json(inputs), sort_keys=True, default=str)
    return "capacity-" + hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def write_capacity(result: CapacityResult, out_dir: str | Path, *, inputs: dict[str, Any],
                   command_line: list[str]) -> list[str]:
    """Write capacity.csv, plans.json (when a point is chosen) and manifest.json into
    ``out_dir``; returns the names written."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    write_text(out / "capacity.csv", capacity_csv(result))
    written = ["capacity.csv"]
    plans = chosen_plans(result, inputs.get("hardware_refs"))
    if plans is not None:
        _write_json(out / "plans.json", plans)
        written.append("plans.json")
    prices = {name: vars(price) for name, price in result.query.prices.items()}
    manifest = {"study_key": inputs_key(inputs), "command": "capacity",
                "created_utc": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
                "command_line": command_line, "inputs": inputs, "prices": prices,
                "points": len(result.points), "elapsed_s": round(result.elapsed_s, 3),
                "versions": versions(), "files": [*written, "manifest.json"]}
    _write_json(out / "manifest.json", manifest)
    return [*written, "manifest.json"]


def _write_json(path: Path, data: Any) -> None:
    write_text(path, json.dumps(clean_json(data), indent=2, default=str) + "\n")
