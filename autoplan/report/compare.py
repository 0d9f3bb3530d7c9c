"""Evaluate a table of layouts (``autoplan compare``), keeping the input columns and order."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from autoplan.api import build_context, build_training
from autoplan.errors import AutoplanError
from autoplan.layout import (
    RECORD_FIELDS,
    SETUP_FIELDS,
    Layout,
    LayoutBatch,
)
from autoplan.layout_records import check_record_columns, layout_from_record, record_setup
from autoplan.specs.training import DEFAULT_FLOPS_CONVENTION, TrainingSpec

OUTPUT_COLUMNS = ("fits", "fits_with_retries", "infeasible_reason", "peak_memory_bytes", "peak_memory_gib",
                  "peak_stage",
                  "step_time_s", "tokens_per_s_per_gpu", "model_tflops_per_gpu", "mfu",
                  "hardware_tflops_per_gpu", "hfu", "bubble_fraction", "time_compute_s",
                  "time_recompute_s", "time_tp_exposed_s", "time_cp_exposed_s", "time_ep_exposed_s",
                  "time_pp_exposed_s", "time_offload_exposed_s", "time_host_exposed_s", "time_dp_exposed_s", "time_bubble_s",
                  "time_optimizer_s", "time_muon_s", "time_optimizer_offload_s", "host_memory_bytes")


def read_layouts_csv(path: str):
    """The CSV's rows as a frame of text cells, so the input columns come back exactly as given
    (:func:`autoplan.files.read_user_csv` refuses duplicate columns and rows with extra fields)."""
    import pandas as pd

    from autoplan.files import read_user_csv

    columns, rows = read_user_csv(path)
    check_record_columns([c for c in columns if c not in OUTPUT_COLUMNS and not c.startswith("predicted_")],
                         str(path), (*RECORD_FIELDS, "model", "tokens_per_s_per_gpu", "peak_memory_gib"))
    return pd.DataFrame(rows, columns=columns, dtype=str)


def compare_layouts(frame, model: str, *, trainer: str = "megatron", profile_path: str | None = None,
                    hardware: str = "h100-sxm", gpus_per_node: int | None = None, nic: str | None = None,
                    flops_convention: str = DEFAULT_FLOPS_CONVENTION, defaults: Mapping[str, Any] | None = None,
                    allow_uneven: bool = True, settings: Mapping[str, Any] | None = None):
    """Prediction columns appended to ``frame``; a bad row gets fits=False and a reason.

    Each row is a record (:func:`autoplan.layout_records.layout_from_record`) with its own training
    setup from its gpus, seq_len and gbs_seqs columns; ``defaults`` fill blank cells (gpus,
    seq_len, gbs_seqs, precision; the sequence length defaults to the model's). Rows that share
    a setup are evaluated as one batch; ``settings`` are the setup's trainer settings
    (:func:`autoplan.api.build_training`).
    """
    from autoplan.specs.hardware import load_gpu
    from autoplan.specs.models import load_model
    from autoplan.units import parse_bandwidth

    spec = load_model(model)
    load_gpu(hardware), nic and parse_bandwidth(nic)  # a bad option fails the file, not each row
    fill = {"seq_len": spec.seq_len, **{k: v for k, v in (defaults or {}).items() if v is not None}}
    cluster = {"hardware": hardware, "gpus_per_node": gpus_per_node, "nic": nic,
               "flops_convention": flops_convention, **(settings or {})}
    trainings: dict[tuple, TrainingSpec] = {}
    groups: dict[tuple, list[tuple[int, Layout]]] = {}
    reasons = [""] * len(frame)
    for i, raw in enumerate(frame.to_dict("records")):
        values = {k: str(raw[k]).strip() for k in RECORD_FIELDS if k in raw and str(raw[k]).strip() != ""}
        for key, value in fill.items():
            values.setdefault(key, value)
        try:
            key, training = _row_training(values, cluster, trainings)
            groups.setdefault(key, []).append((i, layout_from_record(values, training)))
        except AutoplanError as exc:
            reasons[i] = str(exc)
    out = frame.copy()
    # A prediction never overwrites an input column (e.g. a measured tokens_per_s_per_gpu).
    names = {c: (f"predicted_{c}" if c in frame.columns else c) for c in OUTPUT_COLUMNS}
    out.attrs["predictions"] = names  # (the table view reads the predictions by these names)
    for column in OUTPUT_COLUMNS:
        out[names[column]] = np.nan
    out[names["fits"]] = out[names["fits_with_retries"]] = False
    out[names["infeasible_reason"]] = reasons
    for key, rows in groups.items():
        ctx = build_context(spec, trainings[key], trainer=trainer, profile_path=profile_path)
        _fill_predictions(out, names, ctx, [i for i, _ in rows], [layout for _, layout in rows], allow_uneven)
    for flag in ("fits", "fits_with_retries"):
        out[names[flag]] = out[names[flag]].astype(bool)
    gpus = np.full(len(frame), np.nan)  # each row's GPU count (NaN: the row has no setup)
    for key, rows in groups.items():
        gpus[[i for i, _ in rows]] = trainings[key].gpus
    return _add_band(out, names, trainer, hardware, spec.is_moe, gpus)


def _add_band(out, names: dict[str, str], trainer: str, hardware: str, moe: bool, gpus: np.ndarray):
    """The error band's low/high columns after the predictions, each row's band group (its scale
    class's where the group is split by scale, ``uncertainty.error_band``) and whether it was
    measured; where every row has one band, ``out.attrs['tokens_band']`` keeps its tokens/s
    factors for the table view."""
    from autoplan.calibration.uncertainty import BAND_FIGURES, error_band, intervals
    from autoplan.specs.hardware import load_gpu

    gpu = load_gpu(hardware)
    bands = [error_band(trainer, gpu, moe, gpus=None if np.isnan(n) else n) for n in gpus]
    groups = {}
    for i, band in enumerate(bands):
        groups.setdefault(band, []).append(i)
    figures = {c: out[names[c]].to_numpy(dtype=float) for c in BAND_FIGURES}
    columns = {}  # interval column -> output column (figure renamed as its prediction), in intervals' order
    for column in intervals(bands[0] if bands else error_band(trainer, gpu, moe), figures):
        figure, side = column.rsplit("_", 1)
        columns[column] = f"{names[figure]}_{side}"
        out[columns[column]] = np.nan
    for band, rows in groups.items():
        for column, values in intervals(band, {c: v[rows] for c, v in figures.items()}).items():
            out.loc[out.index[rows], columns[column]] = values
    out["error_band"] = [band.group for band in bands]
    out["error_band_measured"] = [band.measured for band in bands]
    if len(groups) == 1:
        band = bands[0]
        out.attrs["tokens_band"] = (band.tokens_low_factor, band.tokens_high_factor)
    return out


def _row_training(values: Mapping[str, Any], cluster: Mapping[str, Any],
                  cache: dict[tuple, TrainingSpec]) -> tuple[tuple, TrainingSpec]:
    """(key, training setup) of a row's gpus, seq_len and gbs_seqs, built once per key."""
    setup = record_setup(values, required=SETUP_FIELDS)
    key = (setup["gpus"], setup["seq_len"], setup["gbs_seqs"])
    if key not in cache:
        cache[key] = build_training(*key, **cluster)
    return key, cache[key]


def _fill_predictions(out, names: dict[str, str], ctx, rows: list[int], layouts: list[Layout],
                      allow_uneven: bool) -> None:
    """Evaluate ``layouts`` (rows ``rows`` of ``out``) as one batch and write their columns."""
    from autoplan.cost.evaluate import evaluate
    from autoplan.rules import explain_reason

    table = evaluate(ctx, LayoutBatch.from_layouts(layouts), allow_uneven=allow_uneven)
    frame_out = table.to_frame()
    rows_index = out.index[rows]
    for column in OUTPUT_COLUMNS:
        if column != "infeasible_reason":
            out.loc[rows_index, names[column]] = frame_out[column].to_numpy()
    codes = table["reason_code"].astype(int)
    out.loc[rows_index, names["infeasible_reason"]] = [
        explain_reason(ctx, table.batch, j, code) if code else frame_out["infeasible_reason"].iloc[j]
        for j, code in enumerate(codes)]
