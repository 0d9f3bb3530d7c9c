"""Search, estimate, explain, compare and export agree on the rules (the two disagreements the one rule table fixed)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from autoplan.cli import main

UNEVEN_TEXT = "layers must be divisible by pp·vpp under --even-stages-only"


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
def test_estimate_and_explain_accept_uneven_stages_by_default(command):
    allowed = run(command, *LAYOUT)
    assert allowed.exit_code == 0, allowed.output
    assert UNEVEN_TEXT not in allowed.output
    refused = run(command, *LAYOUT, "--even-stages-only")
    assert refused.exit_code != 0 if command == "estimate" else "Why not" in refused.output
    assert UNEVEN_TEXT in refused.output and "try --pp 2 or drop --even-stages-only" in refused.output
    old = run(command, *LAYOUT, "--allow-uneven-pp")  # the old opt-in: accepted, does nothing
    assert old.exit_code == allowed.exit_code and old.output == allowed.output


def test_compare_gives_the_same_reason_and_honours_the_flag(tmp_path):
    csv = tmp_path / "layouts.csv"
    csv.write_text("gpus,pp,gbs_seqs\n24,3,48\n")
    allowed = run("compare", csv, "-m", "llama3-8b")
    assert allowed.exit_code == 0 and UNEVEN_TEXT not in allowed.stdout
    refused = run("compare", csv, "-m", "llama3-8b", "--even-stages-only")
    assert refused.exit_code == 0 and UNEVEN_TEXT in refused.stdout


def test_export_gives_the_same_reason_and_honours_the_flag():
    allowed = run("export", "--to", "megatron", *LAYOUT)
    assert allowed.exit_code == 0, allowed.output
    assert "--pipeline-model-parallel-layout 'E(t*11|)*2t*10L'" in allowed.stdout
    refused = run("export", "--to", "megatron", *LAYOUT, "--even-stages-only")
    assert refused.exit_code != 0 and f"megatron refuses this plan: {UNEVEN_TEXT}" in refused.output


def test_a_trainer_without_this_unequal_split_refuses_it_everywhere(tmp_path):
    """torchtitan makes unequal stages only up to 2 per rank: 32 layers on pp 3 × vpp 4."""
    text = "the trainer cannot run unequal stages here"
    deep = [*LAYOUT, "--vpp", 4, "--gbs-seqs", 96, "--zero", 0]
    estimate = run("estimate", *deep, "--trainer", "torchtitan")
    export = run("export", "--to", "torchtitan", *deep)
    assert estimate.exit_code != 0 and text in estimate.output
    assert export.exit_code != 0 and text in export.output
    result = run("search", "-m", "llama3-8b", "-g", 24, "--pp", 3, "--vpp", 4, "--gbs-seqs", 96,
                 "--trainer", "torchtitan", "--zero", 0, "--out", tmp_path / "out")
    assert result.exit_code != 0 and "the trainer cannot run unequal stages here" in result.output


def test_deepspeed_runs_unequal_stages_as_costed():
    """Megatron-DeepSpeed's partition puts the extra layers on the first stages (rules/stages.py)."""
    assert run("estimate", *LAYOUT, "--trainer", "deepspeed", "--zero", 1).exit_code in (0, 1)  # fits or not, legal
    assert run("export", "--to", "deepspeed", *LAYOUT, "--zero", 1).exit_code == 0


def test_search_with_uneven_stages_exports_its_top_plan(tmp_path):
    """Before: --allow-uneven-pp ranked an uneven plan first and the Megatron export refused it."""
    out = tmp_path / "out"
    result = run("search", "-m", "llama3-8b", "-g", 24, "--pp", 3, "--gbs-seqs", 48,
                 "--export", "megatron", "--out", out)
    assert result.exit_code == 0, result.output
    assert "--pipeline-model-parallel-layout" in (out / "configs" / "megatron_pretrain_gpt.sh").read_text()


def test_search_notes_what_even_stages_only_dropped(tmp_path):
    result = run("search", "-m", "llama3-8b", "-g", 24, "--pp", "2,3", "--gbs-seqs", 48,
                 "--even-stages-only", "--out", tmp_path / "out")
    assert result.exit_code == 0, result.output
    assert "without --even-stages-only they are considered" in result.output
    best = run("search", "-m", "llama3-8b", "-g", 24, "--pp", "2,3", "--gbs-seqs", 48, "--out", tmp_path / "b")
    assert "even-stages-only" not in best.output


