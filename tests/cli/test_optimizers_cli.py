"""--optimizer and --offload on estimate, explain, search and compare; refusals name the trainer's
optimizers; host memory is a memory reason."""

from __future__ import annotations

import csv
import json

from click.testing import CliRunner

from autoplan.cli import main

# llama3-8b on 16 GPUs, tp 2: dp 8, grad_acc = 64/8 = 8
PLAN = ("-m", "llama3-8b", "-g", 16, "--tp", 2, "--gbs-seqs", 64, "--recompute", "full", "--format", "json")
# Megatron-LM's Muon runs without the distributed optimizer and data parallelism (rule
# megatron_muon_data_parallel): 2 GPUs, tp 2, zero 0: dp 1, grad_acc = 64
NO_DP = ("-m", "llama3-8b", "-g", 2, "--tp", 2, "--zero", 0, "--gbs-seqs", 64, "--recompute", "full", "--format", "json")


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def test_estimate_costs_muon_and_the_offloaded_step():
    rows = {}
    for name, plan, extra in (("adamw", PLAN, ()), ("adamw_no_dp", NO_DP, ()),
                              ("muon", NO_DP, ("--optimizer", "muon", "--trainer-version", "core_v0.16.0")),
                              ("offload", PLAN, ("--offload", "optimizer"))):
        result = run("estimate", *plan, *extra)
        assert result.exit_code == 0, result.output
        (rows[name],) = json.loads(result.stdout)
    # Muon: one fp32 momentum (4 B) instead of Adam's 8 on the hidden matrices, plus its work.
    assert rows["muon"]["mem_first_optimizer_states_bytes"] < rows["adamw_no_dp"]["mem_first_optimizer_states_bytes"]
    assert rows["muon"]["time_muon_s"] > 0 == rows["adamw_no_dp"]["time_muon_s"]
    # Offload: no optimizer state on the GPU, a host step instead of the GPU's.
    assert rows["offload"]["mem_first_optimizer_states_bytes"] == 0 == rows["offload"]["time_optimizer_s"]
    assert rows["offload"]["time_optimizer_offload_s"] > 0
    assert rows["offload"]["peak_memory_bytes"] < rows["adamw"]["peak_memory_bytes"]
    assert rows["offload"]["host_memory_bytes"] > 0 == rows["adamw"]["host_memory_bytes"]


def test_estimate_refuses_an_optimizer_the_trainer_lacks():
    result = run("estimate", *PLAN, "--optimizer", "adamw8bit")
    assert result.exit_code == 2
    assert "the trainer must implement the optimizer" in result.output
    assert "megatron core_v0.15.3 runs adamw, sgd" in result.output and "try --optimizer adamw" in result.output


def test_an_optimizer_of_a_later_version_is_refused_with_that_version():
    """Muon: not among --optimizer's choices in Megatron-LM core_v0.15.3's arguments.py (adam, sgd),
    among them from core_v0.16.0 (adam, sgd, muon, dist_muon); lion from core_v0.17.0."""
    pinned = run("estimate", *PLAN, "--optimizer", "muon")
    assert pinned.exit_code == 2
    assert "megatron core_v0.16.0 has it (--trainer-version core_v0.16.0)" in pinned.output
    assert "megatron core_v0.17.0 has it" in run("estimate", *PLAN, "--optimizer", "lion").output
    assert run("estimate", *PLAN, "--optimizer", "lion", "--trainer-version", "core_v0.17.0").exit_code == 0
    later = run("estimate", *PLAN, "--optimizer", "lion", "--trainer-version", "core_v0.16.0")
    assert later.exit_code == 2 and "megatron core_v0.16.0 runs adamw, sgd, muon;" in later.output
    unknown = run("estimate", *PLAN, "--trainer-version", "core_v0.14.0")
    assert unknown.exit_code == 2 and "core_v0.15.3, core_v0.16.0, core_v0.17.0" in unknown.output


def test_explain_shows_the_host_memory_row():
    result = run("explain", *PLAN[:-2], "--offload", "optimizer", "--format", "csv")
    assert result.exit_code == 0, result.output
    rows = list(csv.DictReader(result.stdout.splitlines()))
    assert {r["term"] for r in rows} >= {"optimizer_offload", "muon", "host_memory"}
    (host,) = [r for r in rows if r["term"] == "host_memory"]
    assert host["stage"] == "host" and float(host["value"]) > 0


def test_search_and_compare_take_the_knobs(tmp_path):
    found = run("search", "-m", "llama3-8b", "-g", 16, "--gbs-seqs", 64, "--trainer", "deepspeed",
                "--tp", 1, "--pp", 1, "--optimizer", "adamw,lion,sgd", "--offload", "none,optimizer",
                "--format", "json", "--out", tmp_path / "out")
    assert found.exit_code == 0, found.output
    plans = json.loads(found.stdout)["plans"]
    assert {p["optimizer"] for p in plans} <= {"adamw", "lion", "sgd"} and len({p["offload"] for p in plans}) == 2
    rows = tmp_path / "rows.csv"
    rows.write_text("tp,zero,mbs,recompute,optimizer,offload\n1,3,1,full,adamw,params\n1,3,1,full,muon,\n",
                    encoding="utf-8")
    compared = run("compare", rows, "-m", "llama3-8b", "-g", 16, "--gbs-seqs", 64, "--trainer", "deepspeed",
                   "--format", "csv")
    assert compared.exit_code in (0, 1), compared.output
    table = list(csv.DictReader(compared.stdout.splitlines()))
    assert [r["optimizer"] for r in table] == ["adamw", "muon"] and table[0]["offload"] == "params"
    assert float(table[0]["host_memory_bytes"]) > 0 == float(table[1]["host_memory_bytes"])


def test_offload_beyond_host_memory_is_a_memory_reason():
    # 405B over 8 GPUs: ~913 GB of offloaded states per GPU against 256 GB of host memory
    result = run("estimate", "-m", "405b", "-g", 8, "--gbs-seqs", 8, "--trainer", "deepspeed", "--zero", 3,
                 "--offload", "params", "--recompute", "full", "--format", "json")
    assert result.exit_code == 1, result.output
    (row,) = json.loads(result.stdout)
    assert row["infeasible_reason"].startswith("out of host memory: ") and not row["host_memory_fits"]
    assert "256.0 GiB" not in row["infeasible_reason"]  # 256 GB = 238.4 GiB per GPU (2 TB / 8)
    assert "238.4 GiB of host memory per GPU" in row["infeasible_reason"]
