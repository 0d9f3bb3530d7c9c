"""Measured runs of a user's cluster: MEASURED.csv in, a calibrated profile out.

MEASURED.csv has the layout columns of ``autoplan compare`` (``gpus, tp, pp, ..., seq_len,
gbs_seqs, mbs, recompute, zero, precision``), an optional ``model`` column (else the model
given) and the measured ``tokens_per_s_per_gpu`` and/or ``peak_memory_gib`` (GiB = 2^30 bytes,
e.g. ``torch.cuda.max_memory_reserved()``), either left empty where not measured. Other columns
are ignored unless they look like a misspelling of one of these.

:func:`calibrate_measured` fits the named parameters (physical efficiencies and corrections,
``autoplan.profiles.PARAMETERS``) on every usable row
(:func:`autoplan.calibration.fit.fit_efficiency`), and k-fold cross-validates the same fit so that
the error it reports is held-out error; :func:`profile_mapping` is the YAML that
``--profile`` reads (:mod:`autoplan.calibration.profile_file`).
"""

from __future__ import annotations

import difflib
import hashlib
import math
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from autoplan.calibration.fit import (
    DEFAULT_PARAMS,
    MEMORY_PARAMS,
    CalibrationError,
    FitReport,
    error_summary,
    predict,
    prepare,
)
from autoplan.calibration.guard import cross_validated_fit
from autoplan.calibration.own_band import own_band
from autoplan.calibration.rows import Row
from autoplan.cost.context import CostContext
from autoplan.errors import AutoplanError, LayoutError, SpecError
from autoplan.files import MAX_CSV_BYTES, exists, read_user_bytes, read_user_csv
from autoplan.layout import (
    RECORD_FIELDS,
    SETUP_FIELDS,
    LayoutBatch,
)
from autoplan.layout_records import check_record_columns, layout_from_record, record_setup
from autoplan.profiles import PARAMETERS, CalibratedParameters, Flag
from autoplan.profiles.efficiency import CORRECTIONS, PHYSICAL
from autoplan.profiles.profile import TrainerProfile
from autoplan.specs.hardware import GPUSpec, make_cluster
from autoplan.specs.model import ModelSpec
from autoplan.specs.models import load_model
from autoplan.specs.training import DEFAULT_FLOPS_CONVENTION, TrainingSpec
from autoplan.units import GiB

# peak_memory_gib: reserved (torch.cuda.max_memory_reserved, nvidia-smi); peak_allocated_memory_gib:
# torch.cuda.max_memory_allocated, compared with the model's allocated peak where no reserved figure is given.
MEASURED_COLUMNS = ("tokens_per_s_per_gpu", "peak_memory_gib", "peak_allocated_memory_gib")
KNOWN_COLUMNS = RECORD_FIELDS + MEASURED_COLUMNS + ("model",)


@dataclass
class Measured:
    """The usable rows of a MEASURED.csv and why the others were left out (line, reason)."""

    path: str
    rows: list[Row]
    skipped: list[tuple[int, str]]
    num_lines: int

    def skipped_summary(self) -> str:
        counts = Counter(reason for _, reason in self.skipped)
        return "; ".join(f"{n} x {reason}" for reason, n in counts.most_common(5))


class MeasuredContext:
    """Row -> CostContext for one GPU and trainer profile, cached per (model, training setup)."""

    def __init__(self, gpu: GPUSpec, profile: TrainerProfile, *, gpus_per_node: int | None = None,
                 nic_bytes_per_s: float | None = None, flops_convention: str = DEFAULT_FLOPS_CONVENTION):
        self.gpu, self.profile = gpu, profile
        self._options = {"gpus_per_node": gpus_per_node, "nic_bytes_per_s": nic_bytes_per_s,
                         "flops_convention": flops_convention}
        self.parameters = profile.parameters_for(gpu.name)

        @lru_cache(maxsize=None)
        def training(setup: tuple[int, int, int]) -> TrainingSpec:
            num_gpus, seq_len, gbs_seqs = setup
            cluster = make_cluster(gpu, num_gpus, gpus_per_node=gpus_per_node, nic_bytes_per_s=nic_bytes_per_s)
            return TrainingSpec(cluster, seq_len, gbs_seqs, flops_convention=flops_convention)

        @lru_cache(maxsize=None)
        def build(model: ModelSpec, setup: tuple[int, int, int]) -> CostContext:
            return CostContext(model=model, training=training(setup), profile=profile, parameters=self.parameters)
        self.training, self._build = training, build

    def __call__(self, row: Row) -> CostContext:
        return self._build(row.model, row.setup)

    def __reduce__(self):
        """Pickled as its arguments, its caches rebuilt (the worker processes of ``--jobs``)."""
        return (_measured_context, (self.gpu, self.profile, self._options))

    def record_layout(self, values: dict[str, Any]) -> dict[str, Any]:
        """The resolved record (layout and setup) of a row's values; LayoutError if it breaks one."""
        setup = record_setup(values, required=SETUP_FIELDS)
        training = self.training((setup["gpus"], setup["seq_len"], setup["gbs_seqs"]))
        return layout_from_record(values, training).to_record(training)


