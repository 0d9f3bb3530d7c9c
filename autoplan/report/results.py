"""A search's result folder: plans.csv (every evaluated layout, ranked), plans.json (the top
plans as flat records, with a ``columns`` dictionary), columns.md (what each column means, its
unit and formula) and manifest.json (inputs, versions, seed, command line); on request the
figures and report.html (:func:`write_search_report`).

plans.csv holds no timestamp and writes floats with a fixed format, so identical inputs and
seed give a byte-identical file; the manifest carries the run's time and duration.
"""

from __future__ import annotations

import datetime
import json
import math
import platform
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from autoplan.calibration.uncertainty import BAND_FIGURES, band_record, intervals
from autoplan.cost.evaluate import evaluate
from autoplan.report.columns import columns_markdown, plain_dictionary
from autoplan.report.csv_text import csv_text
from autoplan.report.destination import write_text
from autoplan.report.near_ties import near_ties, result_band
from autoplan.report.per_choice import per_choice_summary
from autoplan.report.plan_inputs import inputs_record
from autoplan.search import SearchResult
from autoplan.search.topk import DEFAULT_KEEP_ROWS
from autoplan.specs.training import SETTING_FIELDS
from autoplan.units import GiB

CSV_FLOAT_FORMAT = "%.9g"
# plans.csv keeps every evaluated layout up to this many rows: the rows the search keeps
# (:data:`autoplan.search.topk.DEFAULT_KEEP_ROWS`); beyond it, the best-ranked rows (feasible
# ones first) and the manifest says how many were left out. The reason counts cover every layout.
MAX_CSV_ROWS = DEFAULT_KEEP_ROWS


def default_out_dir(model: str, gpus: int, root: str | Path = "results") -> Path:
    """``results/<UTC timestamp>-<model>-<gpus>/``, made unique with a suffix if it exists."""
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%d-%H%M%S")
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", Path(model).stem if "/" in model else model)
    base = Path(root) / f"{stamp}-{safe}-{gpus}"
    path, n = base, 1
    while path.exists():
        n += 1
        path = base.with_name(f"{base.name}-{n}")
    return path


def summary(result: SearchResult, top: int, references: Mapping[str, str | None] | None = None) -> dict[str, Any]:
    """The JSON document of a search: inputs, recipe counts and the top plans. ``references``:
    the model, hardware and profile as the user named them (report.plan_inputs)."""
    t, ctx = result.training, result.ctx
    plans = with_bands(result, result.top_records(top))
    return {"model": ctx.model.name, "hardware": ctx.cluster.gpu.name, "trainer": ctx.profile.name,
            "trainer_version": ctx.profile.capabilities.version or None,  # whose capabilities ruled
            "inputs": inputs_record(ctx, references),
            "gpus": t.gpus, "seq_len": t.seq_len, "gbs_seqs": t.gbs_seqs,
            "gbs_tokens": t.gbs_seqs * t.seq_len, "gbs_tolerance": t.gbs_tolerance,
            "space": result.space.name, "sampler": result.sampler, "seed": result.options.seed,
            "allow_uneven_pp": result.options.allow_uneven_pp,
            "setup": {name: getattr(t, name) for name in SETTING_FIELDS},
            "recipe": result.counts.to_dict(), "knob_caps": cap_notes(result), **uncertainty_summary(result),
            "best_per_choice": per_choice_summary(result), "plans": plans,
            "columns": plain_dictionary(plans[0] if plans else [])}


def band_columns(result: SearchResult, figures: dict[str, Any]) -> dict[str, Any]:
    """``{figure_low, figure_high}`` of the search's error band for the figures given."""
    return intervals(result_band(result), {c: figures[c] for c in BAND_FIGURES if c in figures})


def add_band_columns(result: SearchResult, frame):
    """``frame`` (plans.csv rows) with the error band's low/high columns appended."""
    for name, values in band_columns(result, {c: frame[c].to_numpy() for c in BAND_FIGURES if c in frame}).items():
        frame[name] = values
    return frame


