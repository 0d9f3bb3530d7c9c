"""Every prediction shown with its error band: search (table, json, csv, plans.csv), estimate
and compare; the near-tied plans named in one line."""

from __future__ import annotations

import csv
import io
import json

import pytest
from click.testing import CliRunner

from autoplan.calibration.uncertainty import band_text, error_band
from autoplan.cli import main
from autoplan.specs.hardware import load_gpu

SEARCH = ["search", "-m", "8b", "-g", "64", "--gbs-seqs", "512", "--top", "5"]
ESTIMATE = ["estimate", "-m", "8b", "-g", "64", "--gbs-seqs", "512", "--tp", "2", "--pp", "2"]
SIDES = ("tokens_per_s_per_gpu", "step_time_s", "peak_memory_bytes", "peak_memory_gib")


def invoke(args):
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    return result


def check_sides(record, prefix=""):
    for figure in SIDES:
        point = float(record[prefix + figure])
        assert float(record[f"{prefix}{figure}_low"]) <= point <= float(record[f"{prefix}{figure}_high"]), figure


@pytest.fixture(scope="module")
def band():
    return error_band("megatron", load_gpu("h100-sxm"), moe=False, gpus=64)


def test_search_json_carries_the_band_and_the_near_ties(tmp_path, band):
    doc = json.loads(invoke([*SEARCH, "--format", "json", "--out", str(tmp_path / "o")]).stdout)
    assert doc["error_band"]["group"] == band.group
    assert band.group.split(" at ")[0] == "megatron/hopper/dense"
    assert doc["error_band"]["tokens_per_s"] == [band.tokens_low_factor, band.tokens_high_factor]
    assert doc["near_ties"]["num_plans"] >= 1
    for plan in doc["plans"]:
        check_sides(plan)
    assert "tokens_per_s_per_gpu_low" in doc["columns"]
    rows = list(csv.DictReader(io.StringIO((tmp_path / "o" / "plans.csv").read_text())))
    check_sides(rows[0])
    assert "peak_memory_gib_high" in (tmp_path / "o" / "columns.md").read_text()


def test_search_table_shows_the_band(tmp_path, band):
    out = invoke([*SEARCH, "--out", str(tmp_path / "o")]).stdout
    assert band_text(band.tokens_low_factor, band.tokens_high_factor) in out
    doc = json.loads((tmp_path / "o" / "plans.json").read_text())
    if doc["near_ties"]["num_plans"] > 1:
        assert f"The top {doc['near_ties']['num_plans']} plans are within the model's uncertainty" in out
    else:
        assert "within the model's uncertainty" not in out


def test_search_csv_has_low_and_high_columns(tmp_path):
    out = invoke([*SEARCH, "--format", "csv", "--out", str(tmp_path / "o")]).stdout
    rows = list(csv.DictReader(io.StringIO(out)))
    assert len(rows) == 5
    for row in rows:
        check_sides(row)


def test_search_marks_an_unmeasured_pair(tmp_path):
    # no DeepSpeed run on Hopper is among the measurements (validation/README.md)
    out = invoke(["search", "-m", "8b", "-g", "64", "--gbs-seqs", "512", "--hardware", "h100-sxm",
                  "--trainer", "deepspeed", "--top", "3", "--out", str(tmp_path / "o")]).stdout
    assert not error_band("deepspeed", load_gpu("h100-sxm"), moe=False).measured
    assert "(unmeasured pair)" in out


def test_estimate_shows_and_writes_the_band(band):
    record = json.loads(invoke([*ESTIMATE, "--format", "json"]).stdout)[0]
    check_sides(record)
    assert record["error_band"] == band.group and record["error_band_measured"] == band.measured
    text = invoke(ESTIMATE).stdout
    assert f"({band_text(band.tokens_low_factor, band.tokens_high_factor)})" in text
    assert band.group in text


def test_compare_adds_band_columns(tmp_path, band):
    layouts = tmp_path / "layouts.csv"
    layouts.write_text("tp,pp,mbs\n2,2,1\n4,1,1\n")
    out = invoke(["compare", str(layouts), "-m", "8b", "-g", "64", "--gbs-seqs", "512", "--format", "csv"]).stdout
    rows = list(csv.DictReader(io.StringIO(out)))
    for row in rows:
        check_sides(row)
        assert row["error_band"] == band.group
    table = invoke(["compare", str(layouts), "-m", "8b", "-g", "64", "--gbs-seqs", "512", "--format", "table"]).stdout
    assert band_text(band.tokens_low_factor, band.tokens_high_factor) in table


def test_the_band_follows_the_gpu_count_where_its_group_is_split_by_scale():
    """nanotron on Hopper: the playbook sweep's held-out errors at one node are a fraction of those
    across 32-64 nodes, and estimate says which band it used."""
    args = ["estimate", "-m", "8b", "--trainer", "nanotron", "--hardware", "h100-sxm", "--tp", "2",
            "--gbs-seqs", "512", "--format", "json"]
    one_node = json.loads(invoke([*args, "-g", "8"]).stdout)[0]
    many = json.loads(invoke([*args, "-g", "512"]).stdout)[0]
    assert one_node["error_band"] == "nanotron/hopper/dense at 1-8 GPUs"
    assert many["error_band"] == "nanotron/hopper/dense at 129+ GPUs"
    width = {name: r["tokens_per_s_per_gpu_high"] / r["tokens_per_s_per_gpu_low"] for name, r in
             (("one", one_node), ("many", many))}
    assert width["one"] < width["many"]
