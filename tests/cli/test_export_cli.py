"""`autoplan export` end to end with CliRunner: inputs, outputs, refusals, quoting, paths."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from autoplan.api import plan_from_record
from autoplan.cli import main
from autoplan.export import TRAINERS, ExportError, export_plan, safe_join, write_files
from autoplan.specs.models import load_model

LAYOUT = ["-m", "llama3-8b", "-n", "16", "--tp", "2", "--gbs-seqs", "64"]
EVIL = 'x"; rm -rf ~; "'


def run(*args):
    return CliRunner().invoke(main, list(args))


def plans_file(tmp_path, plans, **top):
    path = tmp_path / "plans.json"
    path.write_text(json.dumps({**top, "plans": plans}))
    return str(path)


PLAN_A = {"gpus": 16, "dp": 8, "tp": 2, "pp": 1, "vpp": 1, "cp": 1, "ep": 1, "etp": 1, "zero": 1, "mbs": 1,
          "grad_acc": 8, "seq_len": 8192, "gbs_seqs": 64, "sp": True, "recompute": "none",
          "precision": "bf16", "placement": "tp-cp-dp-pp", "tokens_per_s_per_gpu": 4000.0, "mfu": 0.4}
PLAN_B = {**PLAN_A, "dp": 4, "tp": 4, "grad_acc": 16, "mfu": 0.38}


def test_layout_options_to_stdout():
    result = run("export", "--to", "megatron", *LAYOUT)
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("#!/usr/bin/env bash")
    assert "--tensor-model-parallel-size 2" in result.stdout and "--global-batch-size 64" in result.stdout


def test_plans_json_by_rank(tmp_path):
    path = plans_file(tmp_path, [PLAN_A, PLAN_B], model="llama3-8b", hardware="h100-sxm", trainer="megatron")
    first = run("export", path, "--to", "megatron")
    second = run("export", path, "--to", "megatron", "--rank", "2")
    assert first.exit_code == 0 and second.exit_code == 0, first.output + second.output
    assert "--tensor-model-parallel-size 2" in first.stdout
    assert "--tensor-model-parallel-size 4" in second.stdout
    missing = run("export", path, "--to", "megatron", "--rank", "3")
    assert missing.exit_code == 2 and "no plan of rank 3; it holds 2 plan(s)" in missing.stderr


def test_rank_field_wins_over_order(tmp_path):
    path = plans_file(tmp_path, [{**PLAN_B, "rank": 2}, {**PLAN_A, "rank": 1}], model="llama3-8b")
    result = run("export", path, "--to", "megatron")
    assert "--tensor-model-parallel-size 2" in result.stdout


def test_plan_without_model_needs_model_option(tmp_path):
    path = plans_file(tmp_path, [PLAN_A])
    result = run("export", path, "--to", "nanotron")
    assert result.exit_code == 2 and "names no model" in result.stderr and "--model" in result.stderr
    ok = run("export", path, "--to", "nanotron", "--model", "llama3-8b")
    assert ok.exit_code == 0 and "micro_batch_size: 1" in ok.stdout


def test_plan_for_another_trainer_is_noted(tmp_path):
    path = plans_file(tmp_path, [PLAN_A], model="llama3-8b", trainer="nanotron")
    result = run("export", path, "--to", "megatron")
    assert result.exit_code == 0 and "searched for trainer 'nanotron'" in result.stderr


def test_plan_exports_with_the_settings_it_was_searched_with(tmp_path):
    """plans.json records the setup's trainer settings: export uses them unless an option is given,
    and says so when one differs (the prediction assumed the recorded one)."""
    setup = {"optimizer_state_dtype": "bf16", "master_weights": "remainders", "grad_reduce_in_bf16": True}
    path = plans_file(tmp_path, [PLAN_A], model="llama3-8b", trainer="megatron", setup=setup)
    result = run("export", path, "--to", "megatron")
    assert result.exit_code == 0, result.output
    assert "--exp-avg-dtype bf16" in result.stdout and "--grad-reduce-in-bf16" in result.stdout
    assert "note:" not in result.stderr
    fp16 = run("export", path, "--to", "megatron", "--master-weights", "fp16")
    assert fp16.exit_code == 0 and "--main-params-dtype fp16" in fp16.stdout
    assert "master_weights='fp16' instead of the 'remainders'" in fp16.stderr
    unrecorded = run("export", plans_file(tmp_path, [PLAN_A], model="llama3-8b"), "--to", "megatron")
    assert unrecorded.exit_code == 0 and "--use-precision-aware-optimizer" not in unrecorded.stdout


def test_plan_and_layout_options_conflict(tmp_path):
    path = plans_file(tmp_path, [PLAN_A], model="llama3-8b")
    result = run("export", path, "--to", "megatron", "--tp", "4")
    assert result.exit_code == 2 and "either PLAN or the layout options" in result.stderr and "--tp" in result.stderr


def test_no_plan_and_no_layout():
    result = run("export", "--to", "megatron")
    assert result.exit_code == 2 and "give a PLAN file" in result.stderr


def test_refused_plan_names_the_rule_and_writes_nothing(tmp_path):
    out = tmp_path / "out"
    result = run("export", "--to", "torchtitan", *LAYOUT, "--zero", "1", "-o", str(out) + "/")
    assert result.exit_code == 2
    assert "torchtitan refuses this plan" in result.stderr and "zero=1, torchtitan supports [0, 3]" in result.stderr
    assert not out.exists()


def test_unexpressible_knobs_are_warned_on_stderr():
    result = run("export", "--to", "nanotron", *LAYOUT, "--recompute", "selective")
    assert result.exit_code == 0
    assert "warning: recompute=selective" in result.stderr
    assert "# WARNING: recompute=selective" in result.stdout


def test_output_folder_and_file(tmp_path):
    folder = tmp_path / "configs"
    result = run("export", "--to", "torchtitan", *LAYOUT, "--zero", "3", "-o", str(folder))
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in folder.iterdir()) == ["torchtitan_autoplan.py", "torchtitan_job.toml",
                                                        "torchtitan_launch.sh"]
    script = tmp_path / "sub" / "launch.sh"
    result = run("export", "--to", "megatron", *LAYOUT, "-o", str(script))
    assert result.exit_code == 0 and script.read_text().startswith("#!/usr/bin/env bash")
    assert script.stat().st_mode & stat.S_IXUSR
    bad = run("export", "--to", "deepspeed", *LAYOUT, "-o", str(tmp_path / "ds.json"))
    assert bad.exit_code == 2 and "writes 2 files" in bad.stderr


def test_help_lists_the_trainers():
    result = run("export", "--help")
    assert result.exit_code == 0 and "|".join(TRAINERS) in result.output


# --- quoting: nothing a user typed can run ---------------------------------------------------

def _evil_model(tmp_path, name: str = EVIL + " touch pwned_by_name") -> Path:
    config = {"model_type": "llama", "name": name, "num_hidden_layers": 4,
              "hidden_size": 256, "intermediate_size": 512, "num_attention_heads": 8,
              "num_key_value_heads": 8, "vocab_size": 1024}
    path = tmp_path / "evil.json"
    path.write_text(json.dumps(config))
    return path


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
@pytest.mark.parametrize("trainer", ["megatron", "deepspeed"])
def test_scripts_pass_hostile_values_as_single_words(tmp_path, trainer):
    work = tmp_path / "work"
    work.mkdir()
    stub = tmp_path / "bin"
    stub.mkdir()
    (stub / "torchrun").write_text('#!/usr/bin/env bash\n'
                                   'python3 -c "import json,sys; json.dump(sys.argv[1:], open(\'argv.json\',\'w\'))" "$@"\n')
    (stub / "torchrun").chmod(0o755)
    data = "$(touch pwned_by_data);\n`touch pwned_by_tick`"
    tokenizer = "'; touch pwned_by_tokenizer; '"
    result = run("export", "--to", trainer, "-m", str(_evil_model(tmp_path)), "-n", "8", "--tp", "2",
                 "--gbs-seqs", "16", "--seq-len", "256", "--data-path", data, "--tokenizer", tokenizer,
                 "-o", str(work) + "/")
    assert result.exit_code == 0, result.output
    script = next(work.glob("*.sh"))
    env = {**os.environ, "PATH": f"{stub}:{os.environ['PATH']}", "TRAIN_SCRIPT": "train.py"}
    subprocess.run(["bash", str(script)], cwd=work, env=env, check=True, timeout=30)
    argv = json.loads((work / "argv.json").read_text())
    assert not list(work.glob("pwned*")) and not list(tmp_path.glob("pwned*"))
    assert data in argv and tokenizer in argv  # each arrived as exactly one argument, newline and all


def test_python_and_toml_outputs_quote_hostile_values(tmp_path):
    import ast
    import tomllib

    result = run("export", "--to", "torchtitan", "-m", str(_evil_model(tmp_path)), "-n", "8", "--zero", "3",
                 "--gbs-seqs", "16", "--seq-len", "256", "--data-path", EVIL, "-o", str(tmp_path / "tt"))
    assert result.exit_code == 0, result.output
    module = (tmp_path / "tt" / "torchtitan_autoplan.py").read_text()
    tree = ast.parse(module)
    assert EVIL in [node.value for node in ast.walk(tree) if isinstance(node, ast.Constant)]
    job = tomllib.loads((tmp_path / "tt" / "torchtitan_job.toml").read_text())
    assert job["training"]["dataset_path"] == EVIL
    assert EVIL + " touch pwned_by_name" in job["job"]["description"]


def test_names_with_control_characters_are_refused_before_export(tmp_path):
    # a newline or a terminal escape in a model name never reaches a script, a comment or the terminal
    for name in (EVIL + "\ntouch pwned_by_name", "x\x1b[31mred"):
        result = run("export", "--to", "megatron", "-m", str(_evil_model(tmp_path, name)), "-n", "8",
                     "--gbs-seqs", "16", "--seq-len", "256")
        assert result.exit_code == 2, result.output
        assert "name: control or invalid character" in result.stderr and "\x1b" not in result.stderr


# --- paths: output never escapes the chosen folder --------------------------------------------

@pytest.mark.parametrize("name", ["../evil.sh", "a/../../evil.sh", "/etc/evil.sh", "..", "", "C:evil"])
def test_names_that_climb_out_are_refused(tmp_path, name):
    with pytest.raises(ExportError, match="refusing to write"):
        write_files({name: "x"}, tmp_path / "out")
    assert not (tmp_path / "evil.sh").exists()


def test_symlink_escape_is_refused(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "link").symlink_to(tmp_path)
    with pytest.raises(ExportError, match="resolves outside"):
        safe_join(out, "link/evil.sh")


def test_nested_names_inside_the_folder_are_fine(tmp_path):
    (path,) = write_files({"sub/ok.yaml": "a: 1\n"}, tmp_path / "out")
    assert path == tmp_path / "out" / "sub" / "ok.yaml" and path.read_text() == "a: 1\n"


def test_export_plan_writes_every_trainer_into_the_folder(tmp_path):
    out = tmp_path / "run" / "configs"
    training = plan_from_record(PLAN_A)[1]
    paths = export_plan({**PLAN_A, "zero": 0}, "llama3-8b", "megatron,torchtitan,nanotron,deepspeed", out, training)
    assert {p.parent for p in paths} == {out}
    assert {p.name for p in paths} == {"megatron_pretrain_gpt.sh", "torchtitan_autoplan.py", "torchtitan_job.toml",
                                       "torchtitan_launch.sh", "nanotron_config.yaml", "nanotron_launch.sh",
                                       "deepspeed_config.json", "deepspeed_launch.sh"}


def test_export_plan_is_all_or_nothing(tmp_path):
    out = tmp_path / "configs"
    with pytest.raises(Exception, match="torchtitan refuses this plan"):
        export_plan(PLAN_A, load_model("llama3-8b"), ["megatron", "torchtitan"], out,  # zero=1: torchtitan no
                    plan_from_record(PLAN_A)[1])
    assert not out.exists()


def test_search_exports_each_trainers_best_plan(tmp_path):
    """The headline four-trainer export never fails as a whole: nanotron (no ZeRO-3) gets its own
    best plan, every trainer's files carry its predicted figures, and the terminal says which."""
    out = str(tmp_path / "run")
    result = run("search", "-m", "llama3-8b", "-g", "32", "--gbs-seqs", "128", "--tp", "1,2", "--pp", "1,2",
                 "--export", "megatron,torchtitan,nanotron,deepspeed", "--out", out)
    assert result.exit_code == 0, result.output
    for trainer in ("megatron", "torchtitan", "nanotron", "deepspeed"):
        assert f"export {trainer}: plan " in result.stderr and "predicted peak memory" in result.stderr
    nanotron = (tmp_path / "run" / "configs" / "nanotron_config.yaml").read_text()
    assert "# Predicted: peak memory" in nanotron and "zero_stage: 3" not in nanotron


