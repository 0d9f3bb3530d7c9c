"""What dropless routing costs a MoE run, measured against predicted: Megatron-Bridge's token-drop
runs (25.09) beside the dropless runs of the same layout (25.11 on), both predicted by the
leave-one-source-out fold that never saw a Megatron-Bridge row.

Dropless routing waits on the host for the tokens per expert in every MoE layer's forward
(``cost.host_dispatch``: Megatron-Core ``MoEAlltoAllTokenDispatcher._maybe_dtoh_and_synchronize``);
capacity-factor routing (token drop, ``TrainingSpec.moe_capacity_factor``) does not. The ratio
dropless / token-drop of the measured tokens/s isolates that cost from everything the two runs
share; the same ratio of the predictions says how much of it the cost model holds.

The 25.09 rows are not rows of the source (``megatron_bridge_source``: the 25.09 tables have no
precision column); here each is read as its first cell value, beside the dropless rows of the same
GPU and layout that sync (not under a full-iteration CUDA graph, which holds none). Containers differ between the two (25.09 against 25.11-26.06), so a ratio also
carries what changed between those releases: at 2026-12-03 (stored folds of af091ae) the measured
ratio is 1.15-1.36 on five layouts (later dropless releases faster) and 0.50-0.80 on the three with
16 local experts at ep 8 (Qwen3-30B-A3B on B200 and H100, Qwen3-235B-A22B on B200), where the
predicted ratio is 0.90-1.00; the token-drop prediction of Qwen3-30B-A3B on B200 is 18,912 against
18,066 measured. The dropless runs of 16 local experts are then the ones the cost model
over-predicts most (+50..+142%, ``benchmarks/loso_rows.py``), and what they lose is not isolated:
the H100 row is one whose recipe is not known (``recipe_match`` none).

    python benchmarks/moe_sync_penalty.py

A benchmark that prints figures, not a test.
"""

from __future__ import annotations

import sys
from dataclasses import replace

import numpy as np

from autoplan.calibration.band_fit import fingerprint
from autoplan.calibration.fit import prepare
from autoplan.calibration.loso import fold_factory, stored_folds
from autoplan.calibration.megatron_bridge_source import MEGATRON_BRIDGE_FILE, SOURCE, SYSTEM_HARDWARE
from autoplan.calibration.sources import load_sources
from autoplan.cost.evaluate import evaluate
from autoplan.calibration.validation import read_csv

TOKEN_DROP_MODELS = {"Qwen3_30B_a3B (tokendrop)": "qwen3-30b-a3b", "Qwen3_235B_a22B (tokendrop)": "qwen3-235b-a22b",
                     "DeepSeekV3 (tokendrop)": "deepseek-v3"}
# Layout knob -> the summaries' column; the knobs a dropless row must share with a token-drop run.
LAYOUT_COLUMNS = {"gpus": "num_gpus", "tp": "tp", "pp": "pp", "vpp": "vp", "ep": "ep", "mbs": "mbs"}
SAME_LAYOUT = tuple(LAYOUT_COLUMNS)
CAPACITY_FACTOR = 1.0  # the token-drop recipes' moe_expert_capacity_factor


def first_value(cell: str) -> int:
    """A cell's first value: "4 (8)" is two runs, the first outside the parentheses."""
    return int(cell.split("(")[0].strip())


def token_drop_runs() -> list[dict]:
    """The 25.09 token-drop rows: model, GPU, layout and tokens/s (the first cell value)."""
    out = []
    for r in read_csv(MEGATRON_BRIDGE_FILE):
        if r["release"] != "25.09" or r["model"] not in TOKEN_DROP_MODELS or r["system"] not in SYSTEM_HARDWARE:
            continue
        out.append({"model": TOKEN_DROP_MODELS[r["model"]], "hardware": SYSTEM_HARDWARE[r["system"]],
                    "layout": {k: first_value(r[c]) for k, c in LAYOUT_COLUMNS.items()},
                    "tokens_per_s_per_gpu": float(first_value(r["tokens_per_s_per_gpu"]))})
    return out


def main() -> int:
    sources = load_sources()
    folds = stored_folds(fingerprint(sources))
    if folds is None:
        print("stored fold fits are stale (`python benchmarks/accuracy.py --write-bands`)", file=sys.stderr)
        return 1
    factory = fold_factory(folds[SOURCE])
    rows = [r for r in sources[SOURCE].rows if r.status == "ok" and r.has_time]
    print(f"{'GPU':<12}{'layout':<28}{'token-drop':>11}{'predicted':>10}{'dropless':>10}{'measured':>10}{'predicted':>10}  rows")
    for run in token_drop_runs():
        same = [r for r in rows if r.model.name == run["model"] and r.hardware == run["hardware"]
                and all(r.layout.get(k, 1) == run["layout"][k] for k in SAME_LAYOUT)
                and dict(r.settings).get("cuda_graphs") != "full_iteration"]  # a full graph holds no sync
        if not same:
            continue
        ratios, dropping_tokens = [], []
        for ctx, batch, index, uneven in prepare(same, factory).groups:
            dropless = evaluate(ctx, batch, allow_uneven=uneven)["tokens_per_s_per_gpu"]
            dropping = replace(ctx, training=replace(ctx.training, moe_capacity_factor=CAPACITY_FACTOR))
            dropped = evaluate(dropping, batch, allow_uneven=uneven)["tokens_per_s_per_gpu"]
            ratios += list(dropless / dropped)
            dropping_tokens += list(dropped)
        measured = np.array([r.tokens_per_s_per_gpu for r in same])
        layout = " ".join(f"{k}={run['layout'][k]}" for k in SAME_LAYOUT[1:])
        print(f"{run['hardware']:<12}{layout:<28}{run['tokens_per_s_per_gpu']:>11.0f}"
              f"{np.median(dropping_tokens):>10.0f}{np.median(measured):>10.0f}"
              f"{np.median(measured) / run['tokens_per_s_per_gpu']:>10.2f}{np.median(ratios):>10.2f}  "
              f"{', '.join(r.row_id.split(':')[1] for r in same)}")
    print("token-drop: the 25.09 run's tokens/s and its prediction (the dropless rows' contexts with "
          f"moe_capacity_factor {CAPACITY_FACTOR}); measured, predicted: dropless / token-drop tokens/s "
          "(medians over the dropless rows)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
