"""The run report: cost-to-train columns, the four figures and one self-contained ``report.html``."""

from __future__ import annotations

import base64
import html
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from autoplan.errors import AutoplanError
from autoplan.layout import Layout
from autoplan.report.destination import write_text

EXPORT_FOLDER = "configs"  # where `search --export` writes the chosen plan's configs
SECONDS_PER_DAY = 86_400.0
HOURS_PER_DAY = 24.0
PLOT_FILES = {
    "memory": "memory_per_stage.png",
    "schedule": "pipeline_schedule.png",
    "pareto": "throughput_vs_memory.png",
    "breakdown": "step_breakdown.png",
}
PLOT_CAPTIONS = {
    "memory": "Memory per pipeline stage of the top plans, against the usable GPU memory.",
    "schedule": "Pipeline schedule of the chosen plan: micro-batches over time per stage.",
    "pareto": "Throughput vs peak memory of every evaluated layout; Pareto front; chosen plan.",
    "breakdown": "Step-time breakdown of the top plans.",
}
# (frame column, table header, format) of the ranked table after rank and layout (whose
# ``Layout.describe()`` already names every degree), in order; missing columns are skipped.
TABLE_COLUMNS = (
    ("peak_memory_gib", "peak memory (GiB)", "{:.1f}"), ("step_time_s", "step (s)", "{:.2f}"),
    ("tokens_per_s_per_gpu", "tokens/s/GPU", "{:,.0f}"), ("mfu", "MFU", "{:.1%}"),
    ("bubble_fraction", "bubble", "{:.1%}"),
    ("time_tp_exposed_s", "exposed TP (s)", "{:.2f}"), ("time_cp_exposed_s", "exposed CP (s)", "{:.2f}"),
    ("time_ep_exposed_s", "exposed EP (s)", "{:.2f}"), ("time_pp_exposed_s", "exposed PP (s)", "{:.2f}"),
    ("time_dp_exposed_s", "exposed DP/ZeRO (s)", "{:.2f}"), ("train_days", "days to train", "{:,.1f}"),
    ("gpu_hours", "GPU-hours", "{:,.0f}"), ("cost_usd", "cost (USD)", "${:,.0f}"),
)


def add_cost_columns(frame, *, gpu_hour_price_usd: float | None, train_tokens: float | None,
                     num_gpus=None):
    """A copy of ``frame`` with the time and money to train on ``train_tokens`` tokens.

    With ``T`` = train_tokens, ``r`` = ``tokens_per_s_per_gpu``, ``N`` = num_gpus (default: the
    frame's ``gpus`` column) and ``P`` = gpu_hour_price_usd:

    * ``train_days = T / (r·N) / 86 400``   (wall-clock seconds → days)
    * ``gpu_hours  = train_days · 24 · N``  (= T / (r · 3600), whatever N is)
    * ``cost_usd   = gpu_hours · P``        (only when a price is given)

    Assumes every step runs at the predicted throughput: no restarts, checkpointing,
    evaluation or failures. Rows whose throughput is not a positive number get NaN. Without
    ``train_tokens`` nothing can be computed and the copy is returned unchanged.
    """
    out = frame.copy()
    if train_tokens is None:
        return out
    if not train_tokens > 0:
        raise AutoplanError(f"train_tokens must be > 0, got {train_tokens!r}")
    if gpu_hour_price_usd is not None and not gpu_hour_price_usd >= 0:
        raise AutoplanError(f"gpu_hour_price_usd must be >= 0, got {gpu_hour_price_usd!r}")
    gpus = out["gpus"].to_numpy(dtype=float) if num_gpus is None else np.asarray(num_gpus, dtype=float)
    rate = out["tokens_per_s_per_gpu"].to_numpy(dtype=float)
    rate = np.where(np.isfinite(rate) & (rate > 0), rate, np.nan)
    out["train_days"] = float(train_tokens) / (rate * gpus) / SECONDS_PER_DAY
    out["gpu_hours"] = out["train_days"] * HOURS_PER_DAY * gpus
    if gpu_hour_price_usd is not None:
        out["cost_usd"] = out["gpu_hours"] * float(gpu_hour_price_usd)
    return out


def write_plots(out_dir: str | Path, frame_all, frame_top, capacity_gib: float,
                chosen_layout: Layout, chosen_index=None) -> dict[str, Path]:
    """Draw the four figures into ``out_dir``; returns {key: path} with the keys of PLOT_FILES."""
    from autoplan.report import plots

    out_dir = Path(out_dir)
    return {
        "memory": plots.plot_memory_per_stage(frame_top, capacity_gib, out_dir / PLOT_FILES["memory"]),
        "schedule": plots.plot_pipeline_schedule(chosen_layout, out_dir / PLOT_FILES["schedule"]),
        "pareto": plots.plot_throughput_vs_memory(frame_all, capacity_gib, chosen_index,
                                                  out_dir / PLOT_FILES["pareto"]),
        "breakdown": plots.plot_step_breakdown(frame_top, out_dir / PLOT_FILES["breakdown"]),
    }


def find_chosen_index(frame_all, chosen_layout: Layout):
    """The first index label of ``frame_all`` whose layout equals ``chosen_layout`` (or None)."""
    mask = np.ones(len(frame_all), dtype=bool)
    for name, value in chosen_layout.to_dict().items():
        mask &= (frame_all[name] == value).to_numpy(dtype=bool)
    hits = np.flatnonzero(mask)
    return frame_all.index[hits[0]] if len(hits) else None