def with_bands(result: SearchResult, plans: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Plan records with the error band's low/high figures."""
    for plan in plans:
        figures = {c: plan[c] for c in BAND_FIGURES if isinstance(plan.get(c), float)}
        plan.update({k: float(v) for k, v in band_columns(result, figures).items()})
    return plans


def uncertainty_summary(result: SearchResult) -> dict[str, Any]:
    """The JSON entries on uncertainty: the band and the plans near-tied with the best."""
    ties = near_ties(result)
    return {"error_band": band_record(ties.band),
            "near_ties": {"num_plans": ties.num_plans, "differing_knobs": list(ties.differing_knobs),
                          "note": ties.line()}}


def versions() -> dict[str, str]:
    """Python's version and those of autoplan and the packages its results depend on."""
    import numpy

    from autoplan import __version__

    out = {"python": platform.python_version(), "autoplan": __version__, "numpy": numpy.__version__}
    out.update({package: installed_version(package) for package in ("optuna", "pandas")})
    return out


def installed_version(package: str) -> str:
    """The installed version of ``package`` without importing it: from the name of its
    ``<name>-<version>.dist-info`` folder on ``sys.path`` (PEP 427), else from
    ``importlib.metadata`` (whose import alone costs ~50 ms)."""
    import os
    import sys

    prefix = package.lower().replace("-", "_") + "-"
    for entry in sys.path:
        try:
            names = [e.name for e in os.scandir(entry or ".") if e.name.endswith(".dist-info")]
        except OSError:
            continue
        for name in names:
            if name.lower().startswith(prefix):
                return name[len(prefix):-len(".dist-info")]
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:  # pragma: no cover
        return "unknown"


def manifest(result: SearchResult, inputs: dict[str, Any], command_line: list[str]) -> dict[str, Any]:
    from autoplan.search.study import study_meta

    opts = result.options
    rows = result.num_ranked
    return {
        "study_key": study_meta(result.ctx, result.space)["key"],  # whose folder this is
        "created_utc": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
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
        "plans_csv": {"rows": min(len(result.table), MAX_CSV_ROWS),
                      "omitted_rows": max(0, rows - min(len(result.table), MAX_CSV_ROWS))},
    }


def _study_name(result: SearchResult) -> str | None:
    if result.store is None:
        return result.options.study_name
    return result.store.study.study_name


def write_results(result: SearchResult, out_dir: str | Path, *, top: int, inputs: dict[str, Any],
                  command_line: list[str]) -> Path:
    """Write plans.csv, plans.json, columns.md and manifest.json into ``out_dir`` (created),
    each whole or not at all (:mod:`autoplan.report.destination`)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    columns = result.columns_of(result.kept_rows(MAX_CSV_ROWS))
    columns.update(band_columns(result, {c: columns[c] for c in BAND_FIGURES if c in columns}))
    write_text(out / "plans.csv", csv_text(columns, CSV_FLOAT_FORMAT))
    write_text(out / "columns.md", columns_markdown(columns))
    _write_json(out / "plans.json", summary(result, top, references_of(inputs)))
    _write_json(out / "manifest.json", manifest(result, inputs, command_line))
    return out


def references_of(options: Mapping[str, Any]) -> dict[str, str | None]:
    """The model, hardware and profile as a command's options named them."""
    return {"model": options.get("model_name"), "hardware": options.get("hardware"),
            "profile": options.get("profile_path")}


def recipe_line(result: SearchResult) -> str:
    """'Recipe: 3240 candidates -> 1392 legal -> 438 fit in 79.6 GiB -> 435 reach gbs 512 ...'."""
    c = result.counts
    capacity = result.ctx.cluster.gpu.usable_memory_bytes / GiB
    examined = f"{c.candidates} candidates" + (f" (of {c.space_size})" if c.candidates < c.space_size else "")
    on = (f" on {', '.join(str(g) for g in result.gpu_counts)} of {result.training.gpus} GPUs"
          if result.gpu_counts else "")
    return (f"Recipe: {examined}{on} -> {c.legal} legal -> {c.fit} fit in {capacity:.1f} GiB -> "
            f"{c.reach_batch} reach {batch_text(result)} ({result.sampler}, {result.elapsed_s:.2f} s)")


MAX_BATCHES_NAMED = 6


CAP_PROBE_LAYOUTS = 64  # legal layouts of the result given a capped value to find its rule


def cap_notes(result: SearchResult) -> list[str]:
    """Why knobs of the space are capped (exhaustive: :mod:`autoplan.search.caps`), each reason
    read off up to CAP_PROBE_LAYOUTS legal layouts of the result at the knob's largest legal
    value, spread over its ranking."""
    from autoplan.search.caps import cap_notes as notes
    from autoplan.search.caps import probe_reason

    table = result.table
    legal = np.flatnonzero(table["reason_code"] == 0) if len(table) else np.zeros(0, dtype=int)

    def probe(knob: str, top: int, value: int) -> str | None:
        at_top = legal[getattr(table.batch, knob)[legal] == top]
        if len(at_top) > CAP_PROBE_LAYOUTS:  # spread over the ranking, not only its best rows
            at_top = at_top[np.linspace(0, len(at_top) - 1, CAP_PROBE_LAYOUTS).astype(int)]
        layouts = [table.batch.layout(int(i)) for i in at_top]
        return probe_reason(result.ctx, layouts, knob, value, result.training.gpus, result.options.allow_uneven_pp)

    return notes(result.space, result.counts.tallies, result.training.gpus, probe)


def batch_text(result: SearchResult) -> str:
    """The batch asked for and, when the feasible plans use others (within the tolerance),
    which: 'gbs 512 x 8192 tokens' or 'gbs 512 ±5% x 8192 tokens (plans use 504, 513, 528 seqs)'."""
    t = result.training
    used = sorted(result.counts.batches)
    if not t.gbs_tolerance:
        return f"gbs {t.gbs_seqs} x {t.seq_len} tokens"
    text = f"gbs {t.gbs_seqs} ±{100 * t.gbs_tolerance:g}% x {t.seq_len} tokens"
    if not used or used == [t.gbs_seqs]:
        return text
    named = ", ".join(str(b) for b in used[:MAX_BATCHES_NAMED]) + (", ..." if len(used) > MAX_BATCHES_NAMED else "")
    return f"{text} (plans use {named} seqs)"


def write_search_report(result: SearchResult, out_dir: str | Path, *, top: int,
                        train_tokens: float | None = None,
                        gpu_hour_price_usd: float | None = None) -> Path:
    """Write the figures and report.html of a search into ``out_dir``; return the HTML's path.

    The page shows every layout of plans.csv and the ``top`` plans (with the cost to train on
    ``train_tokens`` tokens when given, :func:`autoplan.report.html.add_cost_columns`); the
    chosen plan is the best one. Raises ``NoFeasiblePlanError`` when no plan is feasible.
    """
    from autoplan.report.html import add_cost_columns, write_report

    result.check_feasible()
    frame_all = result.to_frame(min(len(result.table), MAX_CSV_ROWS))
    rows = result.plan_rows(top)
    # The search keeps lean columns; the plots want every memory term of the top plans.
    frame_top = evaluate(result.ctx, result.table.batch.take(rows),
                         allow_uneven=result.options.allow_uneven_pp).to_frame()
    frame_top.insert(0, "rank", result.ranks[rows])
    if train_tokens is not None:
        frame_top = add_cost_columns(frame_top, gpu_hour_price_usd=gpu_hour_price_usd,
                                     train_tokens=train_tokens)
    t, ctx = result.training, result.ctx
    planned = {"model": ctx.model.name, "GPUs": f"{t.gpus} x {ctx.cluster.gpu.name}",
               "trainer": ctx.profile.name, "global batch": batch_text(result).removeprefix("gbs "),
               "recipe": recipe_line(result).removeprefix("Recipe: ")}
    return write_report(out_dir, frame_all, frame_top, planned, ctx.cluster.gpu.usable_memory_bytes / GiB,
                        result.table.batch.layout(int(rows[0])), chosen_index=int(rows[0]))


def record_files(out_dir: str | Path) -> list[str]:
    """List every file now in ``out_dir`` in its manifest.json (what a rerun of the same study
    into the folder removes first, :func:`autoplan.report.destination.clear`); returns them."""
    out = Path(out_dir)
    files = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file() and not p.name.startswith("."))
    data = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    data["files"] = files
    _write_json(out / "manifest.json", data)
    return files


def _write_json(path: Path, data: Any) -> None:
    write_text(path, json.dumps(clean_json(data), indent=2) + "\n")


def clean_json(data: Any) -> Any:
    """NaN and infinities (not JSON) become null; tuples become lists."""
    if isinstance(data, dict):
        return {str(k): clean_json(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [clean_json(v) for v in data]
    if isinstance(data, float) and not math.isfinite(data):
        return None
    return data
