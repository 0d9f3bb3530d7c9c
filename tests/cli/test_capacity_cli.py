"""`autoplan capacity` end to end through click's CliRunner: the issue's command, its files, its
plots, the export of the chosen point, and one-line errors for bad input."""

from __future__ import annotations

import io
import json

import pandas as pd
import pytest
from click.testing import CliRunner

from autoplan.capacity.files import read_capacity_csv
from autoplan.cli import main
from autoplan.report.capacity_plots import PLOT_FILES

HEADLINE = ["capacity", "--model", "70b", "--train-tokens", "15T", "--gbs-tokens", "4M",
            "--hardware", "h100-sxm,h200,b200,gb200-nvl72", "--gpus", "256..8192", "--deadline", "90d",
            "--budget", "20M"]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def headline(tmp_path_factory):
    out = tmp_path_factory.mktemp("capacity") / "out"
    result = CliRunner().invoke(main, [*HEADLINE, "--format", "csv", "--no-plots", "--out", str(out)])
    assert result.exit_code == 0, result.output
    return result, out


def test_headline_writes_every_file_and_the_csv_parses_back(headline):
    result, out = headline
    names = {p.name for p in out.iterdir()}
    assert names == {"capacity.csv", "plans.json", "manifest.json"}
    frame = read_capacity_csv(out / "capacity.csv")
    stdout = pd.read_csv(io.StringIO(result.stdout))
    assert len(frame) == len(stdout) and frame["gpus"].tolist() == stdout["gpus"].tolist()
    assert set(frame["hardware"]) == {"h100-sxm", "h200", "b200", "gb200-nvl72"}
    chosen = frame[frame["chosen"]]
    assert len(chosen) == 1 and chosen.iloc[0]["rank"] == 1
    assert chosen.iloc[0]["train_days"] <= 90 and chosen.iloc[0]["cost_usd"] <= 20e6
    assert (frame.loc[frame["train_days"] > 90, "constraint_reason"].str.contains("misses the deadline")).all()
    assert (frame["gpus"] >= 256).all() and (frame["gpus"] <= 8192).all()
    nvl72 = frame[frame["hardware"] == "gb200-nvl72"]
    assert (nvl72["gpus"] % 72 == 0).all()  # whole racks


def test_the_chosen_point_exports(headline, tmp_path):
    _, out = headline
    chosen = read_capacity_csv(out / "capacity.csv").iloc[0]
    # the plan's hardware is recorded in plans.json: no --hardware needed
    result = CliRunner().invoke(main, ["export", str(out / "plans.json"), "--to", "megatron",
                                       "-o", str(tmp_path / "launch.sh")])
    assert result.exit_code == 0, result.output
    text = (tmp_path / "launch.sh").read_text()
    plan = json.loads((out / "plans.json").read_text())["plans"][0]
    # within --gbs-tolerance 0.05 of 512 sequences (the batch the chosen layout reaches)
    assert abs(plan["gbs_seqs"] - 512) <= 0.05 * 512
    assert f"--global-batch-size {plan['gbs_seqs']}" in text and "--seq-length 8192" in text
    assert f"NPROC_PER_NODE={4 if chosen['hardware'].startswith('gb') else 8}" in text
    recorded = json.loads((out / "plans.json").read_text())["setup"]
    assert recorded["fp8_recipe"] == "tensorwise" and recorded["master_weights"] == "fp32"


def test_table_names_the_chosen_point_and_the_prices_and_the_plots_are_written(tmp_path):
    out = tmp_path / "o"
    result = CliRunner().invoke(main, ["capacity", "-m", "8b", "--train-tokens", "1T", "--gbs-schedule", "1M:50B,2M",
                                       "--hardware", "h100-sxm", "--gpus", "64..256", "--out", str(out)])
    assert result.exit_code == 0, result.output
    for name in PLOT_FILES.values():
        assert (out / name).read_bytes()[:8] == PNG_MAGIC
    assert "chosen" in result.stdout and "h100-sxm 2.69 (on-demand, 2026-05-22)" in result.stdout
    assert "--rank PHASE" in result.stderr


def test_no_point_within_the_deadline_exits_1_with_the_closest(tmp_path):
    result = CliRunner().invoke(main, ["capacity", "-m", "8b", "--train-tokens", "1T", "--gbs-tokens", "2M",
                                       "--hardware", "h100-sxm", "--gpus", "64..128", "--deadline", "1h",
                                       "--no-plots", "--out", str(tmp_path / "o")])
    assert result.exit_code == 1
    assert "no point meets the deadline; the closest: misses the deadline:" in result.stderr
    assert (tmp_path / "o" / "capacity.csv").exists() and not (tmp_path / "o" / "plans.json").exists()


@pytest.mark.parametrize("args, text", [
    (["--gpus", "8192..256"], "--gpus: 1 <= LOW <= HIGH"),
    (["--deadline", "soon"], "--deadline: expected a duration"),
    (["--budget", "lots"], "--budget:"),
    (["--hardware", "h100x"], "did you mean"),
    (["--hardware", "mi300x"], "no GPU-hour price for mi300x"),
    (["--hardware", "mi355x"], "no GPU-hour price for mi355x in hardware_db/prices.yaml: give one with --gpu-hour-price mi355x=USD"),
    (["--hardware", "b300"], "no GPU-hour price for b300"),
    (["--gpu-hour-price", "b200=free"], "--gpu-hour-price: expected GPU=USD"),
    (["--gbs-schedule", "2M:1T,4M"], "give --gbs-tokens or --gbs-schedule, not both"),
    (["--gbs-tokens", "4000001"], "multiple of the sequence length"),
    (["--gpus", "10..20", "--hardware", "gb200-nvl72"], "no whole rental unit"),
])
def test_bad_input_is_one_line_and_exit_2(args, text, tmp_path):
    base = ["capacity", "-m", "70b", "--train-tokens", "15T", "--gbs-tokens", "4M", "--out", str(tmp_path / "o")]
    merged = list(base)
    for flag, value in zip(args[::2], args[1::2]):
        if flag in merged:
            merged[merged.index(flag) + 1] = value
        else:
            merged += [flag, value]
    result = CliRunner().invoke(main, merged)
    assert result.exit_code == 2, result.output
    assert text in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert "Traceback" not in result.output


def test_a_gpu_given_as_a_yaml_file_is_named_by_its_path_in_the_export_hint(tmp_path):
    """A probed GPU's YAML (here h100-sxm's figures under another name) is no preset: the hint and
    plans.json must name the file, or `autoplan export` cannot load the GPU."""
    from autoplan.paths import data_dir

    text = (data_dir("hardware_db") / "gpus" / "h100-sxm.yaml").read_text()
    gpu = tmp_path / "probed-h100.yaml"
    gpu.write_text(text.replace("name: h100-sxm", "name: probed-h100").replace(
        "aliases: [h100, h100-sxm5, h100-80gb]", "aliases: []"))
    out = tmp_path / "o"
    result = CliRunner().invoke(main, ["capacity", "-m", "8b", "--train-tokens", "1T", "--gbs-tokens", "1M",
                                       "--hardware", str(gpu), "--gpu-hour-price", "2.5",
                                       "--gpus", "64..128", "--no-plots", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert f"--hardware {gpu}" in result.stderr and "--hardware probed-h100" not in result.stderr
    exported = CliRunner().invoke(main, ["export", str(out / "plans.json"), "--to", "megatron"])
    assert exported.exit_code == 0, exported.output