def _measured_context(gpu: GPUSpec, profile: TrainerProfile, options: dict[str, Any]) -> MeasuredContext:
    return MeasuredContext(gpu, profile, **options)


def check_columns(columns: list[str], where: str) -> None:
    """Refuse a near-miss of a known column and a file without any measured column. The
    prediction columns of an ``autoplan compare`` output (``predicted_*``, and its other output
    columns when a ``fits`` column says the file is one) are ignored."""
    from autoplan.report.compare import OUTPUT_COLUMNS

    ignored = set(OUTPUT_COLUMNS) if "fits" in columns else set()
    check_record_columns([c for c in columns if c not in ignored and not c.startswith("predicted_")],
                         where, KNOWN_COLUMNS)
    if not set(MEASURED_COLUMNS) & set(columns):
        raise SpecError(where, f"no measured column: expected {' and/or '.join(MEASURED_COLUMNS)}, "
                               f"got columns {', '.join(columns) or '(none)'}")


def _measurement(raw: dict[str, str], column: str, line: int, where: str) -> float:
    text = (raw.get(column) or "").strip()
    if not text:
        return math.nan
    try:
        value = float(text)
    except ValueError:
        raise SpecError(where, f"line {line}: {column}: expected a number, got {text!r}") from None
    if not (math.isfinite(value) and value > 0):
        raise SpecError(where, f"line {line}: {column}: must be > 0 (leave it empty when not measured), got {text}")
    return value


def read_csv_records(path: str | Path) -> list[dict[str, str]]:
    columns, records = read_user_csv(path)
    check_columns(columns, str(path))
    return records


def read_measured(path: str | Path, context: MeasuredContext, *, model: str | None = None,
                  defaults: dict[str, Any] | None = None) -> Measured:
    """Usable rows of MEASURED.csv: a known model, a layout that resolves and breaks no rule of
    the trainer, and at least one measured figure. ``defaults`` fill missing layout fields."""
    where = str(path)
    records = read_csv_records(path)
    models: dict[str, ModelSpec] = {}
    rows, skipped = [], []
    for i, raw in enumerate(records):
        line = i + 2
        name = (raw.get("model") or "").strip() or model
        if not name:
            raise SpecError(where, f"line {line}: no model: give --model or a 'model' column")
        if name not in models:
            try:
                models[name] = load_model(name)
            except AutoplanError as exc:
                raise SpecError(where, f"line {line}: {exc}") from None
        spec = models[name]
        tokens = _measurement(raw, "tokens_per_s_per_gpu", line, where)
        memory = _measurement(raw, "peak_memory_gib", line, where) * GiB
        kind = "reserved"
        if math.isnan(memory) and "peak_allocated_memory_gib" in raw:
            memory, kind = _measurement(raw, "peak_allocated_memory_gib", line, where) * GiB, "allocated"
        if math.isnan(tokens) and math.isnan(memory):
            skipped.append((line, "no measured figure"))
            continue
        values = {k: raw[k].strip() for k in RECORD_FIELDS if (raw.get(k) or "").strip()}
        for key, value in {"seq_len": spec.seq_len, **(defaults or {})}.items():
            if value is not None:
                values.setdefault(key, value)
        try:
            layout = context.record_layout(values)
        except LayoutError as exc:
            skipped.append((line, f"layout: {exc}"))
            continue
        rows.append(Row(source="measured", row_id=f"{Path(path).name}:{line}", model=spec,
                        hardware=context.gpu.name, trainer=context.profile.name, layout=layout,
                        tokens_per_s_per_gpu=tokens, peak_memory_bytes=memory, memory_kind=kind))
    rows, broken = _drop_illegal(rows, context)
    return Measured(where, rows, sorted(skipped + broken), len(records))


