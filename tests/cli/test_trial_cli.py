"""`autoplan trial` writes the near-tied plans' runs; its manifest feeds `rerank`."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from autoplan.calibration.trial import trial_run
from autoplan.cli import main
from autoplan.export.launch import required_lines
from autoplan.export.registry import TRAINERS

REVERSAL = Path(__file__).parents[1] / "unit" / "calibration" / "logs" / "reversal"


def test_trial_writes_the_plans_the_model_cannot_order(plans, tmp_path):
    data = json.loads(plans.read_text())
    best = data["plans"][0]["tokens_per_s_per_gpu"]
    # the default count: leading plans near-tied and within 5% of the best (hand count on the file)
    expected = next(i for i, p in enumerate(data["plans"]) if p["tokens_per_s_per_gpu"] < 0.95 * best)
    out = tmp_path / "trial"
    result = CliRunner().invoke(main, ["trial", str(plans), "--to", "megatron", "--steps", "12", "-o", str(out)])
    assert result.exit_code == 0, result.output + result.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    assert [r["rank"] for r in manifest["runs"]] == list(range(1, expected + 1))
    script = (out / "rank-1" / "run.sh").read_text()
    exported = (out / "rank-1" / "megatron_pretrain_gpt.sh").read_text()
    assert "--log-throughput" in script and "tee train.log" in script and '"${MEGATRON_LM:?' in script
    assert "--train-iters 12" in exported and "--log-interval 1" in exported
    assert subprocess.run(["bash", "-n", str(out / "rank-1" / "run.sh")]).returncode == 0
    # an unset path fails loudly before anything runs
    ran = subprocess.run(["bash", str(out / "rank-1" / "run.sh")], capture_output=True, text=True,
                         env={"PATH": "/usr/bin:/bin"})
    assert ran.returncode != 0 and "set MEGATRON_LM" in ran.stderr and not (out / "rank-1" / "train.log").exists()
    # the runs' logs in place: rerank reads the manifest and re-orders the pair the logs reverse
    for rank in (1, 2):
        shutil.copy(REVERSAL / f"rank-{rank}" / "train.log", out / f"rank-{rank}" / "train.log")
    result = CliRunner().invoke(main, ["rerank", str(plans), "--logs", str(out), "--format", "json"])
    assert result.exit_code == 0, result.output + result.stderr
    rows = {r["old_rank"]: r for r in json.loads(result.stdout)["plans"]}
    assert rows[2]["new_rank"] == 1 and rows[1]["measured"] and not rows[3]["measured"]


def test_trial_refuses_a_plan_the_trainer_cannot_run_before_writing(plans, tmp_path):
    out = tmp_path / "trial"
    result = CliRunner().invoke(main, ["trial", str(plans), "--to", "deepspeed", "-o", str(out)])
    assert result.exit_code == 2 and "plan rank" in result.stderr and "search with --trainer deepspeed" in result.stderr
    assert not out.exists()


def test_run_sh_starts_the_exported_launch_script_with_either_launcher(tmp_path):
    searched = tmp_path / "s"
    result = CliRunner().invoke(main, ["search", "-m", "8b", "-g", "16", "--gbs-tokens", "1M", "--trainer", "deepspeed",
                                       "--tp", "1", "--pp", "1", "--out", str(searched)])
    assert result.exit_code == 0, result.output + result.stderr
    for launcher in ("torchrun", "slurm"):
        out = tmp_path / launcher
        result = CliRunner().invoke(main, ["trial", str(searched / "plans.json"), "--to", "deepspeed", "--top", "1",
                                           "--steps", "6", "--launcher", launcher, "-o", str(out)])
        assert result.exit_code == 0, result.output + result.stderr
        folder = out / "rank-1"
        script, exported = (folder / "run.sh").read_text(), (folder / "deepspeed_launch.sh").read_text()
        assert all(subprocess.run(["bash", "-n", str(folder / f)]).returncode == 0
                   for f in ("run.sh", "deepspeed_launch.sh"))
        # one launch line per trainer: the export's (16 GPUs = 2 nodes of 8), which run.sh starts
        if launcher == "torchrun":
            assert "bash deepspeed_launch.sh 2>&1 | tee train.log" in script and '"${MASTER_ADDR:?' in script
            assert "exec torchrun" in exported and "srun" not in exported
        else:
            assert 'sbatch --wait --chdir "$PWD" --output train.log deepspeed_launch.sh' in script
            assert "#SBATCH --nodes=2" in exported and "exec srun" in exported
        config = json.loads((folder / "deepspeed_config.json").read_text())
        assert config["log_level"] == "info" and config["wall_clock_breakdown"] and config["steps_per_print"] == 1
        assert config["scheduler"]["params"]["total_num_steps"] == 6
        ran = subprocess.run(["bash", str(folder / "run.sh")], capture_output=True, text=True,
                             env={"PATH": "/usr/bin:/bin", "MASTER_ADDR": "node0"})
        assert ran.returncode != 0 and "set TRAIN_SCRIPT" in ran.stderr and not (folder / "train.log").exists()


@pytest.mark.parametrize("trainer", TRAINERS)
def test_every_exporter_can_run_a_trial(trainer, tmp_path):
    """The contract of a trainer in the export registry: its exporter's ``TRIAL`` makes a run.sh
    that starts the exported launch script with the declared logging flags and stops, before
    anything runs, on each path the user has not set."""
    searched = tmp_path / "s"
    result = CliRunner().invoke(main, ["search", "-m", "8b", "-g", "16", "--gbs-tokens", "1M", "--trainer", trainer,
                                       "--out", str(searched)])
    assert result.exit_code == 0, result.output + result.stderr
    out = tmp_path / "trial"
    result = CliRunner().invoke(main, ["trial", str(searched / "plans.json"), "--to", trainer, "--top", "1",
                                       "--steps", "6", "-o", str(out)])
    assert result.exit_code == 0, result.output + result.stderr
    run, folder = trial_run(trainer), out / "rank-1"
    script = (folder / "run.sh").read_text()
    assert (folder / run.launch_file).is_file() and subprocess.run(["bash", "-n", str(folder / "run.sh")]).returncode == 0
    assert f"bash {' '.join([run.launch_file, *run.logging_args])} 2>&1 | tee train.log" in script
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["trainer"] == trainer and manifest["runs"][0]["files"]
    ran = subprocess.run(["bash", str(folder / "run.sh")], capture_output=True, text=True,
                         env={"PATH": "/usr/bin:/bin", "MASTER_ADDR": "node0"})
    assert ran.returncode != 0 and not (folder / "train.log").exists()
    assert "set " in ran.stderr  # names what is missing
    # every path the exported launch script stops on, run.sh checks first
    assert all(f"export {line}" in script for line in required_lines((folder / run.launch_file).read_text()))
