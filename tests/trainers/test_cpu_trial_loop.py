"""DeepSpeed 0.19.8 really training exported configs on CPU, and the trial loop on its logs (marker
``trainers``).

Runs in the DeepSpeed environment of ``tests/trainers/setup_envs.sh`` (torch 2.13.0 CPU,
deepspeed 0.19.8, transformers 5.22.2; ``AUTOPLAN_DEEPSPEED_PYTHON``, else the cache's), with
``DS_ACCELERATOR=cpu`` and 2 gloo ranks under torchrun; skipped when that environment is missing.
The training script is ``tests/trainers/deepspeed_train.py`` (the Hugging Face model of a tiny
config.json, random tokens). The first run in a fresh ``~/.cache/torch_extensions`` compiles
DeepSpeed's CPU ops (shm comm, fused Adam, CPU Adam): minutes on a small machine; later runs
take ~15-20 s each.

* the loop: ``search --trainer deepspeed`` for 2 processes -> ``trial --top 3`` -> each run.sh
  -> ``calibrate --from-log`` and ``rerank --logs``, on the real logs (3 runs: the fewest that
  calibrate fits one parameter to). The three plans are ZeRO-3 with grad_acc 1, 4 and 8 (mbs
  8/2/1 for 16 sequences): ZeRO-3 gathers the parameters and reduce-scatters the gradients on
  every micro-batch (``stage3.py``), so on gloo the grad_acc 8 plan is measured ~2-3x slower
  than grad_acc 1 (0.42-0.46 against 0.15-0.18 s/step in 3 runs here): the measured order is
  checkable, not a coin flip.
* one export per DeepSpeed feature (ZeRO 1/2/3, optimizer offload, AutoEP) trained 4 steps.
"""

from __future__ import annotations

import json
import math
import os
import re
import statistics
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from autoplan.api import plan_from_record
from autoplan.calibration.log_import import parse_log
from autoplan.calibration.trial import trial_run
from autoplan.cli import main
from autoplan.export import LaunchOptions, render
from autoplan.specs.models import load_model

pytestmark = pytest.mark.trainers
HERE = Path(__file__).resolve().parent
TRAIN_SCRIPT = HERE / "deepspeed_train.py"
MODELS = HERE / "models"
CACHE = Path(os.environ.get("AUTOPLAN_TRAINER_ENVS", Path.home() / ".cache" / "autoplan-trainer-envs"))
SEQ_LEN = 128
TIMER = re.compile(r"global_step=(\d+),.*?CurrSamplesPerSec=([0-9.eE+-]+)")
LOSS = re.compile(r"autoplan-train step (\d+) loss (\S+)")


@pytest.fixture(scope="module")
def ds_bin() -> Path:
    """The bin folder of the DeepSpeed environment (torchrun, python), or a skip saying why."""
    python = Path(os.environ.get("AUTOPLAN_DEEPSPEED_PYTHON", CACHE / "deepspeed" / "bin" / "python"))
    if not python.exists():
        pytest.skip(f"no DeepSpeed environment at {python}: run tests/trainers/setup_envs.sh")
    done = subprocess.run([str(python), "-c", "import deepspeed, transformers"], capture_output=True, text=True,
                          timeout=300, check=False)
    if done.returncode:
        pytest.skip(f"deepspeed or transformers does not import in {python}: {done.stderr.strip().splitlines()[-1:]}")
    return python.parent


def _run(script: Path, ds_bin: Path, model: Path, port: int, timeout_s: int = 900) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": f"{ds_bin}:{os.environ['PATH']}", "DS_ACCELERATOR": "cpu", "OMP_NUM_THREADS": "1",
           "MODEL_CONFIG": str(model), "TRAIN_SCRIPT": str(TRAIN_SCRIPT), "SEQ_LEN": str(SEQ_LEN),
           "MASTER_PORT": str(port)}
    return subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=timeout_s, env=env,
                          cwd=script.parent, check=False)


def _losses(text: str) -> dict[int, float]:
    return {int(m.group(1)): float(m.group(2)) for m in LOSS.finditer(text)}


def _timer(text: str) -> dict[int, float]:
    """global step -> CurrSamplesPerSec of DeepSpeed's ThroughputTimer lines."""
    return {int(m.group(1)): float(m.group(2)) for m in TIMER.finditer(text)}


