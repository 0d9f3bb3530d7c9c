"""Where the Ultra-Scale Playbook sweep's memory departs from the cost model, knob by knob.

Prints, for the sweep's ``ok`` runs with the shipped nanotron profile (first pipeline stage,
the GPU nanotron's benchmark CSV measured):

1. measured / predicted memory by TP degree, and the share of runs above HIGH_RATIO: at tp <= 4
   the runs sit in one group near 1; at tp 8-32 a second group sits 1.3-2.7x above it, for the
   same model, pp, zero, mbs and grad_acc as runs of the first group;
2. that group's measured / predicted tokens/s against the others' at the same tp (it runs faster);
3. its excess memory per token and per layer-micro-batch in flight, in units of h bytes: about
   3-4 h on the 8B, 4-7 h on the 1B; two bf16 full-sequence (b, s, h) tensors per layer are 4 h
   (nanotron's column-parallel linears keep their all-gathered input for backward when
   ``tp_recompute_allgather`` is False: src/nanotron/parallel/tensor_parallel/functional.py,
   ``_ColumnLinearAsyncCommunication.forward`` and
   ``_ColumnLinearNoAsyncCommunicationReduceScatterMode.forward``; the sweep's configuration
   generator, scripts/scaling_benchmarks.py, leaves the option at its default, True);
4. the spread of measured - predicted memory within families of runs that differ only in dp
   (tp <= 2): under 1 GiB at zero 0, several GiB at zero 1, beyond the modelled ZeRO-1 shard;
5. at tp 1 and pp >= 2 the first stage measures about half a micro-batch's activations below the
   prediction, more in the 1F1B steady state (grad_acc > pp) than without one. On the 1B (tp 1,
   ZeRO-0 and large-dp ZeRO-1 rows, prediction without its fitted overhead) the measured
   activations per micro-batch are 0.98-1.0x the predicted at pp 1 and pp 8 but 0.86-0.90x at
   pp 2 and 0.80-0.85x at pp 4: about 10 of the 11 layers and 5 of the 6 that nanotron's
   compute-cost split puts on rank 0 there; both are the cases where a threshold
   total·(rank + 1)/pp falls exactly on a layer boundary (the 1B's LM head costs exactly 4
   layers), so that comparison was the first thing to check: the split holds, since at tp 2 and 4
   the same pp's memory per micro-batch fits the 6 layers nanotron's source puts on rank 0 at pp 4
   (1B: 5.16 GiB per micro-batch measured against 5.42 predicted, overhead included, at tp 2, 2.76
   against 2.72 at tp 4; 5 layers would give 4.5 and 2.27), and what is over-predicted is tp 1's
   activations. On the 8B at tp 1, pp 2, ZeRO-1, mbs 1 the steady-state excess is one number
   across dp: measured - predicted is -10.8 to
   -11.4 GiB at dp 4-64 (grad_acc 64-4; about 0.8 of a micro-batch's activations with the
   overhead), against -2.9 GiB at grad_acc 2 and -1.6 GiB at grad_acc 1, although nanotron's
   1F1B engine (parallel/pipeline_parallel/engine.py, ``OneForwardOneBackwardPipelineEngine``:
   pp - rank - 1 warm-up forwards, then one forward before each backward) holds pp
   micro-batches on rank 0 in both cases; an ok run predicted 1.1% over capacity (dp 4, grad_acc
   64) is one of these;
6. the median and p90 |error| with and without the group of point 1;
7. the fit test read two ways. PyTorch's caching allocator, when cudaMalloc fails, frees its
   cached unused blocks and retries before raising OOM (c10/cuda/CUDACachingAllocator.cpp,
   ``DeviceCachingAllocator::malloc``: ``release_available_cached_blocks`` then
   ``release_cached_blocks``), so a reserved peak beyond the card is not yet an OOM: the cost
   model's ``fits`` compares the reserved peak (the fitted ``allocator_overhead`` included) with
   the card, ``fits_with_retries`` the firm peak (without it; a lower bound, since segments that
   hold a live block are not freed), and the layouts between fit only in the allocator's
   free-and-retry regime. The sweep's figure is the reserved peak, cache included
   (calibration/validation.py, PLAYBOOK_MEMORY_UNIT: the allocated peak nanotron also logs is
   reset after the forward and backward). Printed: the agreement of each reading with ok /
   crashed_or_oom, the runs of each status between them, and the ok ones one by one with their
   tokens/s against the fastest run of their dp family (``family_key``) at micro-batch 1: the
   three ok runs there (8B, tp 1, ZeRO-1: pp 2 at micro-batch 1 and dp 4; pp 4 and 8 at
   micro-batch 2) ran at 0.38, 0.20 and 0.12 of that speed, the regime's slow-down (point 8;
   they are the ok runs the reserved reading calls not fitting), while 32 crashed runs share
   the band, 28 of them with no ok run of their family at as much predicted memory: the band is "may run,
   slowly", which is what ``estimate`` and ``compare`` say of such a layout; ``search`` ranks only
   layouts that fit outright.

8. the allocator's retry regime (cost.evaluate.memory_pressure_s) on the measured reserved peaks:
   tokens/s measured / predicted without it, by rank 0's share of the card (a median 0.97 below 0.85
   of it, 0.13-0.30 at 0.945-0.97, the 4 runs between one by one), and the slow-down at or above the
   profile's threshold (4.49): the two figures nanotron.yaml takes as measured.

No column of the published sweep tells the two groups apart, so the cost model cannot assign a
run to either; this script only measures them. Run from the repository root:
``python benchmarks/playbook_memory_modes.py`` (about a second).
"""