def test_export_from_plans_json_labels_the_prediction(tmp_path):
    plans = plans_file(tmp_path, [{**PLAN_A, "peak_memory_gib": 50.0, "step_time_s": 2.0}], model="llama3-8b",
                       trainer="megatron")
    result = run("export", plans, "--to", "megatron")
    assert result.exit_code == 0, result.output
    assert "# Predicted: peak memory 50.0 GiB per GPU, step 2 s, 4,000 tokens/s per GPU, MFU 40.0%" in result.stdout


def test_plans_json_records_the_trainer_version_and_export_writes_for_it(tmp_path):
    """Muon needs Megatron-LM core_v0.16.0 (the megatron profile's later_versions): a search at
    that version records it, and the export of its plan writes for it without being told."""
    out = tmp_path / "run"
    # tp 8 on 8 GPUs: dp 1, as Megatron's Muon needs (rule megatron_muon_data_parallel)
    searched = run("search", "-m", "llama3-8b", "-g", "8", "--gbs-seqs", "64", "--tp", "8", "--pp", "1",
                   "--optimizer", "muon", "--trainer-version", "core_v0.16.0", "--out", str(out))
    assert searched.exit_code == 0, searched.output
    plans = out / "plans.json"
    assert json.loads(plans.read_text())["trainer_version"] == "core_v0.16.0"
    exported = run("export", str(plans), "--to", "megatron")
    assert exported.exit_code == 0, exported.output
    assert "for Megatron-LM core_v0.16.0" in exported.stdout and "--optimizer muon" in exported.stdout
    later = run("export", str(plans), "--to", "megatron", "--trainer-version", "core_v0.17.0")
    assert later.exit_code == 0 and "for Megatron-LM core_v0.17.0" in later.stdout
    assert "--trainer-version 'core_v0.17.0' overrides the 'core_v0.16.0'" in later.stderr


def test_search_export_takes_the_launcher_and_checkpoint_dir(tmp_path):
    out = tmp_path / "run"
    result = run("search", "-m", "llama3-8b", "-g", "16", "--gbs-seqs", "64", "--tp", "1,2", "--pp", "1",
                 "--export", "megatron,nanotron", "--launcher", "slurm", "--checkpoint-dir", "/ckpt/run 1",
                 "--out", str(out))
    assert result.exit_code == 0, result.output
    script = (out / "configs" / "megatron_pretrain_gpt.sh").read_text()
    assert "#SBATCH --nodes=2\n" in script and "--save '/ckpt/run 1'" in script
    nanotron = yaml.safe_load((out / "configs" / "nanotron_config.yaml").read_text())
    assert nanotron["checkpoints"]["checkpoints_path"] == "/ckpt/run 1"
    assert "#SBATCH" in (out / "configs" / "nanotron_launch.sh").read_text()
