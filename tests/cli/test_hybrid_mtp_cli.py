"""--hsdp on estimate, search and compare; --mtp-in-mfu; refusals name the trainer's stages."""

from __future__ import annotations

import json

from click.testing import CliRunner

from autoplan.cli import main

# llama3-8b on 64 GPUs, zero 3: dp 64, grad_acc = 256/64 = 4
PLAN = ("-m", "llama3-8b", "-g", 64, "--gbs-seqs", 256, "--zero", 3, "--format", "json")


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def test_estimate_hsdp_holds_more_state_than_full_sharding():
    hybrid = run("estimate", *PLAN, "--trainer", "torchtitan", "--hsdp", 8)
    full = run("estimate", *PLAN, "--trainer", "torchtitan")
    (h,), (f,) = json.loads(hybrid.stdout), json.loads(full.stdout)
    assert h["hsdp"] == 8 and f["hsdp"] == 0
    assert h["mem_first_optimizer_states_bytes"] == 8 * f["mem_first_optimizer_states_bytes"]  # /8 instead of /64


def test_estimate_refuses_hsdp_where_the_trainer_has_none():
    result = run("estimate", *PLAN[:-2], "--trainer", "nanotron", "--zero", 1, "--hsdp", 8)
    assert result.exit_code == 2
    assert "the trainer must shard hybrid at this ZeRO stage" in result.output and "nanotron" in result.output


def test_search_takes_a_list_of_hsdp(tmp_path):
    found = run("search", *PLAN, "--trainer", "torchtitan", "--hsdp", "0,8,16", "--recompute", "full",
                "--out", tmp_path / "out")
    assert found.exit_code == 0, found.output
    assert {plan["hsdp"] for plan in json.loads(found.stdout)["plans"]} <= {0, 8, 16}


def test_mtp_in_mfu_is_an_option():
    args = ("estimate", "-m", "deepseek-v3", "-g", 256, "--hardware", "h800", "--gbs-seqs", 256, "--seq-len", 4096,
            "--pp", 8, "--ep", 8, "--recompute", "full", "--format", "json")
    (counted,), (left_out,) = (json.loads(run(*args).stdout), json.loads(run(*args, "--no-mtp-in-mfu").stdout))
    assert counted["model_flops_per_step"] > left_out["model_flops_per_step"]
    assert counted["step_time_s"] == left_out["step_time_s"]
