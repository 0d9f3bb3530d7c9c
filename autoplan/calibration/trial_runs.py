"""Plans that ran a few steps: their logs matched to their plans, the refit they identify, and
the plans re-ranked by what was measured.

A *trial run* is one plan of a ``plans.json`` run for a few steps (``autoplan trial`` writes
them, :mod:`autoplan.calibration.trial`), with its training log. Runs are found from the
trial's ``manifest.json`` (each run's plan record, log path and log format) or, given the
plans, from log paths that name the plan's rank (``rank-2/train.log``, ``rank2.log``).

:func:`refit` fits the parameters the runs identify with ``autoplan calibrate``'s own guarded
fit (:func:`autoplan.calibration.measured.calibrate_measured`: identifiability screen, shrinkage
toward the starting values, k-fold cross-validation and the sign-test guard where the rows
allow it). :func:`rerank` orders every plan by its measured tokens/s per GPU where it ran and
by the refit profile's prediction elsewhere. Step time = gbs_seqs · seq_len / (tokens/s per
GPU · gpus) (the definition of tokens/s per GPU, ``autoplan.cost.evaluate``). Bands: a measured
plan's is its measurement's spread (the slowest and fastest step after warm-up); an unmeasured
plan's is the refit profile's error on the runs (the range of measured / refit-predicted over
the runs, 1 included) once at least ``MIN_RUNS_FOR_BAND`` runs measured it, else the shipped
band of its group.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from autoplan.calibration.fit import predict, prepare
from autoplan.calibration.log_import import LogImportError, LogSummary, log_format, parse_log
from autoplan.calibration.measured import Calibration, MeasuredContext, calibrate_measured, default_params
from autoplan.calibration.rows import Row
from autoplan.errors import AutoplanError, LayoutError
from autoplan.layout import RECORD_FIELDS
from autoplan.specs.model import ModelSpec

MANIFEST = "manifest.json"
MANIFEST_KIND = "autoplan trial"
MIN_RUNS_FOR_BAND = 3
_RANK_IN_PATH = re.compile(r"^rank[-_]?(\d+)$", re.IGNORECASE)  # a folder name or a log's stem


@dataclass(frozen=True)
class TrialRun:
    """One plan that ran: its rank in the plans file, its record, its log and log format."""

    rank: int
    plan: Mapping[str, Any]
    log_path: str
    log_format: str


@dataclass
class MeasuredRun:
    run: TrialRun
    summary: LogSummary
    row: Row


def read_manifest(path: str | Path) -> dict[str, Any]:
    """A trial's manifest.json (``path`` is the file or its folder)."""
    from autoplan.files import read_user_text
    from autoplan.specs.yaml_io import parse_json

    path = Path(path)
    if path.is_dir():
        path = path / MANIFEST
    data = parse_json(read_user_text(path), str(path))
    if not isinstance(data, dict) or data.get("kind") != MANIFEST_KIND or not isinstance(data.get("runs"), list):
        raise AutoplanError(f"{path}: not a trial manifest (expected an object with kind '{MANIFEST_KIND}' and "
                            "a 'runs' list, as `autoplan trial` writes)")
    data["_folder"] = str(path.parent)
    return data


def runs_from_manifest(manifest: Mapping[str, Any]) -> list[TrialRun]:
    """The runs of a manifest whose log exists (a run not yet launched has none: left out)."""
    folder = Path(manifest["_folder"])
    runs = []
    for entry in manifest["runs"]:
        log = folder / str(entry["log"])
        if log.is_file():
            runs.append(TrialRun(int(entry["rank"]), entry["plan"], str(log), str(manifest["log_format"])))
    if not runs:
        raise LogImportError(f"{folder}: none of the {len(manifest['runs'])} run(s) of the trial has a log yet "
                             f"(expected {', '.join(str(e['log']) for e in manifest['runs'][:3])} ...): run them first")
    return runs


def runs_from_logs(logs: Sequence[str | Path], plans: Sequence[Mapping[str, Any]], fmt: str) -> list[TrialRun]:
    """Each log matched to the plan whose rank its path names (``rank-2/train.log``)."""
    from autoplan.export import select_plan

    runs, seen = [], {}
    for log in logs:
        match = _RANK_IN_PATH.match(Path(log).stem) or _RANK_IN_PATH.match(Path(log).parent.name)
        if not match:
            raise LogImportError(f"{log}: the path names no plan rank (expected a folder or file named 'rank-<N>', "
                                 "as `autoplan trial` names its folders), or give the trial's manifest.json")
        rank = int(match.group(1))
        if rank in seen:
            raise LogImportError(f"{log} and {seen[rank]} both name rank {rank}: one log per plan")
        seen[rank] = log
        runs.append(TrialRun(rank, select_plan(list(plans), rank), str(log), log_format(fmt)))
    return runs


