"""Launch scripts: every trainer × launcher parses (bash -n), and the Slurm script, run with a fake
srun/torchrun/scontrol on PATH, starts the trainer's entry point on the plan's nodes."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from autoplan.api import plan_from_record
from autoplan.export import TRAINERS, LaunchOptions, render, write_files
from autoplan.export.launch import LAUNCHERS, required, required_lines
from autoplan.specs.models import load_model

BASH = shutil.which("bash")
pytestmark = pytest.mark.skipif(BASH is None, reason="needs bash")
# 16 H100s, 8 per node: 16/8 = 2 nodes of 8 processes; tp 2 (zero 3 for torchtitan's FSDP2)
RECORD = dict(gpus=16, tp=2, seq_len=4096, gbs_seqs=64)
# trainer -> (its launch script, what torchrun must run: the entry point and its config)
ENTRIES = {
    "megatron": ("megatron_pretrain_gpt.sh", ["/opt/mlm/pretrain_gpt.py", "--tensor-model-parallel-size", "2"]),
    "megatron-bridge": ("megatron_bridge_pretrain.sh", ["/opt/mb/scripts/training/run_recipe.py", "--recipe",
                                                        "llama3_8b_pretrain_config", "model.tensor_model_parallel_size=2"]),
    "torchtitan": ("torchtitan_launch.sh", ["-m", "torchtitan.train", "--module", "torchtitan_autoplan",
                                            "--config", "autoplan_config"]),
    "nanotron": ("nanotron_launch.sh", ["/opt/nanotron/run_train.py", "--config-file"]),
    "deepspeed": ("deepspeed_launch.sh", ["/opt/mds/pretrain_gpt.py", "--deepspeed_config",
                                          "deepspeed_config.json"]),
}
ENV = {"MEGATRON_LM": "/opt/mlm", "MEGATRON_BRIDGE": "/opt/mb", "NANOTRON": "/opt/nanotron", "MEGATRON_DEEPSPEED": "/opt/mds",
       "DATA_PATH": "/data/corpus_text_document", "TOKENIZER": "/models/tok", "CHECKPOINT_DIR": "/ckpt/run"}


def _files(trainer: str, launcher: str, **launch) -> dict[str, str]:
    layout, training = plan_from_record({**RECORD, "zero": 3 if trainer == "torchtitan" else 1})
    return render(trainer, load_model("llama3-8b"), layout, training,
                  LaunchOptions(launcher=launcher, **launch)).files


@pytest.mark.parametrize("launcher", LAUNCHERS)
@pytest.mark.parametrize("trainer", TRAINERS)
def test_every_script_parses(trainer, launcher, tmp_path):
    scripts = [path for path in write_files(_files(trainer, launcher), tmp_path) if path.suffix == ".sh"]
    assert [p.name for p in scripts] == [ENTRIES[trainer][0]]
    for path in scripts:
        result = subprocess.run([BASH, "-n", str(path)], capture_output=True, text=True)
        assert result.returncode == 0, result.stderr
        assert ("#SBATCH --nodes=2\n#SBATCH --ntasks-per-node=1\n#SBATCH --gpus-per-node=8\n" in path.read_text()) \
            == (launcher == "slurm")


def _fake_tools(folder: Path) -> Path:
    """srun logs its words and runs what follows its 4 option words; torchrun and scontrol log or
    print two node names."""
    folder.mkdir()
    tools = {"srun": 'echo "srun $*" >> "$LAUNCH_LOG"; shift 4; exec "$@"',
             "torchrun": 'for w in "$@"; do echo "$w"; done > "$LAUNCH_LOG.torchrun"',
             "scontrol": 'echo node-a; echo node-b'}
    for name, body in tools.items():
        path = folder / name
        path.write_text(f"#!{BASH}\n{body}\n")
        path.chmod(0o755)
    return folder


def _run_slurm(trainer: str, tmp_path: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    out = tmp_path / "export"
    write_files(_files(trainer, "slurm"), out)
    bin_dir = _fake_tools(tmp_path / "bin")
    full = {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "SLURM_JOB_NODELIST": "node-[a-b]",
            "SLURM_JOB_ID": "77", "LAUNCH_LOG": str(tmp_path / "log"), "EXPORT_DIR": str(out),
            "TMPDIR": str(tmp_path), **env}
    return subprocess.run([BASH, str(out / ENTRIES[trainer][0])], capture_output=True, text=True, env=full,
                          cwd=out)


@pytest.mark.parametrize("trainer", TRAINERS)
def test_the_slurm_script_starts_torchrun_on_every_node(trainer, tmp_path):
    result = _run_slurm(trainer, tmp_path, ENV)
    assert result.returncode == 0, result.stderr
    srun = (tmp_path / "log").read_text().split()
    assert srun[:5] == ["srun", "--nodes", "2", "--ntasks-per-node", "1"] and srun[5] == "torchrun"
    words = (tmp_path / "log.torchrun").read_text().split("\n")
    assert words[:10] == ["--nnodes", "2", "--nproc-per-node", "8", "--rdzv-id", "77", "--rdzv-backend", "c10d",
                          "--rdzv-endpoint", "node-a:29500"]
    entry = ENTRIES[trainer][1]
    start = words.index(entry[0])
    assert all(word in words[start:] for word in entry), (entry, words[start:])
    if trainer == "nanotron":  # a copy of the exported config with DATA_PATH written in
        filled = yaml.safe_load(Path(words[words.index("--config-file") + 1]).read_text())
        exported = yaml.safe_load((tmp_path / "export" / "nanotron_config.yaml").read_text())
        assert filled["data_stages"][0]["data"]["dataset"]["hf_dataset_or_datasets"] == ENV["DATA_PATH"]
        assert filled["checkpoints"]["checkpoints_path"] == ENV["CHECKPOINT_DIR"]
        assert filled["parallelism"] == exported["parallelism"] and filled["tokens"] == exported["tokens"]


@pytest.mark.parametrize("trainer", TRAINERS)
def test_an_unset_data_path_stops_the_script_before_the_launch(trainer, tmp_path):
    env = {k: v for k, v in ENV.items() if k != "DATA_PATH"}
    result = _run_slurm(trainer, tmp_path, env)
    assert result.returncode != 0 and "set DATA_PATH to" in result.stderr
    assert not (tmp_path / "log").exists()


def test_megatron_trains_on_the_given_data_or_on_mock_data_only_when_asked():
    script = _files("megatron", "torchrun")["megatron_pretrain_gpt.sh"]
    assert "    --mock-data\n" not in script and "NullTokenizer" not in script and "--data-path $DATA_PATH" in script
    mock = _files("megatron", "torchrun", mock_data=True)["megatron_pretrain_gpt.sh"]
    assert "    --mock-data\n" in mock and "NullTokenizer" in mock and "DATA_PATH" not in mock
    given = _files("megatron", "torchrun", data_path="/d/text", tokenizer="meta-llama/Llama-3.1-8B")
    text = given["megatron_pretrain_gpt.sh"]
    assert "--data-path /d/text" in text and "--tokenizer-model meta-llama/Llama-3.1-8B" in text
    assert "${DATA_PATH" not in text and "${TOKENIZER" not in text


def test_nanotron_trains_on_dummy_data_only_when_asked():
    """dataset null is nanotron's dummy data generator: written with --mock-data only."""
    def dataset(**launch):
        text = _files("nanotron", "torchrun", **launch)["nanotron_config.yaml"]
        return yaml.safe_load(text)["data_stages"][0]["data"]["dataset"]

    assert dataset(mock_data=True) is None
    assert dataset(data_path="HuggingFaceFW/fineweb")["hf_dataset_or_datasets"] == "HuggingFaceFW/fineweb"
    assert dataset()["hf_dataset_or_datasets"] == "set-DATA_PATH"  # the launch script fills in DATA_PATH
    assert "set DATA_PATH to" not in _files("nanotron", "torchrun", data_path="d")["nanotron_launch.sh"]


