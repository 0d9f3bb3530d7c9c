"""The leave-one-source-out benefit of every fitted parameter (issue 44: "every remaining fitted
parameter has a LOSO benefit stated; remove any whose benefit is nil").

For each (trainer, GPU) pair of ``FIT_PLAN`` and each parameter it fits, every source with rows
of that pair is predicted twice by its fold (``loso.fold_fits``: the pairs refitted on every
other source): with the pair's plan as shipped (the stored folds, ``loso_folds.yaml``), and
with that one parameter held at the profile's default (never a value fitted on any row) while the
pair's others are refitted from the defaults; a pair left with nothing to fit transfers from the
trainer's other fits, as an unmeasured pair does (``loso.fold_parameters``). The benefit is
the row-weighted tokens/s MAPE (memory parameters: the median |memory error|) without the
parameter minus with it, over those sources: > 0 means fitting it helps on sources it never saw.

    python benchmarks/parameter_benefit.py                 # every pair (tens of minutes)
    python benchmarks/parameter_benefit.py megatron/h100-sxm llmfoundry/a100-40gb

A benchmark that prints figures, not a test.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import replace

from autoplan.calibration.accuracy import FIT_PLAN, NOT_FITTED
from autoplan.calibration.band_fit import fingerprint
from autoplan.calibration.loso import fold_fits, source_figures, stored_folds
from autoplan.calibration.rows import row_context
from autoplan.calibration.sources import load_sources
from autoplan.profiles import load_profile

MEMORY_PARAMETERS = ("memory_reserve_bytes", "allocator_overhead")


def from_defaults(row):
    """The row's context with its trainer's default parameters (``parameters['default']``)."""
    return replace(row_context(row), parameters=load_profile(row.trainer).parameters["default"])


def _pooled(figures, memory: bool) -> float:
    rows = [(f.memory_rows, f.memory_median_abs) if memory else (f.time_rows, f.tokens_mape) for f in figures]
    rows = [(n, v) for n, v in rows if n and not math.isnan(v)]
    total = sum(n for n, _ in rows)
    return sum(n * v for n, v in rows) / total if total else math.nan


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("pairs", nargs="*", help="trainer/gpu pairs of FIT_PLAN (default: all)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    sources = load_sources()
    folds = stored_folds(fingerprint(sources))
    if folds is None:
        print("the stored fold fits are stale: run python benchmarks/accuracy.py --write-bands first", file=sys.stderr)
        return 2
    wanted = [tuple(p.split("/", 1)) for p in args.pairs] or list(FIT_PLAN)
    cache: dict = {}
    print(f"{'pair':<28}{'parameter':<36}{'sources':>8}  {'with':>8}{'without':>9}{'benefit':>9}")
    for pair in wanted:
        params = FIT_PLAN[pair]
        held = [n for n, s in sources.items() if n not in NOT_FITTED
                and any((r.trainer, r.hardware) == pair and (r.has_time or r.has_memory) for r in s.rows)]
        for name in params:
            t0 = time.time()
            memory = name in MEMORY_PARAMETERS
            plan = {pair: tuple(p for p in params if p != name)}
            with_it, without = [], []
            for source in held:
                fits = dict(folds[source])
                with_it.append(source_figures(source, sources[source], fits))
                if plan[pair]:
                    refit = fold_fits(sources, source, args.seed, cache, plan, start=from_defaults)
                    if pair in refit:
                        fits[pair] = refit[pair]
                    else:
                        fits.pop(pair, None)
                else:
                    fits.pop(pair, None)  # nothing left to fit: the pair transfers, as an unmeasured one
                without.append(source_figures(source, sources[source], fits))
            a, b = _pooled(with_it, memory), _pooled(without, memory)
            kind = "memory |err|" if memory else "tokens/s MAPE"
            print(f"{'/'.join(pair):<28}{name:<36}{len(held):>8}  {a:>7.1f}%{b:>8.1f}%{b - a:>+8.1f}pt  "
                  f"({kind}; {', '.join(held)}; {time.time() - t0:.0f} s)", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
