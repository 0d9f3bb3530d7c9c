"""report.html and the cost-to-train columns, on frames from evaluating real layouts."""

from __future__ import annotations

import base64
import re
from functools import cache
from html.parser import HTMLParser

import numpy as np
import pytest

from autoplan.api import build_context, build_training
from autoplan.cost.evaluate import evaluate
from autoplan.errors import AutoplanError
from autoplan.layout import LayoutBatch, resolve_layout
from autoplan.layout_records import layout_from_record
from autoplan.report.html import PLOT_FILES, add_cost_columns, find_chosen_index, write_report
from autoplan.rules import REASON_MESSAGES
from autoplan.search.recipe import RECIPE_REASON_MESSAGES
from autoplan.units import GiB

LAYOUTS = [dict(tp=1), dict(tp=2, recompute="selective"), dict(tp=2, pp=2), dict(tp=4, pp=2, vpp=2),
           dict(tp=2, pp=4, recompute="full"), dict(tp=8, zero=0), dict(tp=1, zero=0, mbs=4),
           dict(tp=1, pp=1, vpp=2)]


@cache
def frames():
    """(capacity GiB, all 8 layouts, the feasible ones fastest first); 8b on 64 H100s."""
    ctx = build_context("llama3-8b", build_training(64, 8192, 512))
    batch = LayoutBatch.from_layouts(resolve_layout(v, ctx.training)
                                     for v in LAYOUTS)
    frame = evaluate(ctx, batch).to_frame()
    top = frame[frame["fits"]].sort_values("tokens_per_s_per_gpu", ascending=False)
    return ctx.cluster.gpu.usable_memory_bytes / GiB, frame, top


class _Collect(HTMLParser):
    """Image sources, link targets, table ids and the text of table cells."""

    def __init__(self):
        super().__init__()
        self.images, self.links, self.tables, self.cells = [], [], [], []
        self._in_cell = False

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "img":
            self.images.append(attrs)
        elif tag == "a":
            self.links.append(attrs.get("href"))
        elif tag == "table":
            self.tables.append(attrs.get("id"))
        self._in_cell = tag in ("td", "th")

    def handle_data(self, data):
        if self._in_cell:
            self.cells.append(data.strip())


def _write(tmp_path, **kwargs):
    capacity, frame, top = frames()
    top = add_cost_columns(top, gpu_hour_price_usd=2.5, train_tokens=15e12, num_gpus=64)
    chosen = layout_from_record(top.iloc[0])
    summary = {"model": "llama3-8b", "GPUs": "64 × h100-sxm", "sequence length": 8192}
    path = write_report(tmp_path, frame, top, summary, capacity, chosen, **kwargs)
    parsed = _Collect()
    parsed.feed(path.read_text(encoding="utf-8"))
    return path, parsed, top


def test_frames_mix_feasible_and_rejected():
    _, frame, top = frames()
    assert 2 <= len(top) < len(frame)
    assert set(frame["infeasible_reason"]) >= {"", "out_of_memory", "vpp_needs_pp"}


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """(report path, parsed page, ranked frame) of one embedded report, shared read-only."""
    return _write(tmp_path_factory.mktemp("report"))


def test_report_embeds_every_plot(written):
    path, parsed, _ = written
    tmp_path = path.parent
    assert path.name == "report.html"
    assert len(parsed.images) == len(PLOT_FILES)
    for image, name in zip(parsed.images, PLOT_FILES.values()):
        assert image["data-file"] == name
        assert image["src"].startswith("data:image/png;base64,")
        embedded = base64.b64decode(image["src"].split(",", 1)[1])
        assert embedded == (tmp_path / name).read_bytes()
        assert name in parsed.links