def test_torchtitan_names_a_registered_data_set_and_its_path():
    """torchtitan's dataset must be a registered name (hf_datasets DATASETS: c4, c4_test, ...);
    a local copy goes in dataset_path."""
    files = _files("torchtitan", "torchrun", data_path="/data/c4", tokenizer="/tok")
    assert "HuggingFaceTextDataLoader.Config(dataset='c4', dataset_path='/data/c4')" in files["torchtitan_autoplan.py"]
    assert 'dataset = "c4"\ndataset_path = "/data/c4"\n' in files["torchtitan_job.toml"]
    assert "hf_assets_path='/tok'" in files["torchtitan_autoplan.py"] and "_required" not in files["torchtitan_autoplan.py"]
    unset = _files("torchtitan", "torchrun")["torchtitan_autoplan.py"]
    assert "dataset_path=_required('DATA_PATH')" in unset and "hf_assets_path=_required('TOKENIZER')" in unset
    assert "dataset='c4_test'" in _files("torchtitan", "torchrun", mock_data=True)["torchtitan_autoplan.py"]


def test_a_dropless_plan_is_dropless_in_megatron_deepspeed():
    """Megatron-DeepSpeed's MoE drops tokens by default (--moe-train-capacity-factor 1.0,
    moe_token_dropping True, megatron/arguments.py); a plan without a capacity factor is dropless."""
    layout, training = plan_from_record(dict(gpus=16, tp=2, ep=8, seq_len=4096, gbs_seqs=64, zero=1))
    assert training.moe_capacity_factor is None
    script = render("deepspeed", load_model("mixtral-8x7b"), layout, training).files["deepspeed_launch.sh"]
    assert "--disable-moe-token-dropping" in script
    dense = render("deepspeed", load_model("llama3-8b"), *plan_from_record(RECORD | {"zero": 1}))
    assert "moe-token-dropping" not in dense.files["deepspeed_launch.sh"]


