"""Write ``evaluate_reference.npz``: ``evaluate()``'s columns for a few hundred random layouts of
several contexts, the expected values of ``tests/unit/cost/test_evaluate_reference.py``.

The file was first written by the cost model of main at c045a1b, before the fixed cost of one
evaluate() was cut (issue 43, item 7), so that the test checked that refactor against the code
before it, not against itself; it was rewritten by the merges that were meant to move
predictions (the CP-window rule of fp8-attn, the host-dispatch term, torchtitan's allgather CP exchange), each checked first against
its own branch's values. To write it from the code before a refactor:

    git worktree add /tmp/before c045a1b && PYTHONPATH=/tmp/before \\
        python tests/unit/cost/reference/make_evaluate_reference.py

Rerun it (from the commit that is meant to move predictions) only when a change is meant to
alter what evaluate() returns, and say so in that commit.
"""

from __future__ import annotations

import json
import pathlib
import subprocess

import numpy as np

from autoplan.api import build_context, build_training
from autoplan.cost.evaluate import evaluate
from autoplan.layout import FIELDS, LayoutBatch
from autoplan.space import indices_to_values, layouts_from_values, load_space

OUT = pathlib.Path(__file__).with_name("evaluate_reference.npz")
# Every knob over several values (tests/unit/cost/test_broadcast.py's WIDE, wider pp and tp).
WIDE = dict(tp=(1, 2, 4, 8), pp=(1, 2, 3, 4, 8), vpp=(1, 2, 3), cp=(1, 2), zero=(0, 1, 2, 3), mbs=(1, 2, 3),
            recompute=("none", "selective", "full"), precision=("bf16", "fp8"),
            placement=("tp-cp-dp-pp", "tp-pp-cp-dp"), recompute_layers=(0, 1), offload_layers=(0, 1),
            hsdp=(0, 2), pp_schedule=("default", "1f1b", "afab", "zb-v", "dualpipe", "dualpipev"),
            pp_split=("balanced", "embed-loss"), optimizer=("adamw", "adafactor", "muon"),
            offload=("none", "optimizer", "params"), recompute_modules=("", "core_attn,mlp"))
# (model, gpus, seq_len, gbs_seqs, trainer, space, TrainingSpec settings)
CASES = [
    ("70b", 512, 8192, 512, "megatron", "default", {}),  # benchmarks/speed.py's context
    ("llama3-8b", 64, 4096, 1024, "megatron", "default", {"grad_reduce_in_bf16": True}),
    ("llama3.2-1b", 64, 4096, 512, "nanotron", "default", {}),
    ("qwen3-8b", 128, 4096, 1024, "deepspeed", "default", {}),
    ("llama2-7b", 32, 4096, 512, "hf", "default", {}),
    ("mixtral-8x7b", 128, 4096, 1024, "torchtitan", "moe", {}),
    ("deepseek-v3", 1024, 4096, 2048, "megatron", "moe", {}),
]
DRAWS = 100  # random layouts drawn per case and space (those whose dp is whole are kept)


def case_batch(case: tuple, seed: int):
    """The context of ``case`` and its random layouts: of the case's space as it is (mostly legal
    ones) and of it widened to every knob (WIDE: mostly ones that break a rule)."""
    model, gpus, seq_len, gbs, trainer, space, settings = case
    training = build_training(gpus, seq_len, gbs, **settings)
    ctx = build_context(model, training, trainer=trainer)
    rng, parts = np.random.default_rng(seed), []
    for values in (load_space(space), load_space(space).with_overrides(**WIDE)):
        index = rng.integers(0, values.size, DRAWS)
        parts.append(layouts_from_values(indices_to_values(values, index), training)[0])
    return ctx, LayoutBatch({name: np.concatenate([getattr(b, name) for b in parts]) for name in FIELDS})


def main() -> None:
    out: dict[str, np.ndarray] = {}
    for i, case in enumerate(CASES):
        ctx, batch = case_batch(case, seed=i)
        columns = evaluate(ctx, batch).columns
        for k in range(len(batch)):  # the same numbers layout by layout (a batch of one)
            one = evaluate(ctx, batch.take(np.array([k]))).columns
            for name, values in columns.items():
                np.testing.assert_array_equal(one[name], values[k:k + 1], err_msg=f"case {i} row {k} {name}")
        for name in FIELDS:
            out[f"{i}/layout/{name}"] = getattr(batch, name)
        for name, values in columns.items():
            out[f"{i}/column/{name}"] = np.asarray(values, dtype=np.float64)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=pathlib.Path(__file__).parent).stdout.strip()
    out["meta"] = np.array(json.dumps({"commit": commit, "cases": CASES}))
    np.savez_compressed(OUT, **out)


if __name__ == "__main__":
    main()