def test_report_references_plots_by_file_name(tmp_path):
    _, parsed, _ = _write(tmp_path, embed_images=False)
    sources = [image["src"] for image in parsed.images]
    assert sources == list(PLOT_FILES.values())
    for name in sources:
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_report_has_the_ranked_table(written):
    _, parsed, top = written
    assert {"summary", "ranked-plans", "rejections"} <= set(parsed.tables)
    for _, row in top.iterrows():
        assert layout_from_record(row).describe() in parsed.cells
    for header in ("rank", "layout", "tokens/s/GPU", "peak memory (GiB)", "days to train", "cost (USD)"):
        assert header in parsed.cells
    best = f"{top['tokens_per_s_per_gpu'].iloc[0]:,.0f}"
    assert best in parsed.cells
    # reasons in words (the broken invariant), not codes (issue 18 frictions)
    assert RECIPE_REASON_MESSAGES["out_of_memory"] in parsed.cells
    assert REASON_MESSAGES["vpp_needs_pp"] in parsed.cells
    assert "out_of_memory" not in parsed.cells and "vpp_needs_pp" not in parsed.cells


def test_report_links_the_exported_configs(tmp_path):
    _, parsed, _ = _write(tmp_path)
    assert not any(str(h).startswith("configs/") for h in parsed.links)
    (tmp_path / "configs").mkdir()
    for name in ("megatron_pretrain_gpt.sh", "torchtitan_job.toml"):
        (tmp_path / "configs" / name).write_text("x\n", encoding="utf-8")
    _, parsed, _ = _write(tmp_path)
    assert {"configs/megatron_pretrain_gpt.sh", "configs/torchtitan_job.toml"} <= set(parsed.links)


def test_report_has_no_external_resources(written):
    path, _, _ = written
    text = path.read_text(encoding="utf-8")
    assert not re.search(r"(src|href)=\"(https?:)?//", text)


def test_find_chosen_index():
    _, frame, top = frames()
    assert find_chosen_index(frame, layout_from_record(top.iloc[1])) == top.index[1]


def test_cost_columns_arithmetic():
    _, _, top = frames()
    out = add_cost_columns(top, gpu_hour_price_usd=2.0, train_tokens=1e12, num_gpus=64)
    rate = top["tokens_per_s_per_gpu"].to_numpy()
    # 1e12 tokens at r tokens/s/GPU on 64 GPUs: 1e12/(64 r) s; GPU-hours = 1e12/(3600 r).
    np.testing.assert_allclose(out["train_days"], 1e12 / (64 * rate) / 86_400)
    np.testing.assert_allclose(out["gpu_hours"], 1e12 / (3600 * rate))
    np.testing.assert_allclose(out["cost_usd"], 2.0 * 1e12 / (3600 * rate))
    assert "gpu_hours" not in top.columns  # the input frame is left alone


def test_cost_columns_scale_with_price_and_tokens():
    _, _, top = frames()
    one = add_cost_columns(top, gpu_hour_price_usd=1.0, train_tokens=1e12, num_gpus=None)
    three = add_cost_columns(top, gpu_hour_price_usd=3.0, train_tokens=2e12, num_gpus=None)
    np.testing.assert_allclose(three["cost_usd"], 6.0 * one["cost_usd"])
    np.testing.assert_allclose(three["train_days"], 2.0 * one["train_days"])


def test_cost_columns_optional_inputs():
    _, frame, _ = frames()
    unchanged = add_cost_columns(frame, gpu_hour_price_usd=2.0, train_tokens=None, num_gpus=64)
    assert list(unchanged.columns) == list(frame.columns)
    no_price = add_cost_columns(frame, gpu_hour_price_usd=None, train_tokens=1e12, num_gpus=64)
    assert "train_days" in no_price and "cost_usd" not in no_price
    with pytest.raises(AutoplanError, match="train_tokens must be > 0"):
        add_cost_columns(frame, gpu_hour_price_usd=None, train_tokens=0, num_gpus=64)
    with pytest.raises(AutoplanError, match="gpu_hour_price_usd must be >= 0"):
        add_cost_columns(frame, gpu_hour_price_usd=-1.0, train_tokens=1e12, num_gpus=64)
