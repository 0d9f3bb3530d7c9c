"""`autoplan rerank` and `autoplan calibrate --from-log` on the runs of plans: a near-tied pair
that the logs reverse is re-ranked. The two logs (``tests/unit/calibration/logs/reversal/``) are
Megatron-LM's real line format with CONSTRUCTED numbers (said in their headers)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from autoplan.cli import main

REVERSAL = Path(__file__).parents[1] / "unit" / "calibration" / "logs" / "reversal"


def test_the_logs_reverse_a_near_tied_pair(plans):
    data = json.loads(plans.read_text())
    first, second = data["plans"][0], data["plans"][1]
    assert second["tokens_per_s_per_gpu"] > 0.99 * first["tokens_per_s_per_gpu"]  # a near tie as predicted
    result = CliRunner().invoke(main, ["rerank", str(plans), "--logs", str(REVERSAL / "rank-1" / "train.log"),
                                       "--logs", str(REVERSAL / "rank-2" / "train.log"), "--format", "json"])
    assert result.exit_code == 0, result.output + result.stderr
    rows = {r["old_rank"]: r for r in json.loads(result.stdout)["plans"]}
    assert rows[2]["new_rank"] == 1 and rows[1]["new_rank"] > rows[2]["new_rank"]
    # the logs' steps after two warm-up steps: 7600 ms (rank 1) and 6900 ms (rank 2), every one
    assert rows[1]["measured_step_time_s"] == pytest.approx(7.6) and rows[2]["measured_step_time_s"] == pytest.approx(6.9)
    # 128 seqs x 8192 tokens / (6.9 s x 16 GPUs) = 9498.0 tokens/s/GPU; its band is its (constant) steps
    assert rows[2]["tokens_per_s_per_gpu"] == pytest.approx(128 * 8192 / (6.9 * 16))
    assert rows[2]["tokens_per_s_per_gpu_low"] == rows[2]["tokens_per_s_per_gpu_high"]
    assert rows[1]["predicted_step_time_s"] == pytest.approx(first["step_time_s"])
    assert "measured 7.6 s/step vs predicted" in rows[1]["why"] and rows[1]["why"].startswith("down")
    # a plan not run keeps its predicted step time (two runs fit nothing) and the shipped band
    assert rows[3]["measured"] is False and rows[3]["refit_step_time_s"] == pytest.approx(data["plans"][2]["step_time_s"])
    assert "shipped band" in rows[3]["band"]
    assert "no refit" in result.stderr


def test_calibrate_from_logs_is_guarded_like_calibrate(plans, tmp_path):
    result = CliRunner().invoke(main, ["calibrate", "--from-log", str(REVERSAL / "rank-1" / "train.log"),
                                       "--from-log", str(REVERSAL / "rank-2" / "train.log"), "--plans", str(plans),
                                       "-o", str(tmp_path / "fitted.yaml")])
    assert result.exit_code == 2
    assert "2 trial run(s): too few usable rows" in result.stderr and not (tmp_path / "fitted.yaml").exists()


def test_a_log_that_names_no_rank_is_refused(plans, tmp_path):
    log = tmp_path / "logs" / "train.log"
    log.parent.mkdir()
    log.write_text((REVERSAL / "rank-1" / "train.log").read_text())
    result = CliRunner().invoke(main, ["rerank", str(plans), "--logs", str(log)])
    assert result.exit_code == 2 and "names no plan rank" in result.stderr
