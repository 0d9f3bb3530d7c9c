"""The shared training options: one spelling on every command, and the setup they build."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from autoplan.cli import main

COMMANDS = ["search", "estimate", "explain", "compare", "export", "calibrate"]
SHARED = ["--model", "-m", "--gpus", "-g", "--hardware", "--gpus-per-node", "--nic", "--seq-len",
          "--gbs-seqs", "--gbs-tokens", "--gbs-tolerance", "--flops-convention"]


def invoke(args: list[str]):
    return CliRunner().invoke(main, args)


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_spells_the_training_options_alike(command):
    text = invoke([command, "--help"]).output
    for flag in SHARED:
        assert f"{flag} " in text or f"{flag}," in text or f"{flag}\n" in text, (command, flag)
    assert "-n," not in text and "-n " not in text  # the old spelling works but is not advertised


@pytest.mark.parametrize("flag", ["-g", "-n", "--gpus"])
def test_the_old_short_flag_still_works(flag):
    result = invoke(["estimate", "-m", "8b", flag, "16", "--gbs-seqs", "64", "--tp", "2", "--format", "json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)[0]["gpus"] == 16


def test_search_on_gb200_exports_four_processes_per_node(tmp_path):
    # GB200 NVL72 compute trays hold 4 GPUs: 16 GPUs launch as 4 nodes x 4 processes (was 8 x 2)
    out = tmp_path / "run"
    result = invoke(["search", "--hardware", "gb200-nvl72", "-m", "8b", "-g", "16", "--gbs-seqs", "64",
                     "--top", "1", "--export", "megatron", "--out", str(out)])
    assert result.exit_code == 0, result.output
    script = (out / "configs" / "megatron_pretrain_gpt.sh").read_text()
    assert "NPROC_PER_NODE=4\nNNODES=4\n" in script
    assert "on 16 GPUs" in script


def test_export_from_plans_json_takes_the_hardware(tmp_path):
    out = tmp_path / "run"
    searched = invoke(["search", "-m", "8b", "-g", "16", "--gbs-seqs", "64", "--top", "1", "--out", str(out)])
    assert searched.exit_code == 0, searched.output
    plans = str(out / "plans.json")
    h100 = invoke(["export", plans, "--to", "megatron"]).stdout
    gb200 = invoke(["export", plans, "--to", "megatron", "--hardware", "gb200-nvl72"]).stdout
    assert "NPROC_PER_NODE=8\nNNODES=2\n" in h100 and "NPROC_PER_NODE=4\nNNODES=4\n" in gb200


def test_compare_takes_the_shared_options(tmp_path):
    (tmp_path / "in.csv").write_text("tp,pp\n2,1\n4,1\n", encoding="utf-8")
    result = invoke(["compare", str(tmp_path / "in.csv"), "-m", "8b", "-g", "64", "--gbs-tokens", "2M",
                     "--hardware", "h200"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert len(lines) == 3 and all(",True," in line for line in lines[1:])


SETTINGS = ["--attention-kernel", "--fp8-recipe", "--fp8-param-gather", "--grad-reduce-in-bf16",
            "--moe-capacity-factor"]


@pytest.mark.parametrize("command", [c for c in COMMANDS if c != "calibrate"])
def test_every_planning_command_takes_the_trainer_settings(command):
    text = invoke([command, "--help"]).output
    assert all(flag in text for flag in SETTINGS), command


def test_trainer_settings_reach_the_memory_model():
    """GPT-3 175B on 128 H100 at TP4 PP8 VPP12 fp8: bf16 gradient buffers save 2 of the 4 bytes
    per parameter; eager attention brings the s² scores back."""
    args = ["estimate", "-m", "gpt3-175b", "-g", "128", "--seq-len", "2048", "--gbs-seqs", "256", "--tp", "4",
            "--pp", "8", "--vpp", "12", "--mbs", "1", "--precision", "fp8", "--zero", "1", "--format", "json"]

    def peak(*extra: str) -> float:
        result = invoke(args + list(extra))
        assert result.exit_code in (0, 1), result.output  # 1: evaluated, does not fit
        return json.loads(result.stdout)[0]["peak_memory_gib"]

    default = peak()
    assert peak("--grad-reduce-in-bf16") < default < peak("--attention-kernel", "eager")


def test_a_recipe_the_trainer_lacks_is_one_line_and_trainers_lists_them(tmp_path):
    runner = CliRunner()
    result = runner.invoke(main, ["search", "--model", "8b", "--gpus", "64", "--gbs-tokens", "4M",
                                  "--trainer", "torchtitan", "--fp8-recipe", "blockwise", "--precision", "fp8",
                                  "--format", "json", "--out", str(tmp_path / "a")])
    assert result.exit_code == 1, result.output
    assert result.output.strip().startswith("Error: no feasible plan among")
    assert "(fp8_recipe=blockwise, torchtitan runs tensorwise or rowwise or mxfp8)" in result.output
    # the recipe is a setting of fp8 layouts only: a bf16 search with it runs
    bf16 = runner.invoke(main, ["search", "--model", "8b", "--gpus", "64", "--gbs-tokens", "4M", "--trainer",
                                "torchtitan", "--fp8-recipe", "blockwise", "--format", "json",
                                "--out", str(tmp_path / "b")])
    assert bf16.exit_code == 0, bf16.output
    listed = json.loads(runner.invoke(main, ["trainers", "--format", "json"]).output)
    assert {t["name"]: t["fp8_recipes"] for t in listed}["torchtitan"] == "tensorwise,rowwise,mxfp8"


@pytest.mark.parametrize("text, tokens", [("8k", 8192), ("8K", 8192), ("128k", 131072), ("4096", 4096)])
def test_seq_len_takes_a_binary_suffix_like_the_batch(text, tokens):
    """`--seq-len 8k` said "not a valid integer range" where --gbs-tokens 4M is read."""
    result = invoke(["estimate", "-m", "8b", "-g", "8", "--gbs-seqs", "8", "--seq-len", text, "--format", "json"])
    assert result.exit_code in (0, 1), result.output
    assert json.loads(result.stdout)[0]["seq_len"] == tokens


def test_a_hardware_alias_says_which_preset_it_is():
    """`--hardware h100` meant h100-sxm without a word."""
    result = CliRunner().invoke(main, ["estimate", "-m", "8b", "-g", "8", "--gbs-seqs", "8", "--hardware", "h100"])
    assert "note: --hardware h100 is the preset h100-sxm" in result.stderr
    exact = CliRunner().invoke(main, ["estimate", "-m", "8b", "-g", "8", "--gbs-seqs", "8", "--hardware", "h100-sxm"])
    assert "note: --hardware" not in exact.stderr


def test_a_hub_id_says_autoplan_reads_local_files_and_how_to_get_one():
    result = invoke(["estimate", "-m", "meta-llama/Llama-3.1-8B", "-g", "8", "--gbs-seqs", "8"])
    assert result.exit_code == 2
    assert "autoplan reads a model's config.json from disk" in result.output
    assert "huggingface-cli download meta-llama/Llama-3.1-8B config.json" in result.output


def test_every_missing_config_key_is_named_at_once(tmp_path):
    config = {"model_type": "llama", "num_hidden_layers": 2, "intermediate_size": 512}
    (tmp_path / "c.json").write_text(json.dumps(config))
    result = invoke(["estimate", "-m", str(tmp_path / "c.json"), "-g", "8", "--gbs-seqs", "8"])
    assert result.exit_code == 2
    assert "missing required key(s) hidden_size, num_attention_heads, vocab_size" in result.output
