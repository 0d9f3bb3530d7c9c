"""`autoplan probe`: without PyTorch one line and exit 2; no other command imports PyTorch; with
PyTorch, a quick CPU probe over 2 gloo ranks writes files that `estimate` and `search` accept."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
import yaml
from click.testing import CliRunner

from autoplan.cli import main
from autoplan.units import parse_time


def test_without_torch_probe_says_how_to_install_it(monkeypatch, tmp_path):
    monkeypatch.setattr("autoplan.probe.torch_available", lambda: False)
    result = CliRunner().invoke(main, ["probe", "--device", "cpu", "--quick", "--out", str(tmp_path)])
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "pip install 'autoplan[probe]'" in lines[0], result.output
    assert not any(tmp_path.iterdir())


def test_other_commands_never_import_torch():
    code = ("import sys; from click.testing import CliRunner; from autoplan.cli import main; import autoplan.probe.run; "
            "r = CliRunner().invoke(main, ['estimate', '-m', '8b', '-g', '8', '--gbs-seqs', '8']); "
            "r2 = CliRunner().invoke(main, ['probe', '--help']); "
            "assert r.exit_code in (0, 1) and r2.exit_code == 0, (r.output, r2.output); "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_a_quick_cpu_probe_feeds_estimate_and_search(tmp_path):
    pytest.importorskip("torch")
    out = tmp_path / "probe"
    start = time.perf_counter()
    result = CliRunner().invoke(main, ["probe", "--device", "cpu", "--quick", "--nproc", "2", "--out", str(out)])
    seconds = time.perf_counter() - start
    assert result.exit_code == 0, result.output
    assert seconds <= 60.0, f"the quick CPU probe took {seconds:.1f} s (issue 45: at most 60 s on 2 cores)"
    hardware, profile = out / "hardware.yaml", out / "profile.yaml"
    assert {"kernels.csv", "collectives.csv", "hardware.yaml", "profile.yaml"} <= {p.name for p in out.iterdir()}
    fit = yaml.safe_load(profile.read_text())["fit"]
    assert fit["provenance"]["ranks"] == 2 and fit["provenance"]["backend"] == "gloo"
    assert {c["collective"] for c in fit["figures"]["collectives"]} >= {"all_reduce", "all_gather", "send_recv"}
    files = ["--hardware", str(hardware), "--profile", str(profile)]
    common = ["-m", "llama3.2-1b", "-g", "2", "--gbs-seqs", "8", "--seq-len", "1024", *files]
    estimate = CliRunner().invoke(main, ["estimate", *common, "--tp", "1"])
    assert estimate.exit_code == 0, estimate.output
    assert "cpu-probed" in estimate.output
    search = CliRunner().invoke(main, ["search", *common, "--out", str(tmp_path / "plans")])
    assert search.exit_code == 0, search.output


@pytest.mark.slow
def test_two_one_rank_nodes_measure_the_scale_out_level(tmp_path):
    """--ranks-per-node 1 makes the 2 local ranks two 'nodes': the collectives run between one
    rank per node (scale_out) and set scale_out_latency and scale_out_efficiency."""
    pytest.importorskip("torch")
    result = CliRunner().invoke(main, ["probe", "--device", "cpu", "--quick", "--nproc", "2", "--ranks-per-node", "1",
                                       "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    profile = yaml.safe_load((tmp_path / "profile.yaml").read_text())
    links = profile["fit"]["figures"]["links"]
    assert links["scale_up"] is None and links["scale_out"]["hop_latency_s"] > 0
    assert "scale_out_efficiency" in profile["physical_efficiency"]
    hardware = yaml.safe_load((tmp_path / "hardware.yaml").read_text())
    assert hardware["gpus_per_node"] == 1 and hardware["scale_up_latency"] == "3 us"  # nominal: not measured
    measured = links["scale_out"]["hop_latency_s"]
    assert parse_time(hardware["scale_out_latency"]) == pytest.approx(measured, rel=1e-3)  # to 4 digits
