"""Evaluate a table of layouts (``autoplan compare``), keeping the input columns and order."""

from __future__ import annotations

from typing import Any

import numpy as np

from autoplan.errors import AutoplanError, SpecError
from autoplan.layout import FIELDS, LayoutBatch, resolve_layout

OUTPUT_COLUMNS = ("fits", "infeasible_reason", "peak_memory_bytes", "peak_memory_gib", "peak_stage",
                  "step_time_s", "tokens_per_s_per_gpu", "model_tflops_per_gpu", "mfu",
                  "hardware_tflops_per_gpu", "hfu", "bubble_fraction", "time_compute_s",
                  "time_recompute_s", "time_tp_exposed_s", "time_cp_exposed_s", "time_ep_exposed_s",
                  "time_pp_exposed_s", "time_dp_exposed_s", "time_bubble_s", "time_optimizer_s")


def read_layouts_csv(path: str):
    import pandas as pd

    try:
        # Read every cell as text so the input columns come back exactly as given.
        frame = pd.read_csv(path, encoding="utf-8", dtype=str, keep_default_na=False)
    except UnicodeDecodeError:
        raise SpecError(path, "not UTF-8 text") from None
    except pd.errors.EmptyDataError:
        raise SpecError(path, "file is empty") from None
    except pd.errors.ParserError as exc:
        raise SpecError(path, f"not a valid CSV ({exc})") from None
    frame.columns = [str(c).strip() for c in frame.columns]
    if frame.empty:
        raise SpecError(path, "has a header but no rows")
    return frame


def compare_layouts(frame, model: str, *, hardware: str, trainer: str, profile_path: str | None,
                    defaults: dict[str, Any], allow_uneven: bool = False):
    """Prediction columns appended to ``frame``; a bad row gets fits=False and a reason."""
    from autoplan.api import build_context
    from autoplan.cost.evaluate import evaluate

    from autoplan.specs.models import load_model

    defaults = dict(defaults)
    if defaults.get("seq_len") is None:
        defaults["seq_len"] = load_model(model).seq_len
    layouts, reasons, rows = [], [""] * len(frame), []
    for i, raw in enumerate(frame.to_dict("records")):
        values = {k: raw[k].strip() for k in FIELDS if k in raw and str(raw[k]).strip() != ""}
        for key, value in defaults.items():
            values.setdefault(key, value)
        try:
            layouts.append(resolve_layout(values))
            rows.append(i)
        except AutoplanError as exc:
            reasons[i] = str(exc)
    out = frame.copy()
    # A prediction never overwrites an input column (e.g. a measured tokens_per_s_per_gpu).
    names = {c: (f"predicted_{c}" if c in frame.columns else c) for c in OUTPUT_COLUMNS}
    for column in OUTPUT_COLUMNS:
        out[names[column]] = np.nan
    out[names["fits"]] = False
    out[names["infeasible_reason"]] = reasons
    if layouts:
        # The cluster size does not enter the per-layout arithmetic (each row has its gpus);
        # one GPU keeps a row with an odd GPU count from failing the whole file.
        ctx = build_context(model, 1, hardware=hardware, trainer=trainer, profile_path=profile_path)
        table = evaluate(ctx, LayoutBatch.from_layouts(layouts), allow_uneven=allow_uneven)
        frame_out = table.to_frame()
        from autoplan.rules import explain_reason

        rows_index = out.index[rows]
        for column in OUTPUT_COLUMNS:
            if column != "infeasible_reason":
                out.loc[rows_index, names[column]] = frame_out[column].to_numpy()
        codes = table["reason_code"].astype(int)
        out.loc[rows_index, names["infeasible_reason"]] = [
            explain_reason(ctx, table.batch, j, code) if code else frame_out["infeasible_reason"].iloc[j]
            for j, code in enumerate(codes)]
    out[names["fits"]] = out[names["fits"]].astype(bool)
    return out
