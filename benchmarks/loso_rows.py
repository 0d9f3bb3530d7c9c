"""Each row of one source, predicted by its leave-one-source-out fold: signed tokens/s error and
layout, worst first (autoplan/calibration/loso.py; the fold fits stored with the bands).

    python benchmarks/loso_rows.py                      # megatron_bridge, stored folds
    python benchmarks/loso_rows.py --source nemo --top 20
    python benchmarks/loso_rows.py --refit              # refit this source's fold first (minutes)
    python benchmarks/loso_rows.py --source mpt --by hardware,seq_len   # the errors' trend by group

``--by`` groups the rows by the values of some keys (``hardware``, ``model``, ``trainer``, ``recompute``, any
layout key: ``LAYOUT_KEYS``, ``grad_acc``) and prints each group's row count and median, mean,
lowest and highest signed error: a regime the cost model misses shows as a trend across groups
(at 2026-12-03: MPT's errors fall with the sequence length on every GPU, median +2% at 2K to
-16% (A100 80GB) and -22% (H100) at 64K; ``--by hardware,recompute`` shows where: its full-recompute
rows are -13.3% (A100 80GB) and -10.3% (H100) median against -0.5% and +0.4% without recompute).

Signed error = predicted / measured - 1: positive where the prediction is faster than the run.
A benchmark, not a timed test.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from autoplan.calibration.band_fit import fingerprint
from autoplan.calibration.fit import predict_rows
from autoplan.calibration.loso import fold_factory, fold_fits, stored_folds
from autoplan.calibration.sources import load_sources

LAYOUT_KEYS = ("tp", "pp", "vpp", "cp", "ep", "etp", "zero", "mbs", "gbs_seqs", "seq_len", "gpus", "precision")


def row_settings(row) -> str:
    """The row's CUDA graphs and MoE dispatch options where it sets them."""
    settings = dict(row.settings)
    options = dict(row.profile_overrides).get("options")
    parts = [f"graphs={settings.get('cuda_graphs', 'none')}"]
    if row.model.is_moe and options is not None:
        parts += [f"dedup={int(options.moe_token_dedup)}", f"a2a_overlap={int(options.moe_a2a_overlap)}"]
    return " ".join(parts)


GROUP_KEYS = ("hardware", "model", "trainer", "grad_acc", "recompute", *LAYOUT_KEYS)


def row_key(row, key: str):
    """A row's value of one ``--by`` key."""
    if key == "hardware":
        return row.hardware
    if key == "model":
        return row.model.name
    if key == "trainer":
        return row.trainer
    return row.layout.get(key)


def print_groups(rows, error: np.ndarray, keys: tuple[str, ...]) -> int:
    """The signed errors grouped by the values of ``keys``, one line per group in sorted order."""
    unknown = [k for k in keys if k not in GROUP_KEYS]
    if unknown or not keys:
        print(f"--by takes keys among {', '.join(GROUP_KEYS)}; got {', '.join(unknown) or 'none'}", file=sys.stderr)
        return 2
    groups: dict[tuple, list[float]] = {}
    for row, e in zip(rows, error):
        groups.setdefault(tuple(row_key(row, k) for k in keys), []).append(100.0 * float(e))
    print(f"{' '.join(f'{k:>14}' for k in keys)}  rows  median    mean  lowest  highest  (signed %)")
    for group in sorted(groups, key=lambda g: tuple((v is None, str(type(v)), v) for v in g)):
        e = np.array(groups[group])
        print(f"{' '.join(f'{str(v):>14}' for v in group)}  {len(e):>4}  {np.median(e):+6.1f}  {np.mean(e):+6.1f}  "
              f"{e.min():+6.1f}  {e.max():+7.1f}")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--source", default="megatron_bridge")
    parser.add_argument("--refit", action="store_true", help="refit the source's fold instead of the stored fits")
    parser.add_argument("--top", type=int, default=0, help="the N worst rows only (0: all)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--by", default="", help="group the errors by these comma-separated keys "
                        f"(hardware, model, trainer, grad_acc, recompute, {', '.join(LAYOUT_KEYS)})")
    args = parser.parse_args(argv)
    sources = load_sources()
    if args.source not in sources:
        print(f"unknown source {args.source!r}; known: {', '.join(sources)}", file=sys.stderr)
        return 2
    if args.refit:
        start = time.time()
        fits = fold_fits(sources, args.source, args.seed)
        print(f"refitted the fold without {args.source} ({time.time() - start:.0f} s)")
    else:
        folds = stored_folds(fingerprint(sources))
        if folds is None:
            print("stored fold fits are stale (`python benchmarks/accuracy.py --write-bands`); use --refit",
                  file=sys.stderr)
            return 1
        fits = folds[args.source]
    rows = [r for r in sources[args.source].rows if r.status == "ok" and r.has_time]
    predicted = predict_rows(rows, fold_factory(fits))["tokens_per_s_per_gpu"]
    error = predicted / np.array([r.tokens_per_s_per_gpu for r in rows]) - 1.0
    if args.by:
        return print_groups(rows, error, tuple(k.strip() for k in args.by.split(",") if k.strip()))
    order = np.argsort(-np.abs(error))
    for i in order[:args.top or None]:
        r = rows[i]
        layout = " ".join(f"{k}={r.layout[k]}" for k in LAYOUT_KEYS if k in r.layout)
        print(f"{100 * error[i]:+7.1f}%  {r.model.name:<18}{r.hardware:<12} measured {r.tokens_per_s_per_gpu:>8.0f} "
              f"predicted {predicted[i]:>8.0f}  {layout}  {row_settings(r)}  ({r.row_id})")
    print(f"{args.source}: {len(rows)} rows, tokens/s MAPE {100 * np.mean(np.abs(error)):.2f}%, "
          f"median signed {100 * np.median(error):+.2f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
