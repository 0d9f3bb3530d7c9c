"""report.html rendered by headless Chromium shows the ranked table and the four figures.

Skipped where no Chromium is installed (Debian: ``apt-get install chromium``). Run with
``pytest -m browser``.
"""

from __future__ import annotations

import re
import shutil
import subprocess

import numpy as np
import pytest

from autoplan.api import build_context, build_training
from autoplan.cost.evaluate import evaluate
from autoplan.layout import LayoutBatch, resolve_layout
from autoplan.layout_records import layout_from_record
from autoplan.report.html import PLOT_FILES, add_cost_columns, write_report
from autoplan.units import GiB

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(CHROMIUM is None, reason="no chromium binary on PATH")]
WINDOW = (1400, 2000)
LAYOUTS = [dict(tp=1), dict(tp=2, recompute="selective"), dict(tp=2, pp=2), dict(tp=4, pp=2, vpp=2),
           dict(tp=2, pp=4, recompute="full"), dict(tp=1, zero=0, mbs=4)]
# Appended to a copy of the report: after load, record how each image decoded.
PROBE = """<script>window.addEventListener("load", () => {
  document.body.setAttribute("data-image-widths",
    Array.from(document.images, (im) => im.complete ? im.naturalWidth : -1).join(","));
});</script>"""


def report_dir(tmp_root):
    """Write the report of 6 layouts of llama3-8b on 64 H100s into ``tmp_root``."""
    ctx = build_context("llama3-8b", build_training(64, 8192, 512))
    batch = LayoutBatch.from_layouts(resolve_layout(v, ctx.training)
                                     for v in LAYOUTS)
    frame = evaluate(ctx, batch).to_frame()
    top = frame[frame["fits"]].sort_values("tokens_per_s_per_gpu", ascending=False)
    top = add_cost_columns(top, gpu_hour_price_usd=2.5, train_tokens=15e12, num_gpus=64)
    summary = {"model": "llama3-8b", "GPUs": "64 × h100-sxm"}
    write_report(tmp_root, frame, top, summary, ctx.cluster.gpu.usable_memory_bytes / GiB,
                 layout_from_record(top.iloc[0]))
    return tmp_root, top


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    out, top = report_dir(tmp_path_factory.mktemp("report"))
    page = (out / "report.html").read_text(encoding="utf-8")
    (out / "probe.html").write_text(page.replace("</body>", PROBE + "</body>"), encoding="utf-8")
    profile = tmp_path_factory.mktemp("chromium-profile")
    common = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
              "--disable-component-update", "--disable-sync", "--no-first-run",
              f"--user-data-dir={profile}", f"--window-size={WINDOW[0]},{WINDOW[1]}",
              "--virtual-time-budget=5000"]
    dom = subprocess.run(common + ["--dump-dom", (out / "probe.html").as_uri()],
                         capture_output=True, text=True, timeout=90, check=True).stdout
    shot = out / "screenshot.png"
    subprocess.run(common + [f"--screenshot={shot}", (out / "report.html").as_uri()],
                   capture_output=True, text=True, timeout=90, check=True)
    return dom, shot, top


def test_dom_has_the_ranked_table(rendered):
    dom, _, top = rendered
    table = re.search(r'<table class="ranked" id="ranked-plans">(.*?)</table>', dom, re.S)
    assert table, "no ranked table in the rendered page"
    assert table.group(1).count("<tr>") == len(top) + 1  # header + one row per plan
    assert layout_from_record(top.iloc[0]).describe() in table.group(1)


def test_every_image_decodes_in_the_browser(rendered):
    dom, _, _ = rendered
    widths = re.search(r'data-image-widths="([^"]*)"', dom)
    assert widths, "the load probe did not run"
    values = [int(w) for w in widths.group(1).split(",")]
    assert len(values) == len(PLOT_FILES) and all(w > 200 for w in values), values


def test_screenshot_is_a_rendered_page(rendered):
    import matplotlib.image

    _, shot, _ = rendered
    pixels = matplotlib.image.imread(shot)
    assert pixels.shape[:2] == (WINDOW[1], WINDOW[0])
    rgb = pixels[..., :3]
    assert float(np.var(rgb)) > 0.005
    # the figures bring colour: a fair share of the page is clearly not grey
    saturated = (rgb.max(axis=2) - rgb.min(axis=2)) > 0.3
    assert saturated.mean() > 0.01


def test_dom_shows_rejection_reasons_in_words(rendered):
    from autoplan.search.recipe import RECIPE_REASON_MESSAGES

    dom, _, _ = rendered
    table = re.search(r'<table class="rejections" id="rejections">(.*?)</table>', dom, re.S)
    assert table, "no rejections table in the rendered page"
    assert RECIPE_REASON_MESSAGES["out_of_memory"] in table.group(1)
    assert ">out_of_memory<" not in table.group(1)