def write_report(out_dir: str | Path, frame_all, frame_top, context_summary: Mapping[str, Any],
                 capacity_gib: float, chosen_layout: Layout, *, chosen_index=None,
                 embed_images: bool = True, title: str = "autoplan report") -> Path:
    """Write the four PNGs and ``report.html`` into ``out_dir``; return the HTML's path.

    ``frame_all``: every evaluated layout (``CostTable.to_frame()``); ``frame_top``: the ranked
    plans, best first (with cost columns if ``add_cost_columns`` ran); ``context_summary``:
    what was planned (model, GPUs, hardware, ...) as label → value; ``capacity_gib``: usable
    memory per GPU; ``chosen_index``: the chosen plan's index label in ``frame_all`` (found
    by comparing layout columns when not given). The page needs no network: styles are
    inline and, with ``embed_images``, the figures are embedded as base64 ``data:`` URIs (each
    still links its PNG file name); without it they are referenced by relative file name.
    Trainer configs already exported under ``out_dir/configs/`` are linked.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    if chosen_index is None:
        chosen_index = find_chosen_index(frame_all, chosen_layout)
    paths = write_plots(out_dir, frame_all, frame_top, capacity_gib, chosen_layout, chosen_index)
    body = [f"<h1>{html.escape(title)}</h1>",
            _summary_html(context_summary, chosen_layout),
            "<h2>Ranked plans</h2>", _table_html(frame_top),
            _exports_html(out_dir),
            _rejections_html(frame_all),
            "<h2>Figures</h2>"]
    body += [_figure_html(key, paths[key], embed_images) for key in PLOT_FILES]
    page = _PAGE.format(title=html.escape(title), body="\n".join(body))
    report = out_dir / "report.html"
    write_text(report, page)
    return report


def _summary_html(context_summary: Mapping[str, Any], chosen_layout: Layout) -> str:
    items = [(str(k), str(v)) for k, v in context_summary.items()]
    items.append(("chosen plan", chosen_layout.describe()))
    rows = "".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>" for k, v in items)
    return f'<table class="summary" id="summary">{rows}</table>'


def _format(value: Any, fmt: str) -> str:
    if isinstance(value, (float, np.floating)) and not np.isfinite(value):
        return "–"
    return fmt.format(value)


def _table_html(frame_top) -> str:
    """The ranked plans as an HTML table (id ``ranked-plans``), rank 1 first."""
    from autoplan.layout_records import layout_from_record

    columns = [c for c in TABLE_COLUMNS if c[0] in frame_top.columns]
    head = "<th>rank</th><th>layout</th>" + "".join(f"<th>{html.escape(h)}</th>" for _, h, _ in columns)
    rows = []
    for rank, (_, row) in enumerate(frame_top.iterrows(), start=1):
        cells = [str(rank), html.escape(layout_from_record(row).describe())]
        cells += [html.escape(_format(row[name], fmt)) for name, _, fmt in columns]
        rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    return (f'<div class="scroll"><table class="ranked" id="ranked-plans"><thead><tr>{head}</tr>'
            f"</thead><tbody>{''.join(rows)}</tbody></table></div>")


def _rejections_html(frame_all) -> str:
    """Counts of the layouts that were rejected, by reason in words (the broken invariant,
    :func:`autoplan.search.recipe.reason_message`; its code on hover), most common first."""
    from autoplan.search.recipe import reason_message

    reasons = frame_all.loc[~frame_all["fits"].astype(bool), "infeasible_reason"]
    if reasons.empty:
        return ""
    counts = reasons.value_counts()
    rows = "".join(f'<tr><td title="{html.escape(str(r))}">{html.escape(reason_message(str(r)))}</td>'
                   f"<td>{n:,}</td></tr>" for r, n in counts.items())
    return (f"<h2>Rejected layouts ({len(reasons):,} of {len(frame_all):,})</h2>"
            f'<table class="rejections" id="rejections"><thead><tr><th>reason</th><th>layouts</th>'
            f"</tr></thead><tbody>{rows}</tbody></table>")


def _exports_html(out_dir: Path) -> str:
    """Links to the trainer configs exported next to the report (``configs/``), if any."""
    folder = out_dir / EXPORT_FOLDER
    files = sorted(p.relative_to(out_dir).as_posix() for p in folder.rglob("*") if p.is_file()) \
        if folder.is_dir() else []
    if not files:
        return ""
    items = "".join(f'<li><a href="{html.escape(f)}">{html.escape(f)}</a></li>' for f in files)
    return f'<h2>Exported configs of the chosen plan</h2><ul id="exports">{items}</ul>'


def _figure_html(key: str, path: Path, embed: bool) -> str:
    name = html.escape(path.name)
    if embed:
        src = "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode("ascii")
    else:
        src = name
    caption = html.escape(PLOT_CAPTIONS[key])
    return (f'<figure id="fig-{key}"><img src="{src}" alt="{caption}" data-file="{name}">'
            f'<figcaption>{caption} <a href="{name}">{name}</a></figcaption></figure>')


_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{title}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em; color: #222; }}
.scroll {{ overflow-x: auto; }}
table {{ border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 0.9em; }}
th, td {{ border: 1px solid #ccc; padding: 0.3em 0.6em; text-align: right; }}
td:nth-child(2), th:nth-child(2), .summary td, .summary th, .rejections td:first-child,
.rejections th:first-child {{ text-align: left; }}
.ranked td:nth-child(2) {{ white-space: nowrap; font-family: ui-monospace, monospace; }}
thead th {{ background: #eef2f7; }}
.ranked tbody tr:first-child {{ background: #fff6d5; font-weight: 600; }}
figure {{ margin: 1.5em 0; }}
figure img {{ max-width: 100%; box-sizing: border-box; border: 1px solid #ddd; }}
figcaption {{ color: #555; font-size: 0.9em; }}
</style>
</head>
<body>
{body}
</body>
</html>
"""