from __future__ import annotations

import numpy as np

from autoplan.calibration.accuracy import straggler_ids
from autoplan.calibration.fit import prepare
from autoplan.calibration.rows import row_context
from autoplan.calibration.sources import load_sources
from autoplan.cost.evaluate import evaluate
from autoplan.cost.memory import layer_activation_bytes
from autoplan.specs.hardware import load_gpu

HIGH_RATIO = 1.25  # measured / predicted above this: the second group


def sweep_table(rows) -> dict[str, np.ndarray]:
    """One evaluation of every row (row order): the first stage's memory terms, tokens/s and the
    step's terms, and, over stages, the heaviest stage's bytes (``peak_memory_bytes``), whether
    the run is predicted to fit, and the largest stage bytes less their ``allocator_overhead``
    share (``firm_peak_memory_bytes``, and ``fits_with_retries``)."""
    prepared = prepare(rows, row_context)
    n = len(rows)
    out: dict[str, np.ndarray] = {}
    names = ("mem_first_total_bytes", "mem_first_reserve_bytes", "mem_first_activations_bytes",
             "tokens_per_s_per_gpu", "step_time_s", "time_memory_pressure_s", "peak_memory_bytes", "fits",
             "firm_peak_memory_bytes", "fits_with_retries")
    for ctx, batch, index, uneven in prepared.groups:
        table = evaluate(ctx, batch, allow_uneven=uneven)
        for name in names:
            out.setdefault(name, np.full(n, np.nan))[index] = table[name]
        dense_layer_bytes, _ = layer_activation_bytes(ctx, batch, "none")
        tokens = batch.mbs * ctx.training.seq_len / batch.cp
        out.setdefault("layer_bytes_per_token", np.full(n, np.nan))[index] = dense_layer_bytes / tokens
    out["fits"], out["fits_with_retries"] = out["fits"] > 0, out["fits_with_retries"] > 0
    return out


def main() -> None:
    sweep = load_sources()["playbook_sweep"].rows
    table = sweep_table(sweep)
    ok = np.array([r.status == "ok" for r in sweep])
    rows = [r for r, o in zip(sweep, ok) if o]
    pred = {name: values[ok] for name, values in table.items()}
    measured = np.array([r.peak_memory_bytes for r in rows])
    ratio = measured / pred["mem_first_total_bytes"]
    tp = np.array([r.layout["tp"] for r in rows])
    model = np.array([r.model.name for r in rows])
    high = ratio > HIGH_RATIO
    speed = np.array([r.tokens_per_s_per_gpu for r in rows]) / pred["tokens_per_s_per_gpu"]
    print(f"{'model':8} {'tp':>3} {'runs':>5} {'high':>5} {'median ratio (others)':>22} "
          f"{'tokens/s meas/pred: others':>27} {'high':>6} {'excess h-bytes/token-layer':>27}")
    for name in sorted(set(model)):
        hidden = next(r.model.hidden_size for r in rows if r.model.name == name)
        for degree in sorted(set(tp)):
            sel = (model == name) & (tp == degree)
            hi, lo = sel & high, sel & ~high
            if not sel.any():
                continue
            # Excess over the prediction (without its fitted reserve) per activation byte, times the
            # predicted activation bytes per token-layer (sequence-parallel: /tp) -> bytes per h.
            tracked = pred["mem_first_total_bytes"] - pred["mem_first_reserve_bytes"]
            excess_share = (measured - tracked) / pred["mem_first_activations_bytes"]
            layer_token = pred["layer_bytes_per_token"]
            excess_h = np.median(excess_share[hi] * layer_token[hi]) / hidden if hi.any() else np.nan
            print(f"{name:8} {degree:3d} {sel.sum():5d} {hi.sum():5d} {np.median(ratio[lo]):22.2f} "
                  f"{np.median(speed[lo]):27.2f} {np.median(speed[hi]) if hi.any() else np.nan:6.2f} "
                  f"{excess_h:27.1f}")
    print_family_spread(rows, measured, pred["mem_first_total_bytes"])
    print_steady_state(rows, measured, pred)
    print_fit_readings(sweep, table)
    print_retry_regime(rows, measured, pred)
    err = np.abs(1.0 / ratio - 1.0) * 100.0
    print(f"\nall ok runs: {len(rows)}, median |error| {np.median(err):.1f}%, p90 {np.percentile(err, 90):.1f}%")
    print(f"without the high group ({high.sum()} runs, {100 * high.mean():.1f}%): median "
          f"{np.median(err[~high]):.1f}%, p90 {np.percentile(err[~high], 90):.1f}%")


