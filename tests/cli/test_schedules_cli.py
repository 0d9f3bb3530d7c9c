"""--pp-schedule and --pp-split on estimate, search and compare; refusals name the trainer's schedules."""

from __future__ import annotations

import csv
import json

from click.testing import CliRunner

from autoplan.cli import main

# llama3-8b, 64 GPUs, pp 4: dp 16, grad_acc = 256/16 = 16 micro-batches
PLAN = ("-m", "llama3-8b", "-g", 64, "--pp", 4, "--gbs-seqs", 256, "--format", "json")


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def test_estimate_costs_a_zero_bubble_schedule_below_1f1b():
    """torchtitan's ZBVZeroBubble (vpp 2) against its 1F1B: a smaller bubble (Qi et al.)."""
    zbv = run("estimate", *PLAN, "--trainer", "torchtitan", "--zero", 3, "--vpp", 2, "--pp-schedule", "zb-v")
    plain = run("estimate", *PLAN, "--trainer", "torchtitan", "--zero", 3)
    assert zbv.exit_code in (0, 1) and plain.exit_code in (0, 1), zbv.output + plain.output  # 1: does not fit
    (zbv_row,), (plain_row,) = json.loads(zbv.stdout), json.loads(plain.stdout)
    assert zbv_row["reason_code"] == plain_row["reason_code"] == 0
    assert zbv_row["time_bubble_s"] < plain_row["time_bubble_s"]


def test_estimate_refuses_a_schedule_the_trainer_lacks():
    result = run("estimate", *PLAN, "--pp-schedule", "dualpipe")
    assert result.exit_code == 2
    assert "the trainer must implement the pipeline schedule" in result.output
    assert "megatron runs 1f1b, interleaved" in result.output


def test_search_and_compare_take_the_knobs(tmp_path):
    out = tmp_path / "out"
    found = run("search", "-m", "llama3-8b", "-g", 64, "--gbs-seqs", 256, "--pp", 4, "--vpp", "1,2",
                "--trainer", "nanotron", "--zero", 1, "--pp-schedule", "default,afab", "--format", "json",
                "--out", out)
    assert found.exit_code == 0, found.output
    assert {plan["pp_schedule"] for plan in json.loads(found.stdout)["plans"]} <= {"default", "afab"}
    rows = tmp_path / "rows.csv"
    rows.write_text("tp,pp,vpp,zero,mbs,pp_schedule,pp_split\n1,4,1,1,1,afab,balanced\n1,4,1,1,1,,embed-loss\n",
                    encoding="utf-8")
    compared = run("compare", rows, "-m", "llama3-8b", "-g", 64, "--gbs-seqs", 256, "--format", "csv")
    assert compared.exit_code in (0, 1), compared.output
    table = list(csv.DictReader(compared.stdout.splitlines()))
    assert [r["pp_schedule"] for r in table] == ["afab", ""] and table[1]["pp_split"] == "embed-loss"