def test_export_of_a_plan_searched_with_uneven_stages(tmp_path):
    """Old command lines (--allow-uneven-pp) and old plans.json files still work."""
    out = tmp_path / "out"
    searched = run("search", "-m", "llama3-8b", "-g", 24, "--pp", 3, "--gbs-seqs", 48, "--allow-uneven-pp",
                   "--out", out)
    assert searched.exit_code == 0, searched.output
    data = json.loads((out / "plans.json").read_text())
    assert data["allow_uneven_pp"] is True
    data["allow_uneven_pp"] = False  # as a plans.json written before uneven stages were the default
    (out / "plans.json").write_text(json.dumps(data))
    exported = run("export", out / "plans.json", "--to", "megatron")
    assert exported.exit_code == 0, exported.output
    assert "--pipeline-model-parallel-layout" in exported.stdout


@pytest.mark.parametrize(("model", "gpus", "hardware", "gbs_tokens", "layout"), [
    # DeepSeek-V3 (61 layers) on PP16 as published (h800, 2048 GPUs): 61 = 13·4 + 3·3.
    ("deepseek-v3", 2048, "h800", "16M", "E(t*4|)*13(t*3|)*2t*3mL"),  # its MTP depth before the loss
    # Llama 3.1 405B (126 layers) on PP16 (Llama 3 paper, Table 4): 126 = 14·8 + 2·7.
    ("llama3.1-405b", 8192, "h100-sxm", "16M", "E(t*8|)*14t*7|t*7L"),
])
def test_production_top_plans_export_their_uneven_stages(tmp_path, model, gpus, hardware, gbs_tokens, layout):
    """Before: these needed --allow-uneven-pp and the Megatron export refused the top plan (exit 2)."""
    out = tmp_path / "out"
    result = run("search", "-m", model, "-g", gpus, "--hardware", hardware, "--gbs-tokens", gbs_tokens,
                 "--pp", 16, "--vpp", 1, "--export", "megatron", "--out", out)
    assert result.exit_code == 0, result.output
    script = (out / "configs" / "megatron_pretrain_gpt.sh").read_text()
    assert f"--pipeline-model-parallel-layout '{layout}'" in script


def test_megatron_exports_recompute_of_n_layers_and_of_named_modules():
    block = run("export", "--to", "megatron", "-m", "llama3-8b", "-n", 16, "--pp", 2, "--gbs-seqs", 32,
                "--recompute", "full", "--recompute-layers", 4)
    assert block.exit_code == 0, block.output
    assert "--recompute-method block" in block.stdout and "--recompute-num-layers 4" in block.stdout
    named = run("export", "--to", "megatron", "-m", "llama3-8b", "-n", 8, "--gbs-seqs", 32,
                "--recompute", "selective", "--recompute-modules", "mlp,layernorm")
    assert named.exit_code == 0, named.output
    assert "--recompute-modules mlp layernorm" in named.stdout  # nargs='*': one word per module


@pytest.mark.parametrize(("args", "text"), [
    (("--to", "torchtitan", "--zero", 3, "--recompute", "full", "--recompute-layers", 4),
     "the trainer must run full recompute of N layers per stage (recompute_layers)"),
    (("--to", "megatron", "--offload-layers", 4), "no --cpu-offloading-num-layers"),
])
def test_a_trainer_that_cannot_express_recompute_or_offload_refuses_it(args, text):
    result = run("export", "-m", "llama3-8b", "-n", 8, "--gbs-seqs", 32, *args)
    assert result.exit_code != 0 and text in result.output


def test_compare_has_the_recompute_and_offload_columns(tmp_path):
    csv = tmp_path / "layouts.csv"
    csv.write_text("gpus,gbs_seqs,recompute,recompute_layers,recompute_modules,offload_layers\n"
                   "8,32,full,4,,0\n8,32,selective,0,\"mlp,layernorm\",0\n8,32,none,0,,8\n")
    result = run("compare", csv, "-m", "llama3-8b")
    assert result.exit_code == 0, result.output
    import csv as csv_module
    import io
    rows = list(csv_module.DictReader(io.StringIO(result.stdout)))
    assert [r["recompute_layers"] for r in rows] == ["4", "0", "0"]
    assert [r["recompute_modules"] for r in rows] == ["", "mlp,layernorm", ""]
    assert [r["offload_layers"] for r in rows] == ["0", "0", "8"]
    assert "must be able to offload activations" in rows[2]["infeasible_reason"]