def logs_in(folder: str | Path) -> list[Path]:
    """The training logs of a trial folder without a manifest: rank-*/train.log and rank-*.log."""
    folder = Path(folder)
    found = sorted(folder.glob("rank-*/train.log")) + sorted(folder.glob("rank*.log"))
    if not found:
        raise LogImportError(f"{folder}: no {MANIFEST} and no rank-<N>/train.log or rank-<N>.log in it")
    return found


def plan_row(plan: Mapping[str, Any], context: MeasuredContext, model: ModelSpec, row_id: str,
             tokens: float = math.nan, memory_bytes: float = math.nan) -> Row:
    """The calibration row of a plan record (its layout and setup), with what was measured."""
    values = {k: plan[k] for k in RECORD_FIELDS if k in plan and plan[k] is not None}
    try:
        layout = context.record_layout(values)
    except LayoutError as exc:
        raise LayoutError(f"{row_id}: {exc}") from None
    return Row(source="trial", row_id=row_id, model=model, hardware=context.gpu.name, trainer=context.profile.name,
               layout=layout, tokens_per_s_per_gpu=tokens, peak_memory_bytes=memory_bytes)


def measure(runs: Sequence[TrialRun], context: MeasuredContext, model: ModelSpec,
            skip_steps: int = 2) -> list[MeasuredRun]:
    """Each run's log read against its plan's layout (gpus, seq_len, gbs_seqs)."""
    out = []
    for run in runs:
        probe = plan_row(run.plan, context, model, f"rank {run.rank}")
        summary = parse_log(run.log_path, run.log_format, gpus=probe.layout["gpus"], seq_len=probe.layout["seq_len"],
                            gbs_seqs=probe.layout["gbs_seqs"], skip_steps=skip_steps)
        row = plan_row(run.plan, context, model, f"{Path(run.log_path).name}:{run.rank}",
                       summary.tokens_per_s_per_gpu, summary.peak_memory_bytes)
        out.append(MeasuredRun(run, summary, row))
    return out


def refit(measured: Sequence[MeasuredRun], context: MeasuredContext, params: Sequence[str] | None = None,
          **fit_options) -> Calibration:
    """``autoplan calibrate``'s guarded fit on the runs (default: the parameters the figures they
    measure identify, :func:`autoplan.calibration.measured.default_params`)."""
    rows = [m.row for m in measured]
    return calibrate_measured(rows, context, tuple(params or default_params(rows)), **fit_options)


def log_sources(measured: Sequence[MeasuredRun]) -> list[str]:
    """One provenance line per log: path, SHA-256 prefix, steps used."""
    from autoplan.files import MAX_LOG_BYTES, read_user_bytes

    lines = []
    for m in measured:
        digest = hashlib.sha256(read_user_bytes(m.run.log_path, max_bytes=MAX_LOG_BYTES)).hexdigest()[:16]
        lines.append(f"{m.run.log_path} ({m.run.log_format} log of plan rank {m.run.rank}, sha256 {digest}..., "
                     f"{len(m.summary.used)} steps used)")
    return lines


# --- re-ranking -------------------------------------------------------------------------------

def step_time_s(tokens_per_s_per_gpu: np.ndarray | float, layout: Mapping[str, Any]) -> np.ndarray | float:
    """gbs_seqs · seq_len / (tokens/s per GPU · gpus): the step time a throughput means."""
    return layout["gbs_seqs"] * layout["seq_len"] / (np.asarray(tokens_per_s_per_gpu, dtype=float) * layout["gpus"])