def print_family_spread(rows, measured: np.ndarray, predicted: np.ndarray) -> None:
    """Spread of measured - predicted memory (GiB) within families of runs that share model, tp, pp,
    mbs and zero and differ only in dp (and so grad_acc), dp > 1, at tp <= 2 (no second group): the
    model's dp dependence is only the ZeRO-1 shard, so a wide spread is scatter no knob explains."""
    families: dict[tuple, list[float]] = {}
    for r, m, p in zip(rows, measured, predicted):
        lay = r.layout
        if lay["dp"] > 1 and lay["tp"] <= 2:
            key = (r.model.name, lay["zero"], lay["tp"], lay["pp"], lay["mbs"])
            families.setdefault(key, []).append((m - p) / 2**30)
    print("\nmeasured - predicted (GiB) within dp families, tp <= 2: median spread (max - min) by zero stage")
    for zero in (0, 1):
        spreads = [max(v) - min(v) for k, v in families.items() if k[1] == zero and len(v) >= 3]
        print(f"  zero {zero}: {len(spreads)} families, median spread {np.median(spreads):.1f} GiB, "
              f"largest {max(spreads):.1f} GiB")


def print_steady_state(rows, measured: np.ndarray, pred: dict[str, np.ndarray]) -> None:
    """tp 1, pp >= 2: measured - predicted memory in units of the predicted activations of one
    micro-batch on the first stage, for grad_acc <= pp (no 1F1B steady state after the warm-up)
    and grad_acc > pp (a steady state of one forward, one backward)."""
    pp = np.array([r.layout["pp"] for r in rows], dtype=float)
    ga = np.array([r.layout["grad_acc"] for r in rows], dtype=float)
    tp = np.array([r.layout["tp"] for r in rows])
    in_flight = np.minimum(pp, ga)
    per_micro = pred["mem_first_activations_bytes"] / in_flight
    excess = (measured - pred["mem_first_total_bytes"]) / per_micro
    print("\ntp 1, pp >= 2: (measured - predicted) / one micro-batch's predicted activations, median")
    for name in sorted({r.model.name for r in rows}):
        sel = (tp == 1) & (pp >= 2) & np.array([r.model.name == name for r in rows])
        for label, part in (("grad_acc <= pp", sel & (ga <= pp)), ("grad_acc > pp", sel & (ga > pp))):
            if part.any():
                print(f"  {name:8} {label:15} {part.sum():4d} runs  {np.median(excess[part]):+.2f}")


def family_key(row, mbs: bool = True) -> tuple:
    """Runs that differ only in dp (and so grad_acc); with ``mbs`` False, in the micro-batch too."""
    lay = row.layout
    return (row.model.name, lay["tp"], lay["pp"], *((lay["mbs"],) if mbs else ()), lay["zero"], lay["recompute"])


