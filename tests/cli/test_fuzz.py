"""A seeded fuzz of `autoplan estimate` / `explain` option combinations.

Each seed draws 100 command lines mixing plausible layouts (powers of two, real presets) with
bad values (0, negatives, fractions, 1e30, words, unknown names). Every run must end without a
traceback, with exit code 0, 1 or 2; a run that exits 0 with --format json must give finite
predictions and a consistent fits/infeasible_reason pair. A failure prints the command line.
"""

from __future__ import annotations

import json
import math
import random

import pytest
from click.testing import CliRunner

from autoplan.cli import main
from autoplan.profiles import list_trainers

MODELS = ["8b", "llama3.2-1b", "70b", "405b", "mixtral", "qwen3-30b-a3b", "deepseek-v3", "gpt3",
          "usp-1b", "qwen3-8b", "llama3-8bb", ""]
HARDWARE = ["h100-sxm", "a100-80gb", "a100-40gb", "gb200", "mi300x", "h100-pcie", "b200", "h200", "h100x"]
TRAINERS = [*list_trainers(), "jax"]  # and one autoplan does not know
BAD_NUMBERS = ["0", "-1", "1.5", "1e30", "x", "", "99999999999", "3"]
SEEDS = [0, 1, 2, 3]
RUNS_PER_SEED = 100


def _power_of_two(rng: random.Random, top: int) -> str:
    return str(2 ** rng.randint(0, top))


def _maybe_bad(rng: random.Random, good: str, p_bad: float = 0.07) -> str:
    return rng.choice(BAD_NUMBERS) if rng.random() < p_bad else good


def random_command(rng: random.Random) -> list[str]:
    tp, pp, cp, dp = (2 ** rng.randint(0, 3), 2 ** rng.randint(0, 3), 2 ** rng.randint(0, 1),
                      2 ** rng.randint(0, 4))
    gpus = tp * pp * cp * dp if rng.random() < 0.85 else rng.choice([8, 12, 16, 24, 7, 1024])
    mbs = 2 ** rng.randint(0, 2)
    args = [rng.choice(["estimate"] * 4 + ["explain"]),
            "--model", rng.choice(MODELS) if rng.random() < 0.1 else rng.choice(MODELS[:-2]),
            "--gpus", _maybe_bad(rng, str(gpus)), "--tp", _maybe_bad(rng, str(tp)),
            "--pp", _maybe_bad(rng, str(pp)), "--cp", _maybe_bad(rng, str(cp))]
    batch = rng.random()
    if batch < 0.6:
        args += ["--gbs-seqs", _maybe_bad(rng, str(dp * mbs * 2 ** rng.randint(0, 4)))]
    elif batch < 0.9:
        args += ["--gbs-tokens", rng.choice(["1M", "4M", "16M", "2M", "4e6", "0", "1e30", "4Q"])]
    elif batch < 0.95:
        args += ["--gbs-seqs", "64", "--gbs-tokens", "4M"]
    if rng.random() < 0.5:
        args += ["--mbs", _maybe_bad(rng, str(mbs))]
    for option, value in (("--vpp", _power_of_two(rng, 2)), ("--ep", _power_of_two(rng, 3)),
                          ("--etp", _power_of_two(rng, 1)), ("--zero", str(rng.randint(0, 3))),
                          ("--seq-len", _power_of_two(rng, 15)), ("--dp", str(dp)),
                          ("--grad-acc", _power_of_two(rng, 4))):
        if rng.random() < 0.2:
            args += [option, _maybe_bad(rng, value)]
    if rng.random() < 0.4:
        args += ["--hardware", rng.choice(HARDWARE)]
    if rng.random() < 0.4:
        args += ["--trainer", rng.choice(TRAINERS)]
    if rng.random() < 0.4:
        args += ["--recompute", rng.choice(["none", "selective", "full", "all"])]
    if rng.random() < 0.2:
        args += ["--precision", rng.choice(["bf16", "fp8", "fp4"])]
    if rng.random() < 0.15:
        args += [rng.choice(["--sp", "--no-sp"])]
    if rng.random() < 0.2:
        args += ["--placement", rng.choice(["tp-cp-dp-pp", "tp-dp-cp-pp", "tp-pp-cp-dp", "cp-tp-dp-pp"])]
    if rng.random() < 0.15:
        args += ["--flops-convention", rng.choice(["playbook", "causal", "megatron"])]
    if rng.random() < 0.1:
        args += ["--gpus-per-node", rng.choice(["4", "8", "0", "72"])]
    if rng.random() < 0.1:
        args += ["--nic", rng.choice(["400 Gb/s", "200 Gbps", "50 GB/s", "400", "fast"])]
    args += ["--format", rng.choice(["json", "json", "table", "csv"])]
    return args


