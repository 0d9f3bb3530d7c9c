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

MODELS = ["8b", "llama3.2-1b", "70b", "405b", "mixtral", "qwen3-30b-a3b", "deepseek-v3", "gpt3",
          "usp-1b", "qwen3-8b", "llama3-8bb", ""]
HARDWARE = ["h100-sxm", "a100-80gb", "a100-40gb", "gb200", "mi300x", "h100-pcie", "b200", "h200", "h100x"]
TRAINERS = ["megatron", "torchtitan", "nanotron", "deepspeed", "hf", "jax"]
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
    assert record["mfu"] <= record["hfu"] + 1e-12


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
