"""`autoplan trial` writes the near-tied plans' runs; its manifest feeds `rerank`."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

from click.testing import CliRunner

from autoplan.cli import main

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