def test_every_trainer_saves_in_the_checkpoint_dir():
    """--checkpoint-dir: Megatron-LM / Megatron-DeepSpeed --save/--load/--save-interval
    (arguments.py), torchtitan CheckpointManager.Config(enable, folder, interval) and 0.2.2's
    [checkpoint], nanotron checkpoints.checkpoints_path, plain DeepSpeed CHECKPOINT_DIR for its
    script; every run saves every --train-steps (1000) steps."""
    ckpt = "/ckpt/run"
    megatron = _files("megatron", "torchrun", checkpoint_dir=ckpt)["megatron_pretrain_gpt.sh"]
    assert "--save /ckpt/run" in megatron and "--load /ckpt/run" in megatron and "--save-interval 1000" in megatron
    titan = _files("torchtitan", "torchrun", checkpoint_dir=ckpt)
    assert ("checkpoint=CheckpointManager.Config(enable=True, folder='/ckpt/run', interval=1000)"
            in titan["torchtitan_autoplan.py"])
    assert '[checkpoint]\nenable = true\nfolder = "/ckpt/run"\ninterval = 1000\n' in titan["torchtitan_job.toml"]
    nanotron = yaml.safe_load(_files("nanotron", "torchrun", checkpoint_dir=ckpt)["nanotron_config.yaml"])
    assert nanotron["checkpoints"]["checkpoints_path"] == ckpt
    mds = _files("deepspeed", "torchrun", checkpoint_dir=ckpt)["deepspeed_launch.sh"]  # tp 2: Megatron-DeepSpeed
    assert "--save /ckpt/run" in mds and "--save-interval 1000" in mds
    layout, training = plan_from_record({**RECORD, "tp": 1, "zero": 1})
    plain = render("deepspeed", load_model("llama3-8b"), layout, training, LaunchOptions(checkpoint_dir=ckpt))
    assert 'CHECKPOINT_DIR="${CHECKPOINT_DIR:-/ckpt/run}"\nexport CHECKPOINT_DIR\n' in plain.files["deepspeed_launch.sh"]


@pytest.mark.parametrize("trainer", ["megatron", "torchtitan", "deepspeed"])
def test_without_a_checkpoint_dir_nothing_saved_is_a_warning(trainer):
    layout, training = plan_from_record({**RECORD, "zero": 3 if trainer == "torchtitan" else 1})
    result = render(trainer, load_model("llama3-8b"), layout, training)
    assert any(w.startswith("no --checkpoint-dir:") for w in result.warnings)


def test_nanotron_without_a_checkpoint_dir_requires_one_at_launch(tmp_path):
    """nanotron needs checkpoints_path (CheckpointsArgs): the script stops without CHECKPOINT_DIR."""
    config = yaml.safe_load(_files("nanotron", "torchrun")["nanotron_config.yaml"])
    assert config["checkpoints"]["checkpoints_path"] == "set-CHECKPOINT_DIR"
    result = _run_slurm("nanotron", tmp_path, {k: v for k, v in ENV.items() if k != "CHECKPOINT_DIR"})
    assert result.returncode != 0 and "set CHECKPOINT_DIR to" in result.stderr


def test_required_lines_are_those_required_writes_without_a_value():
    script = (required("DATA_PATH", "your corpus") + required("TOKENIZER", "x", given="/tok")
              + 'EXTRA="${DATA_PATH:?not written by required}"\n' + "echo hi\n")
    assert required_lines(script) == ['DATA_PATH="${DATA_PATH:?set DATA_PATH to your corpus}"']