def test_trial_calibrate_rerank_on_real_deepspeed_cpu_logs(ds_bin, tmp_path):
    model = MODELS / "tiny-llama.json"
    searched = CliRunner().invoke(main, [
        "search", "-m", str(model), "-g", "2", "--gpus-per-node", "2", "--seq-len", str(SEQ_LEN), "--gbs-seqs", "16",
        "--trainer", "deepspeed", "--tp", "1", "--pp", "1", "--zero", "3", "--recompute", "none",
        "--mbs", "8,2,1", "--out", str(tmp_path / "s")])
    assert searched.exit_code == 0, searched.output
    plans = tmp_path / "s" / "plans.json"
    steps = 8  # the timer logs from global step 3 (ThroughputTimer start_step 2); trial drops 2 more
    out = tmp_path / "trial"
    trial = CliRunner().invoke(main, ["trial", str(plans), "--to", "deepspeed", "--top", "3", "--steps", str(steps),
                                      "-o", str(out)])
    assert trial.exit_code == 0, trial.output
    manifest = json.loads((out / "manifest.json").read_text())
    grad_acc = {r["rank"]: int(r["plan"]["grad_acc"]) for r in manifest["runs"]}
    assert sorted(grad_acc.values()) == [1, 4, 8]
    measured = {}
    for port, run in enumerate(manifest["runs"], start=29610):
        done = _run(out / run["script"], ds_bin, model, port)
        log = (out / run["log"]).read_text()
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        losses, timer = _losses(log), _timer(log)
        assert sorted(losses) == list(range(1, steps + 1)) and all(math.isfinite(v) for v in losses.values())
        assert sorted(timer) == list(range(3, steps + 1))
        # tokens/s per GPU = samples/s (the global batch of 16) x seq_len / 2 ranks, median after 2 warm-up lines
        measured[run["rank"]] = statistics.median(timer[s] for s in range(5, steps + 1)) * SEQ_LEN / 2
    fitted = tmp_path / "fitted.yaml"
    calibrated = CliRunner().invoke(main, ["calibrate", "--from-log", str(out), "--params", "step_overhead_s",
                                           "-o", str(fitted)])
    assert calibrated.exit_code == 0, calibrated.output + calibrated.stderr
    assert "step_overhead_s" in fitted.read_text()
    reranked = CliRunner().invoke(main, ["rerank", str(plans), "--logs", str(out), "--format", "json"])
    assert reranked.exit_code == 0, reranked.output + reranked.stderr
    rows = json.loads(reranked.stdout)["plans"]
    by_rank = {r["old_rank"]: r for r in rows}
    for rank, tokens in measured.items():
        assert by_rank[rank]["measured"] and by_rank[rank]["tokens_per_s_per_gpu"] == pytest.approx(tokens, rel=1e-6)
    fastest, slowest = min(grad_acc, key=grad_acc.get), max(grad_acc, key=grad_acc.get)
    assert measured[fastest] > 1.5 * measured[slowest], measured  # 8 gathers and reduce-scatters a step against 1
    new_order = [r["old_rank"] for r in sorted(rows, key=lambda r: r["new_rank"]) if r["measured"]]
    assert new_order == sorted(measured, key=measured.get, reverse=True)


# A 2-process proxy of each plan (dp 2, 4 sequences a step: dp 2 x mbs 1 x grad_acc 2) and the
# lines DeepSpeed prints when the feature is on: its config print (runtime/config.py print) and
# the engine's choices (engine.py _configure_basic_optimizer, _configure_expert_parallel).
FEATURES = {
    "zero1": ("tiny-llama.json", {"zero": 1}, ["zero_config .................. stage=1 "]),
    "zero2": ("tiny-llama.json", {"zero": 2}, ["zero_config .................. stage=2 "]),
    "zero3": ("tiny-llama.json", {"zero": 3}, ["zero_config .................. stage=3 ", "stage3.py"]),
    "offload_optimizer": ("tiny-llama.json", {"zero": 2, "offload": "optimizer"},
                          ["offload_optimizer=DeepSpeedZeroOffloadOptimizerConfig(device='cpu'",
                           "DeepSpeed Basic Optimizer = DeepSpeedCPUAdam"]),
    "autoep": ("tiny-mixtral.json", {"zero": 1, "ep": 2}, ["AutoEP: replaced 2 MoE layer(s) with ep_size=2"]),
}


@pytest.mark.parametrize("name", list(FEATURES))
def test_deepspeed_trains_the_export_on_cpu(name, ds_bin, tmp_path):
    model_file, knobs, engaged = FEATURES[name]
    steps = 4
    layout, training = plan_from_record({"gpus": 2, "mbs": 1, "seq_len": SEQ_LEN, "gbs_seqs": 4, **knobs})
    result = render("deepspeed", load_model(MODELS / model_file), layout, training,
                    LaunchOptions(train_steps=steps, warmup_steps=1))
    for file, text in result.files.items():
        (tmp_path / file).write_text(text)
    trial_run("deepspeed").logging_on(tmp_path)
    config = json.loads((tmp_path / "deepspeed_config.json").read_text())
    assert config["zero_optimization"]["stage"] == knobs["zero"]
    done = _run(tmp_path / "deepspeed_launch.sh", ds_bin, MODELS / model_file, 29620 + list(FEATURES).index(name))
    text = done.stdout + done.stderr
    assert done.returncode == 0, text[-5000:]
    assert all(line in text for line in engaged), [line for line in engaged if line not in text]
    losses = _losses(text)
    assert sorted(losses) == list(range(1, steps + 1)) and all(math.isfinite(v) for v in losses.values())
    (tmp_path / "train.log").write_text(text)
    summary = parse_log(tmp_path / "train.log", "deepspeed", gpus=2, seq_len=SEQ_LEN, gbs_seqs=4, skip_steps=0)
    assert [e.step for e in summary.used] == [3, 4] and summary.tokens_per_s_per_gpu > 0

