"""report.html of a search, written by the library (``autoplan search --report`` only calls it)."""

import html

import pytest

from autoplan.api import build_context, build_training
from autoplan.errors import NoFeasiblePlanError
from autoplan.report.results import recipe_line, write_search_report
from autoplan.search import SearchOptions, search
from autoplan.space import load_space

SPACE = load_space("default").with_overrides(tp=(1, 2), pp=(1, 2), vpp=(1,), cp=(1,), mbs=(1, 2))


def test_the_report_names_the_recipe_and_the_cost_to_train(tmp_path):
    ctx = build_context("8b", build_training(64, 8192, 256))
    result = search(ctx, SPACE, SearchOptions(sampler="exhaustive"))
    path = write_search_report(result, tmp_path, top=3, train_tokens=15e12, gpu_hour_price_usd=2.5)
    page = path.read_text(encoding="utf-8")
    assert path == tmp_path / "report.html" and (tmp_path / "memory_per_stage.png").is_file()
    assert html.escape(recipe_line(result).removeprefix("Recipe: ")) in page
    assert "cost (USD)" in page


def test_no_report_without_a_feasible_plan(tmp_path):
    # 405B on 8 GPUs: nothing fits in 80 GiB
    ctx = build_context("405b", build_training(8, 8192, 8))
    result = search(ctx, SPACE.with_overrides(tp=(8,), pp=(1,)), SearchOptions(sampler="exhaustive"))
    with pytest.raises(NoFeasiblePlanError, match="no feasible plan"):
        write_search_report(result, tmp_path, top=3)
    assert not (tmp_path / "report.html").exists()