def print_fit_readings(sweep, table: dict[str, np.ndarray]) -> None:
    """Point 7: agreement of ``fits`` and ``fits_with_retries`` with ok / crashed_or_oom, ok runs
    over capacity by > 3% and ok runs predicted not to fit under each; the runs of each status
    that fit only with retries, and the ok ones one by one, their tokens/s against the fastest
    run of their dp family (``family_key``) at micro-batch 1; of the crashed ones, how many an ok
    run of their family at as much predicted memory shows not to be OOM."""
    capacity = load_gpu("h100-sxm").usable_memory_bytes
    ok = np.array([r.status == "ok" for r in sweep])
    peak, firm = table["peak_memory_bytes"], table["firm_peak_memory_bytes"]
    readings = {"reserved peak (fits)": (table["fits"], peak),
                "firm peak (fits_with_retries)": (table["fits_with_retries"], firm)}
    print("\nfit test: agreement with ok/crashed_or_oom, ok runs > 3% over capacity, ok runs not fitting")
    for label, (rule, tested) in readings.items():
        print(f"  {label:30} {100 * np.mean(rule == ok):5.1f}%  {int(np.sum(ok & (tested > 1.03 * capacity))):3d}"
              f"  {100 * np.mean(~rule[ok]):4.2f}%  (crashed runs predicted to fit: {int(np.sum(~ok & rule))})")
    retry_only = table["fits_with_retries"] & ~table["fits"]
    print(f"  fit only in the allocator's retry regime: {int(np.sum(retry_only & ok))} ok runs, "
          f"{int(np.sum(retry_only & ~ok))} crashed_or_oom runs")
    fastest_mbs1: dict[tuple, float] = {}
    for r, o in zip(sweep, ok):
        if o and r.layout["mbs"] == 1:
            key = family_key(r, mbs=False)
            fastest_mbs1[key] = max(fastest_mbs1.get(key, 0.0), r.tokens_per_s_per_gpu)
    for i in np.flatnonzero(retry_only & ok):
        r, lay = sweep[i], sweep[i].layout
        same = fastest_mbs1.get(family_key(r, mbs=False), np.nan)
        print(f"    {r.model.name} tp {lay['tp']} pp {lay['pp']} dp {lay['dp']} mbs {lay['mbs']} zero {lay['zero']}: "
              f"reserved {peak[i] / capacity:.3f}, firm {firm[i] / capacity:.3f} of the card; "
              f"{r.tokens_per_s_per_gpu:,.0f} tokens/s, {r.tokens_per_s_per_gpu / same:.2f} of its family's "
              f"fastest at mbs 1, {r.tokens_per_s_per_gpu / table['tokens_per_s_per_gpu'][i]:.2f} of the prediction")
    most: dict[tuple, float] = {}
    for r, o, p in zip(sweep, ok, peak):
        if o:
            most[family_key(r)] = max(most.get(family_key(r), 0.0), p)
    crashed = np.flatnonzero(retry_only & ~ok)
    shown = sum(most.get(family_key(sweep[i]), 0.0) >= peak[i] for i in crashed)
    print(f"  of those crashed runs, {shown} have an ok run of their model, tp, pp, mbs and ZeRO stage at as "
          "much predicted memory (not OOM)")


REGIME_EDGES = (0.85, 0.94)  # runs between are listed one by one


def print_retry_regime(rows, measured: np.ndarray, pred: dict[str, np.ndarray]) -> None:
    """Point 8: the caching allocator's retry regime (cost.evaluate.memory_pressure_s) read off the
    measured reserved peaks: measured / predicted tokens/s, the prediction without the regime's
    slow-down, by the share of the card rank 0 measured (stragglers' speeds left out:
    accuracy.straggler_ids), the runs near the edge one by one; and the slow-down of the runs at or
    above the profile's threshold, median(predicted / measured - 1): the two figures nanotron.yaml
    takes as measured."""
    threshold = row_context(rows[0]).corrections.memory_pressure_threshold
    share = measured / load_gpu(rows[0].hardware).usable_memory_bytes
    step = pred["step_time_s"]
    without = pred["tokens_per_s_per_gpu"] * step / (step - pred["time_memory_pressure_s"])
    speed = np.array([r.tokens_per_s_per_gpu for r in rows]) / without
    clean = ~np.isin([r.row_id for r in rows], sorted(straggler_ids(rows))) & np.isfinite(speed)
    low, high = REGIME_EDGES
    print("\nallocator retry regime: rank 0's measured reserved peak / usable memory -> tokens/s measured / "
          "predicted without the regime")
    for label, sel in ((f"< {low:.2f}", clean & (share < low)), (f">= {high:.2f}", clean & (share >= high))):
        print(f"  {label}: {sel.sum():4d} runs, median {np.median(speed[sel]):.2f}, "
              f"range {speed[sel].min():.2f}-{speed[sel].max():.2f}")
    edge = np.flatnonzero(clean & (share >= low) & (share < high))
    for i in edge[np.argsort(share[edge])]:
        lay = rows[i].layout
        print(f"    {share[i]:.3f}: {speed[i]:.2f}  {rows[i].cell}, tp {lay['tp']} pp {lay['pp']} dp {lay['dp']} "
              f"mbs {lay['mbs']} zero {lay['zero']}")
    regime = clean & (share >= threshold)
    print(f"  slow-down at >= {threshold:.2f} of the card ({regime.sum()} runs): median "
          f"{np.median(1.0 / speed[regime] - 1.0):.2f} (the step {np.median(1.0 / speed[regime]):.1f}x as long); "
          f"highest ok peak {share.max():.3f}")


if __name__ == "__main__":
    main()