def rerank(result: LogCalibration) -> list[dict[str, Any]]:
    """Every plan with its predicted (starting profile), refit-predicted and measured step time,
    ordered by tokens/s per GPU (measured where it ran, refit prediction elsewhere); the shipped
    band (:class:`~autoplan.calibration.uncertainty.ErrorBand`) where too few runs say more."""
    from autoplan.export import select_plan

    plans, measured, context, model, band = (result.plans["plans"], result.measured, result.context, result.model,
                                             result.band)
    ranks = [int(p.get("rank", i + 1)) for i, p in enumerate(plans)]
    rows = [plan_row(select_plan(list(plans), r), context, model, f"rank {r}") for r in ranks]
    prepared = prepare(rows, context)
    before = predict(prepared, context.parameters)["tokens_per_s_per_gpu"]
    after = predict(prepared, result.parameters)["tokens_per_s_per_gpu"]
    by_rank = {m.run.rank: m for m in measured}
    ratios = [by_rank[r].summary.tokens_per_s_per_gpu / a for r, a in zip(ranks, after) if r in by_rank]
    if len(ratios) >= MIN_RUNS_FOR_BAND:
        low, high, band_from = min(ratios + [1.0]), max(ratios + [1.0]), f"refit error on {len(ratios)} runs"
    else:
        low, high = band.tokens_low_factor, band.tokens_high_factor
        band_from = f"shipped band ({band.group}; < {MIN_RUNS_FOR_BAND} runs)"
    records = []
    for rank, row, b, a in zip(ranks, rows, before, after):
        m = by_rank.get(rank)
        tokens = m.summary.tokens_per_s_per_gpu if m else float(a)
        lo, hi = m.summary.tokens_range if m else (a * low, a * high)
        records.append({"old_rank": rank, "measured": m is not None, "tokens_per_s_per_gpu": tokens,
                        "tokens_per_s_per_gpu_low": lo, "tokens_per_s_per_gpu_high": hi,
                        "predicted_step_time_s": float(step_time_s(b, row.layout)),
                        "refit_step_time_s": float(step_time_s(a, row.layout)),
                        "measured_step_time_s": float(step_time_s(tokens, row.layout)) if m else math.nan,
                        "step_time_s_low": float(step_time_s(hi, row.layout)),
                        "step_time_s_high": float(step_time_s(lo, row.layout)),
                        "band": "measured spread" if m else band_from, "log": m.run.log_path if m else ""})
    records.sort(key=lambda r: (-r["tokens_per_s_per_gpu"], r["old_rank"]))
    for new, record in enumerate(records, start=1):
        record["new_rank"] = new
        record["why"] = _why(record)
    return records


def _why(r: Mapping[str, Any]) -> str:
    """What placed a plan where it is, in words with the figures."""
    moved = r["new_rank"] - r["old_rank"]
    where = "stays" if moved == 0 else f"{'down' if moved > 0 else 'up'} {abs(moved)}"
    if r["measured"]:
        diff = r["measured_step_time_s"] / r["predicted_step_time_s"] - 1.0
        return (f"{where}: measured {r['measured_step_time_s']:.3g} s/step vs predicted "
                f"{r['predicted_step_time_s']:.3g} s ({100 * diff:+.1f}%)")
    diff = r["refit_step_time_s"] / r["predicted_step_time_s"] - 1.0
    if abs(diff) < 5e-4:
        return f"{where}: not run; predicted {r['predicted_step_time_s']:.3g} s/step (profile unchanged)"
    return (f"{where}: not run; refit profile predicts {r['refit_step_time_s']:.3g} s/step "
            f"(was {r['predicted_step_time_s']:.3g} s, {100 * diff:+.1f}%)")


def write_json(path: str | Path, data: Mapping[str, Any]) -> Path:
    from autoplan.report.destination import write_text

    return write_text(Path(path), json.dumps(data, indent=2) + "\n")


def plans_context(data: Mapping[str, Any], trainer: str | None = None,
                  profile_path: str | None = None) -> tuple[MeasuredContext, ModelSpec, Any, list[str]]:
    """(context, model, shipped error band, notes) of a plans.json's recorded inputs, for
    ``trainer`` (default the one searched for) and the profile file the search used (or
    ``profile_path``)."""
    from autoplan.calibration.profile_file import apply_profile_file
    from autoplan.calibration.uncertainty import error_band
    from autoplan.profiles import load_profile
    from autoplan.report.plan_inputs import recorded_inputs
    from autoplan.specs.hardware import load_gpu
    from autoplan.specs.models import load_model

    recorded, notes = recorded_inputs(data)
    for name in ("model", "hardware"):
        if not recorded.get(name):
            raise AutoplanError(f"the plans file records no {name}: rerun `autoplan search` with --out")
    trainer = str(trainer or data.get("trainer") or "megatron")
    model, gpu, profile = load_model(str(recorded["model"])), load_gpu(str(recorded["hardware"])), load_profile(trainer)
    profile_path = profile_path or (recorded.get("profile") if data.get("trainer") == trainer else None)
    if profile_path:
        profile = apply_profile_file(profile, gpu.name, profile_path)
    context = MeasuredContext(gpu, profile, gpus_per_node=recorded.get("gpus_per_node"),
                              nic_bytes_per_s=recorded.get("nic_bytes_per_s"),
                              flops_convention=recorded.get("flops_convention", "playbook"))
    gpus = data["plans"][0].get("gpus") if data.get("plans") else None
    return context, model, error_band(profile.name, gpu, model.is_moe, gpus=gpus), notes