def _drop_illegal(rows: list[Row], context: MeasuredContext) -> tuple[list[Row], list[tuple[int, str]]]:
    """Rows whose layout breaks a rule of the trainer or model cannot be predicted: left out."""
    from autoplan.cost.evaluate import evaluate
    from autoplan.rules import explain_reason

    keep, broken = [], []
    for row in rows:
        ctx = context(row)
        batch = LayoutBatch.from_layouts([layout_from_record(row.layout, ctx.training)])
        code = int(evaluate(ctx, batch)["reason_code"][0])
        if code:
            broken.append((int(row.row_id.rsplit(":", 1)[1]), f"breaks a rule: {explain_reason(ctx, batch, 0, code)}"))
        else:
            keep.append(row)
    return keep, broken


def default_params(rows: list[Row]) -> tuple[str, ...]:
    """DEFAULT_PARAMS of the kinds the rows measure: time parameters when any row has tokens/s,
    the memory reserve and fragmentation when any row has memory."""
    has_time, has_memory = any(r.has_time for r in rows), any(r.has_memory for r in rows)
    return tuple(p for p in DEFAULT_PARAMS if (p in MEMORY_PARAMS and has_memory)
                 or (p not in MEMORY_PARAMS and has_time))


def check_params(params: list[str]) -> tuple[str, ...]:
    for name in params:
        if name not in PARAMETERS:
            close = difflib.get_close_matches(name, list(PARAMETERS), n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            raise CalibrationError(f"unknown parameter '{name}'{hint}; fittable: {', '.join(PARAMETERS)}")
    return tuple(dict.fromkeys(params))


@dataclass
class Calibration:
    """The fit on every row, its k-fold held-out errors and the starting profile's errors."""

    parameters: CalibratedParameters
    base: CalibratedParameters
    report: FitReport
    errors_base: dict[str, float]
    errors_fit_rows: dict[str, float]
    errors_held_out: dict[str, float]
    folds: int
    cv_note: str = ""
    band: dict | None = None  # the calibration's own error band (calibration.own_band), if it has one

    @property
    def flags(self) -> list[Flag]:
        """Fitted values on a bound or outside their plausible range."""
        return self.report.flags


def calibrate_measured(rows: list[Row], context: MeasuredContext, params: tuple[str, ...], *, seed: int = 0,
                       folds: int = 5, jobs: int = 1, **fit_options) -> Calibration:
    """Fit ``params`` on all ``rows``; cross-validate the same fit over ``folds`` folds (fitted in
    ``jobs`` processes) and keep each kind's fitted values only if they beat the starting ones on
    the held-out folds (:func:`autoplan.calibration.guard.cross_validated_fit`)."""
    fitted, report, cv, note = cross_validated_fit(rows, context, params, context.parameters, seed, folds, jobs,
                                                   **fit_options)
    prepared = prepare(rows, context)
    held = cv.errors() if cv is not None else {k: math.nan for k in report.errors_after}
    return Calibration(parameters=fitted, base=context.parameters, report=report,
                       errors_base=error_summary(predict(prepared), prepared),
                       errors_fit_rows=error_summary(predict(prepared, fitted), prepared), errors_held_out=held,
                       folds=min(folds, len(rows)),
                       cv_note=note, band=None if cv is None else own_band(_measured_figures(cv.rows), cv.predicted))


def _measured_figures(rows: list[Row]) -> dict[str, np.ndarray]:
    return {"tokens_per_s_per_gpu": np.array([r.tokens_per_s_per_gpu for r in rows], dtype=float),
            "peak_memory_bytes": np.array([r.peak_memory_bytes for r in rows], dtype=float)}


def _clean(value: float) -> float | None:
    return None if not math.isfinite(value) else round(float(value), 4)


def profile_mapping(cal: Calibration, measured: Measured, *, loss: str) -> dict[str, Any]:
    """The calibrated profile YAML: every parameter in its section (``physical_efficiency``,
    ``corrections``; fitted ones at their fitted value, the rest at the starting profile's), so
    the file reproduces the fit even if the shipped profile changes; ``fit:`` says what was
    fitted, on what, how well, and which fitted values are flagged."""
    sections: dict[str, dict[str, float]] = {PHYSICAL: {}, CORRECTIONS: {}}
    for name, p in PARAMETERS.items():
        low, high = p.bounds
        sections[p.kind][name] = min(high, max(low, cal.parameters.value(name)))
    r = cal.report
    digest = hashlib.sha256(read_user_bytes(measured.path, max_bytes=MAX_CSV_BYTES)).hexdigest()[:16]
    fitted_on = (f"autoplan calibrate {Path(measured.path).name}: {r.num_time_rows} tokens/s rows, "
                 f"{r.num_memory_rows} memory rows, seed {r.seed}, {loss} loss")
    return {
        "trainer": r.trainer, "hardware": r.hardware, "fitted_on": fitted_on, **sections,
        "fit": {"params": list(r.params), "seed": r.seed, "loss": loss, "folds": cal.folds,
                "rows": len(r.row_ids), "tokens_rows": r.num_time_rows, "memory_rows": r.num_memory_rows,
                "before": {p: cal.base.value(p) for p in r.params},
                "flagged": {f.name: f.reason for f in cal.flags}, "warnings": list(r.warnings),
                "errors_pct": {name: {k: _clean(v) for k, v in errs.items()} for name, errs in
                               (("starting_profile", cal.errors_base), ("fit_rows", cal.errors_fit_rows),
                                ("held_out_cv", cal.errors_held_out))}},
        **({"band": cal.band} if cal.band else {}),
        "sources": [f"{measured.path} (sha256 {digest}..., {measured.num_lines} lines, "
                    f"{len(measured.rows)} usable)"],
    }


PROFILE_FORMATS = {".yaml": "yaml", ".yml": "yaml", "": "yaml", ".json": "json"}  # as --profile reads them


def check_profile_path(path: str | Path) -> None:
    """Refuse, before the fit, a profile destination whose extension names a format other than
    YAML or JSON (``-o fit.csv``), or that cannot be written."""
    from autoplan.report.destination import OutputError, check_out_file

    suffix = Path(path).suffix.lower()
    if suffix not in PROFILE_FORMATS:
        raise OutputError(f"-o {path}: a profile is written as YAML (.yaml, .yml) or JSON (.json), not {suffix}")
    check_out_file(path)


def write_profile(path: str | Path, mapping: dict[str, Any]) -> Path:
    """The profile file (YAML, or JSON for a .json name), whole or not at all."""
    import json

    import yaml

    from autoplan.report.destination import write_text

    path = Path(path)
    check_profile_path(path)
    path.parent.mkdir(parents=True, exist_ok=True)  # (results/ for the default name)
    if PROFILE_FORMATS[path.suffix.lower()] == "json":
        return write_text(path, json.dumps(mapping, indent=2) + "\n")
    header = ("# Calibrated parameters written by `autoplan calibrate`; use it with\n"
              f"#   --trainer {mapping['trainer']} --hardware {mapping['hardware']} --profile {path}\n")
    return write_text(path, header + yaml.safe_dump(mapping, sort_keys=False, width=100))


# --- rows from a training log ---------------------------------------------------------------

def measured_record(layout: dict[str, Any], tokens_per_s_per_gpu: float, peak_memory_bytes: float, *,
                    model: str | None, source: str) -> dict[str, Any]:
    """One MEASURED.csv row: model, every layout field, the figures (memory in GiB), source."""
    record: dict[str, Any] = {"model": model or ""}
    record.update({k: (str(layout[k]).lower() if isinstance(layout[k], bool) else layout[k]) for k in RECORD_FIELDS})
    record["tokens_per_s_per_gpu"] = float(f"{tokens_per_s_per_gpu:.6g}")
    record["peak_memory_gib"] = "" if math.isnan(peak_memory_bytes) else round(peak_memory_bytes / GiB, 3)
    record["source"] = source
    return record


def append_records(path: str | Path, records: list[dict[str, Any]]) -> int:
    """Append ``records`` to the CSV at ``path`` (created if missing), keeping its columns and
    adding new ones at the end. Returns the number of data rows now in the file."""
    path = Path(path)
    old: list[dict[str, str]] = []
    columns: list[str] = []
    if exists(path) and (not path.is_file() or path.stat().st_size):  # a FIFO or device is refused
        columns, old = read_user_csv(path, allow_no_rows=True)
    for record in records:
        columns += [k for k in record if k not in columns]
    from autoplan.report.csv_text import records_csv
    from autoplan.report.destination import write_text

    path.parent.mkdir(parents=True, exist_ok=True)
    write_text(path, records_csv(columns, old + records))
    return len(old) + len(records)

