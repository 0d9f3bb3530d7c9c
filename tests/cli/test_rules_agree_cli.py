"""Search, estimate, explain, compare and export agree on the rules (the two disagreements the one rule table fixed)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from autoplan.cli import main

UNEVEN_TEXT = "layers must be divisible by pp·vpp unless uneven stages are allowed (--allow-uneven-pp)"


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def test_torchtitan_exports_the_plan_search_ranks_first(tmp_path):
    """Before: search ranked first ep=8 with zero=0 (dp_shard = 1), which torchtitan's efsdp mesh
    refuses, and the export of that plan exited with 'torchtitan refuses this plan'."""
    out = tmp_path / "out"
    result = run("search", "-m", "qwen3-30b-a3b", "-g", 64, "--trainer", "torchtitan", "--zero", 0,
                 "--gbs-tokens", "4M", "--export", "torchtitan", "--format", "json", "--out", out)
    assert result.exit_code == 0, result.output
    best = json.loads(result.stdout)["plans"][0]
    assert best["ep"] <= best["cp"] * best["tp"]  # dp_shard = 1 with zero 0: ep | cp·tp
    assert (out / "configs" / "torchtitan_autoplan.py").exists()


LAYOUT = ("-m", "llama3-8b", "-n", 24, "--pp", 3, "--gbs-seqs", 48)  # 32 layers on 3 stages


@pytest.mark.parametrize("command", ["estimate", "explain"])
def test_estimate_and_explain_honour_allow_uneven_pp(command):
    refused = run(command, *LAYOUT)
    assert refused.exit_code != 0 if command == "estimate" else "Why not" in refused.output
    assert UNEVEN_TEXT in refused.output and "try --pp 2 or --allow-uneven-pp" in refused.output
    allowed = run(command, *LAYOUT, "--allow-uneven-pp")
    assert allowed.exit_code == 0, allowed.output
    assert UNEVEN_TEXT not in allowed.output


def test_compare_gives_the_same_reason_and_honours_the_flag(tmp_path):
    csv = tmp_path / "layouts.csv"
    csv.write_text("gpus,pp,gbs_seqs\n24,3,48\n")
    refused = run("compare", csv, "-m", "llama3-8b")
    assert refused.exit_code == 0 and UNEVEN_TEXT in refused.stdout
    allowed = run("compare", csv, "-m", "llama3-8b", "--allow-uneven-pp")
    assert allowed.exit_code == 0 and UNEVEN_TEXT not in allowed.stdout


def test_export_gives_the_same_reason_and_honours_the_flag():
    refused = run("export", "--to", "megatron", *LAYOUT)
    assert refused.exit_code != 0 and f"megatron refuses this plan: {UNEVEN_TEXT}" in refused.output
    allowed = run("export", "--to", "megatron", *LAYOUT, "--allow-uneven-pp")
    assert allowed.exit_code == 0, allowed.output
    assert "--pipeline-model-parallel-layout 'E(t*11|)*2t*10L'" in allowed.stdout


def test_a_trainer_without_unequal_stages_refuses_them_everywhere(tmp_path):
    text = "the trainer cannot run unequal stages here"
    estimate = run("estimate", *LAYOUT, "--trainer", "deepspeed", "--zero", 1, "--allow-uneven-pp")
    export = run("export", "--to", "deepspeed", *LAYOUT, "--allow-uneven-pp")
    assert estimate.exit_code != 0 and text in estimate.output
    assert export.exit_code != 0 and text in export.output
    result = run("search", "-m", "llama3-8b", "-g", 24, "--pp", 3, "--gbs-seqs", 48, "--trainer", "deepspeed",
                 "--allow-uneven-pp", "--out", tmp_path / "out")
    assert result.exit_code != 0 and "trainer_uneven_pp" in result.output


def test_search_with_uneven_stages_exports_its_top_plan(tmp_path):
    """Before: --allow-uneven-pp ranked an uneven plan first and the Megatron export refused it."""
    out = tmp_path / "out"
    result = run("search", "-m", "llama3-8b", "-g", 24, "--pp", 3, "--gbs-seqs", 48, "--allow-uneven-pp",
                 "--export", "megatron", "--out", out)
    assert result.exit_code == 0, result.output
    assert "--pipeline-model-parallel-layout" in (out / "configs" / "megatron_pretrain_gpt.sh").read_text()


def test_export_of_a_plan_searched_with_uneven_stages_keeps_the_flag(tmp_path):
    out = tmp_path / "out"
    searched = run("search", "-m", "llama3-8b", "-g", 24, "--pp", 3, "--gbs-seqs", 48, "--allow-uneven-pp",
                   "--out", out)
    assert searched.exit_code == 0, searched.output
    assert json.loads((out / "plans.json").read_text())["allow_uneven_pp"] is True
    exported = run("export", out / "plans.json", "--to", "megatron")
    assert exported.exit_code == 0, exported.output
    assert "--pipeline-model-parallel-layout" in exported.stdout