def _check_json(args: list[str], stdout: str) -> None:
    payload = json.loads(stdout)
    if args[0] == "explain":
        values = [row["value"] for row in payload["terms"]]
        assert all(isinstance(v, (int, float)) and math.isfinite(v) for v in values)
        return
    (record,) = payload
    for key in ("peak_memory_bytes", "step_time_s", "tokens_per_s_per_gpu", "mfu", "hfu",
                "bubble_fraction"):
        value = record[key]
        assert isinstance(value, (int, float)) and math.isfinite(value) and value >= 0, (key, value)
    assert record["fits"] == (record["infeasible_reason"] == ""), record["infeasible_reason"]
    # (HFU is not bounded below by MFU: it counts causal attention as run, see docs/conventions.md)


@pytest.mark.parametrize("seed", SEEDS)
def test_estimate_fuzz(seed, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a bad --model text must not find files of the repository
    monkeypatch.delenv("AUTOPLAN_DEBUG", raising=False)
    rng = random.Random(seed)
    runner = CliRunner()
    codes: dict[int, int] = {}
    for _ in range(RUNS_PER_SEED):
        args = random_command(rng)
        result = runner.invoke(main, args)
        shown = "autoplan " + " ".join(repr(a) if not a or " " in a else a for a in args)
        everything = result.output + result.stderr
        assert "Traceback" not in everything, shown
        assert result.exception is None or isinstance(result.exception, SystemExit), (shown, result.exception)
        assert result.exit_code in (0, 1, 2), (shown, result.exit_code, result.stderr)
        codes[result.exit_code] = codes.get(result.exit_code, 0) + 1
        if result.exit_code:
            assert result.stderr.strip().splitlines()[-1].startswith("Error:"), (shown, result.stderr)
        elif "json" in args[-1:]:
            _check_json(args, result.stdout)
    # the generator must reach both outcomes (evaluated: 0 fits, 1 does not; refused: 2), or
    # the fuzz tests nothing
    assert codes.get(0, 0) + codes.get(1, 0) >= 5 and codes.get(2, 0) >= 5, codes


# --- every command: options and files drawn from good, bad and hostile values --------

HOSTILE = ["", "-1", "0", "1e30", "9" * 60, "x\x1b[31m", "a\nb", "\ud800", "nan", "inf", "m" * 300, "8,", ",", "1,,2"]
FILES = {  # name -> content (str, bytes); FIFO and the link to /dev/zero are made by the fixture
    "model.json": json.dumps(dict(model_type="llama", num_hidden_layers=2, hidden_size=256, intermediate_size=512,
                                  num_attention_heads=4, vocab_size=1000)),
    "dup.json": '{"model_type": "llama", "model_type": "gpt2"}',
    "alias.yaml": "a: &a [1, 2]\nb: *a\n",
    "binary.yaml": b"\xff\xfe\x00garbage",
    "empty.yaml": "",
    "tiny_space.yaml": "tp: [1, 2]\npp: [1, 2]\nmbs: [1]\nrecompute: [none, full]\n",
    "plans.json": json.dumps({"model": "llama3.2-1b", "plans": [
        {"rank": 1, "gpus": 8, "tp": 1, "pp": 1, "dp": 8, "mbs": 1, "gbs_seqs": 8, "seq_len": 4096}]}),
    "deep.json": '{"plans": ' + "[" * 3000 + "]" * 3000 + "}",
    "layouts.csv": "tp,pp,gpus,gbs_seqs\n1,1,8,8\n2,1,8,8\n",
    "bom.csv": "\ufefftp,pp,gpus,gbs_seqs\n1,1,8,8\n",
    "extra.csv": "tp,pp,gpus,gbs_seqs\n1,1,8,8,9\n",
    "measured.csv": "gpus,tp,gbs_seqs,tokens_per_s_per_gpu\n8,1,64,9000\n8,2,64,8500\n8,4,64,8000\n",
    "train.log": "iteration 10/100 | elapsed time per iteration (ms): 1000.0 | global batch size: 8 |\n" * 5,
}
SPECIAL = ["fifo.yaml", "zero.yaml", "nowhere.json", "."]
TINY = ["--tp", "1,2", "--pp", "1", "--mbs", "1", "--recompute", "none", "--precision", "bf16"]


def _value(rng: random.Random, good: list[str], p_bad: float = 0.15) -> str:
    return rng.choice(HOSTILE) if rng.random() < p_bad else rng.choice(good)


def _file(rng: random.Random, good: list[str]) -> str:
    return rng.choice(list(FILES) + SPECIAL) if rng.random() < 0.3 else rng.choice(good)


def _setup(rng: random.Random) -> list[str]:
    model = _value(rng, ["llama3.2-1b", "8b", "model.json"]) if rng.random() < 0.9 else rng.choice(list(FILES) + SPECIAL)
    args = ["-m", model,
            "-g", _value(rng, ["8", "16"]), "--gbs-seqs", _value(rng, ["8", "16", "64"])]
    for option, good in (("--nic", ["400 Gb/s", "50 GB/s per direction", "400 Gb/s lol"]),
                         ("--hardware", ["h100-sxm", "a100-80gb", "model.json", "alias.yaml"]),
                         ("--seq-len", ["2048", "4096"]), ("--gpus-per-node", ["4", "8"]),
                         ("--trainer", ["megatron", "torchtitan", "hf"]), ("--profile", ["dup.json", "zero.yaml"])):
        if rng.random() < 0.1:
            args += [option, _value(rng, good)]
    return args


def _search(rng: random.Random) -> list[str]:
    args = ["search", *_setup(rng), "--out", "out", "--format", rng.choice(["json", "csv", "table"])]
    args += ["--space", _file(rng, ["tiny_space.yaml"])] if rng.random() < 0.5 else TINY
    args += ["--sampler", rng.choice(["exhaustive", "random", "tpe"]), "--trials", _value(rng, ["3", "5"]),
             "--seed", _value(rng, ["0", "4294967295", "4294967296", "-1"])]
    return args + (["--top", _value(rng, ["1", "3"])] if rng.random() < 0.3 else [])


def _calibrate(rng: random.Random) -> list[str]:
    if rng.random() < 0.5:
        return ["calibrate", "--from-log", _file(rng, ["train.log"]), "--log-format", "megatron", "-m", "8b",
                "--layout", _value(rng, ["gpus=8,gbs_seqs=8", "gpus=8,tp=2,gbs_seqs=8"])]
    return ["calibrate", _file(rng, ["measured.csv", "bom.csv"]), "-m", "8b", "--params", "gemm_efficiency_max",
            "--starts", "1", "--folds", "2", "--max-evals", "20", "--seed", _value(rng, ["0", "7"]), "-o", "cal.yaml"]


COMMANDS = {
    "models": lambda rng: ["models", "--format", rng.choice(["table", "json", "csv", "xml"])],
    "hardware": lambda rng: ["hardware", "--format", rng.choice(["table", "json", "csv"])],
    "trainers": lambda rng: ["trainers", "--format", rng.choice(["table", "json", "csv"])],
    "estimate": lambda rng: ["estimate", *_setup(rng), "--tp", _value(rng, ["1", "2"]), "--format", "json"],
    "explain": lambda rng: ["explain", *_setup(rng), "--pp", _value(rng, ["1", "2"]), "--format", "csv"],
    "compare": lambda rng: ["compare", _file(rng, ["layouts.csv", "bom.csv"]), "-m", _value(rng, ["8b", "model.json"]),
                            *(["--nic", _value(rng, ["400 Gb/s"])] if rng.random() < 0.2 else [])],
    "search": _search,
    "export": lambda rng: (["export", _file(rng, ["plans.json", "deep.json"]), "--to", "megatron",
                            "--rank", _value(rng, ["1", "2"])] if rng.random() < 0.6 else
                           ["export", "--to", rng.choice(["torchtitan", "nanotron", "deepspeed"]), *_setup(rng)]),
    "calibrate": _calibrate,
}


def run_limited(runner: CliRunner, args: list[str], seconds: int):
    """One invocation; SIGALRM turns a hang into a failure naming the command line."""
    import signal

    def hang(*_):
        raise TimeoutError(f"ran over {seconds} s")

    if not hasattr(signal, "SIGALRM"):  # Windows: no alarm, no limit
        return runner.invoke(main, args)
    previous = signal.signal(signal.SIGALRM, hang)
    signal.alarm(seconds)
    try:
        return runner.invoke(main, args)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@pytest.fixture
def fuzz_folder(tmp_path, monkeypatch):
    import os

    for name, content in FILES.items():
        (tmp_path / name).write_bytes(content if isinstance(content, bytes) else content.encode())
    if hasattr(os, "mkfifo"):
        os.mkfifo(tmp_path / "fifo.yaml")
    if os.path.exists("/dev/zero"):
        (tmp_path / "zero.yaml").symlink_to("/dev/zero")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("AUTOPLAN_DEBUG", raising=False)
    return tmp_path


def fuzz_commands(seed: int, runs: int, commands: dict, seconds: int = 30) -> dict[str, set[int]]:
    rng = random.Random(seed)
    runner = CliRunner()
    codes: dict[str, set[int]] = {}
    for _ in range(runs):
        name = rng.choice(sorted(commands))
        args = commands[name](rng)
        shown = "autoplan " + " ".join(repr(a) if not a.isprintable() or " " in a or not a else a for a in args)
        result = run_limited(runner, args, seconds)
        everything = result.output + result.stderr
        assert not isinstance(result.exception, TimeoutError), shown
        assert "Traceback" not in everything and "Internal error" not in everything, (shown, everything[-500:])
        assert result.exception is None or isinstance(result.exception, SystemExit), (shown, result.exception)
        assert result.exit_code in (0, 1, 2), (shown, result.exit_code, result.stderr)
        if result.exit_code:
            last = result.stderr.strip().splitlines()[-1]
            assert last.startswith("Error:") and last.isprintable(), (shown, result.stderr)
        codes.setdefault(name, set()).add(result.exit_code)
    return codes


def test_every_command_fuzz(fuzz_folder):
    codes = fuzz_commands(seed=0, runs=len(COMMANDS) * 10, commands=COMMANDS)
    assert set(codes) == set(COMMANDS), codes  # every command was drawn
    for name in ("estimate", "compare", "search", "export", "calibrate"):
        assert 0 in codes[name] and 2 in codes[name], (name, codes)  # and reached both outcomes


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(1, 6))
def test_every_command_fuzz_long(fuzz_folder, seed):
    commands = {**COMMANDS, "validate": lambda rng: ["validate", "--quick", "--seed", _value(rng, ["0", "1"])]}
    fuzz_commands(seed=seed, runs=300, commands=commands, seconds=120)