@dataclass
class LogCalibration:
    """What the logs of a trial gave: the plans, the runs measured, the guarded refit."""

    plans_path: str
    plans: dict[str, Any]
    context: MeasuredContext
    model: ModelSpec
    band: Any
    measured: list[MeasuredRun]
    calibration: Calibration | None  # None: the runs were too few to fit (``refit_error`` says why)
    notes: list[str]
    refit_error: str = ""

    @property
    def parameters(self):
        """The refit parameters, else the starting ones."""
        return self.calibration.parameters if self.calibration else self.context.parameters


def calibrate_from_logs(logs: Sequence[str | Path], plans_path: str | Path | None = None, *,
                        fmt: str | None = None, trainer: str | None = None, skip_steps: int = 2,
                        params: Sequence[str] | None = None, require_fit: bool = True,
                        **fit_options) -> LogCalibration:
    """The runs of a trial (its folder or manifest.json as the one ``logs`` entry; or log files
    naming their plan's rank, with ``plans_path``) measured and refitted. With ``require_fit``
    False, runs too few to fit leave the starting profile (``refit_error`` says why) instead of
    raising ``CalibrationError``."""
    from autoplan.calibration.fit import CalibrationError
    from autoplan.export import read_plans

    manifest = None
    if len(logs) == 1 and (Path(logs[0]).is_dir() or Path(logs[0]).name == MANIFEST):
        if (Path(logs[0]) / MANIFEST).is_file() or Path(logs[0]).is_file():
            manifest = read_manifest(logs[0])
        else:
            logs = logs_in(logs[0])
    if plans_path is None and manifest is None:
        raise AutoplanError("training logs need their plans: give --plans PLANS.json, or the trial's folder "
                            "(or its manifest.json) that `autoplan trial` wrote")
    plans_path = str(plans_path or manifest["plans"])
    data = read_plans(plans_path)
    trainer = trainer or (manifest or {}).get("trainer") or data.get("trainer")
    context, model, band, notes = plans_context(data, trainer)
    if manifest is not None:
        runs = runs_from_manifest(manifest if fmt is None else {**manifest, "log_format": log_format(fmt)})
        skip_steps = int(manifest.get("skip_steps", skip_steps))
    else:
        runs = runs_from_logs(logs, data["plans"], fmt or context.profile.name)
    measured = measure(runs, context, model, skip_steps)
    try:
        cal, error = refit(measured, context, params, **fit_options), ""
    except CalibrationError as exc:
        if require_fit:
            raise CalibrationError(f"{len(measured)} trial run(s): {exc}") from None
        cal, error = None, str(exc)
    return LogCalibration(plans_path, data, context, model, band, measured, cal, notes, error)


def log_profile_mapping(result: LogCalibration, loss: str) -> dict[str, Any]:
    """The calibrated profile YAML of a log calibration (``profile_mapping``'s, its sources the logs)."""
    from autoplan.calibration.measured import Measured, profile_mapping

    if result.calibration is None:
        raise AutoplanError(f"no profile to write: {result.refit_error}")
    rows = [m.row for m in result.measured]
    mapping = profile_mapping(result.calibration, Measured(result.plans_path, rows, [], len(rows)), loss=loss)
    r = result.calibration.report
    mapping["fitted_on"] = (f"autoplan calibrate --from-log: {len(rows)} trial runs of {Path(result.plans_path).name} "
                            f"({r.num_time_rows} with tokens/s, {r.num_memory_rows} with memory), seed {r.seed}, "
                            f"{loss} loss")
    mapping["sources"] = mapping["sources"] + log_sources(result.measured)
    return mapping
