"""Speed and optimality of `autoplan search`; prints figures, asserts nothing.

    python benchmarks/speed.py                 # everything (about a minute on 2 cores)
    python benchmarks/speed.py --tpe-trials 0  # skip the TPE column of the optimality suite

1. Cost-model throughput: layouts evaluated per second on one core, median of repeated runs (target
   >= 4,000,000/s), and the ratio to the evaluation path of BASELINE_COMMIT measured in the same run
   (each in fresh processes, in alternating rounds); the fixed cost of one evaluate() of one
   layout (target <= 0.5 ms).
2. The headline command end to end, process start to exit: median of 9 runs (target <= 0.4 s;
   `--headline-only` measures just this).
3. DeepSeek-V3 on 2,048 GPUs with the MoE space, end to end (target <= 15 s).
5. Search at scale (issue 15): the widened 70B/512-GPU space (about 1.3 M layouts) with the
   default sampler and with exhaustive, end to end, wall time and peak memory (target: auto is
   exact, <= 5 s, <= 1 GB); a space of about 10^8 layouts with exhaustive (target <= 1.5 GB);
   awkward GPU counts (96 H100s, one 72-GPU GB200 NVL72 rack) with a 4M-token batch.
4. Optimality: >= 30 scenarios (dense 1B-405B and MoE, 8 to 16,384 GPUs, several batch sizes,
   sequence lengths and trainers); the default sampler's best plan against the exhaustive
   optimum (target: within 0.5 % in >= 95 % of scenarios). A TPE column (with its local polish)
   shows what happens on spaces too large to enumerate.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")  # one core: numpy's element-wise ops are serial anyway

import numpy as np  # noqa: E402

from autoplan.api import build_context, build_training  # noqa: E402
from autoplan.cost.evaluate import evaluate  # noqa: E402
from autoplan.search import SearchOptions, search  # noqa: E402
from autoplan.space import enumerate_space, load_space  # noqa: E402
from autoplan.specs.models import load_model  # noqa: E402

# `python -m autoplan.cli` (not the console script) so that PYTHONPATH=<another checkout> measures
# that checkout with this same script (the before/after figures of a change).
AUTOPLAN = [sys.executable, "-m", "autoplan.cli"]
M = 2**20  # token counts are binary: 4M = 4·2^20

# (model, gpus, gbs tokens, seq_len or None for the model's, trainer, space or None for the default)
SCENARIOS = [
    ("llama3.2-1b", 8, 1 * M, None, "megatron", None),
    ("llama3.2-1b", 64, 1 * M, 4096, "nanotron", None),
    ("usp-1b", 8, 1 * M, 4096, "nanotron", None),
    ("usp-1b", 32, 2 * M, None, "torchtitan", None),
    ("llama3-8b", 8, 1 * M, None, "megatron", None),
    ("llama3-8b", 64, 4 * M, None, "megatron", None),
    ("llama3-8b", 256, 4 * M, None, "torchtitan", None),
    ("llama3-8b", 128, 2 * M, 32768, "megatron", "long-context"),
    ("usp-8b", 64, 1 * M, 4096, "nanotron", None),
    ("qwen3-8b", 128, 4 * M, None, "deepspeed", None),
    ("llama2-7b", 32, 4 * M, None, "hf", None),
    ("llama2-70b", 256, 4 * M, None, "megatron", None),
    ("llama3-70b", 64, 2 * M, None, "megatron", None),
    ("llama3-70b", 512, 4 * M, None, "megatron", None),
    ("llama3-70b", 1024, 8 * M, None, "torchtitan", None),
    ("llama3-70b", 4096, 16 * M, None, "megatron", None),
    ("llama3-70b", 512, 4 * M, 65536, "megatron", "long-context"),
    ("gpt3-175b", 1024, 2 * M, None, "megatron", None),
    ("gpt3-175b", 4096, 4 * M, None, "deepspeed", None),
    ("llama3.1-405b", 1024, 8 * M, None, "megatron", None),
    ("llama3.1-405b", 8192, 16 * M, None, "megatron", None),
    ("llama3.1-405b", 16384, 16 * M, None, "torchtitan", None),
    ("llama3.1-405b", 16384, 16 * M, 131072, "megatron", "long-context"),
    ("mixtral-8x7b", 64, 4 * M, None, "megatron", None),
    ("mixtral-8x7b", 256, 4 * M, None, "torchtitan", None),
    ("mixtral-8x22b", 512, 8 * M, None, "megatron", None),
    ("qwen3-30b-a3b", 128, 4 * M, None, "megatron", None),
    ("qwen3-30b-a3b", 64, 2 * M, None, "nanotron", None),
    ("qwen3-235b-a22b", 1024, 8 * M, None, "megatron", None),
    ("deepseek-v3", 2048, 16 * M, None, "megatron", None),
    ("deepseek-v3", 4096, 60 * M, None, "megatron", None),
    ("llama3-8b", 16, 512 * 1024, 2048, "megatron", None),
]


def throughput_figures(repeats: int = 9) -> dict[str, float]:
    """Layouts/s of the cost model on one core (every layout costed in full by ``evaluate``, in
    chunks of 2^16; the median and the best of ``repeats`` timings), and of the exhaustive search
    of the widened space (enumerate, prune, assess, rank; candidates per second, median of 3)."""
    training = build_training(512, 8192, 512)
    ctx = build_context("70b", training)
    space = load_space("default").with_overrides(
        pp=(1, 2, 4, 8, 16, 32), vpp=(1, 2, 4, 8), cp=(1, 2, 4, 8), mbs=(1, 2, 4, 8), zero=(0, 1, 2, 3),
        precision=("bf16", "fp8"))
    batch, _ = enumerate_space(space, training)
    chunks = [batch.take(np.arange(lo, min(lo + (1 << 16), len(batch)))) for lo in range(0, len(batch), 1 << 16)]
    evaluate(ctx, chunks[0])  # warm-up
    times = []
    for _ in range(repeats):
        start = time.process_time()
        for chunk in chunks:
            evaluate(ctx, chunk)
        times.append(time.process_time() - start)
    wide = load_space("default").with_overrides(**widened_overrides())
    search_times = []
    for _ in range(3):
        start = time.process_time()
        result = search(ctx, wide, SearchOptions(sampler="exhaustive"))
        search_times.append(time.process_time() - start)
    return {"layouts": len(batch), "median_per_s": len(batch) / float(np.median(times)),
            "best_per_s": len(batch) / min(times), "search_layouts": result.counts.candidates,
            "search_per_s": result.counts.candidates / float(np.median(search_times)),
            "one_layout_ms": one_layout_ms(ctx, training)}


def one_layout_ms(ctx, training, calls: int = 300) -> float:
    """The fixed cost of one ``evaluate()`` of one layout (the headline's plan 1), median of
    ``calls`` in ms of CPU time: what a library call or an interactive estimate pays. Timed as a
    user calls it (``autoplan``'s docstring, ``autoplan estimate``): a batch of one built from the
    layout, then evaluated; a fresh batch each call, so that nothing kept for a batch carries over.
    CPU time, as the throughput: on a shared machine wall time also counts the waits for a core."""
    from autoplan.layout import LayoutBatch, resolve_layout

    layout = resolve_layout({"tp": 4, "pp": 4, "vpp": 4, "cp": 2, "zero": 1}, training)
    evaluate(ctx, LayoutBatch.from_layouts([layout]))
    times = []
    for _ in range(calls):
        start = time.process_time()
        evaluate(ctx, LayoutBatch.from_layouts([layout]))
        times.append(time.process_time() - start)
    return 1e3 * float(np.median(times))


def widened_overrides() -> dict[str, tuple]:
    """The widened space (WIDENED) as ``SearchSpace.with_overrides`` arguments."""
    out = {}
    for flag, text in zip(WIDENED[::2], WIDENED[1::2]):
        out[flag[2:]] = tuple(int(v) if v.isdigit() else v for v in text.split(","))
    return out


def subprocess_figures(pythonpath: str) -> dict[str, float]:
    """``throughput_figures`` of the package under ``pythonpath``, run by this script in a fresh
    subprocess."""
    import json

    env = {**os.environ, "PYTHONPATH": pythonpath}
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--throughput-json"], env=env,
                         capture_output=True, text=True, check=True, cwd=tempfile.gettempdir())
    return json.loads(out.stdout.strip().splitlines()[-1])


def baseline_figures(rev: str) -> dict[str, float] | None:
    """``subprocess_figures`` of commit ``rev`` of this repository (its tree extracted to a
    temporary folder)."""
    import shutil

    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    tmp = tempfile.mkdtemp(prefix="autoplan-baseline-")
    try:
        archive = subprocess.run(["git", "-C", repo, "archive", rev], capture_output=True, check=True)
        subprocess.run(["tar", "-x", "-C", tmp], input=archive.stdout, check=True)
        return subprocess_figures(tmp)
    except (subprocess.CalledProcessError, OSError, ValueError) as exc:
        print(f"   (baseline {rev} not measured: {exc})")
        return None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def cost_model_throughput(baseline: str | None, rounds: int = 2) -> None:
    """Section 1. This checkout and ``baseline`` are each measured in a fresh subprocess, in
    alternating rounds: measured in this process after its imports, the same code ran 3-10%
    slower than in a fresh one, which biased the ratio against it."""
    import autoplan

    here = os.path.dirname(os.path.dirname(os.path.abspath(autoplan.__file__)))
    runs, before_runs = [], []
    for _ in range(rounds):
        runs.append(subprocess_figures(here))
        if baseline:
            before_runs.append(baseline_figures(baseline))
    now = {k: float(np.median([r[k] for r in runs])) for k in runs[0]}
    now["best_per_s"] = max(r["best_per_s"] for r in runs)
    print(f"1. cost model: {now['layouts']:,.0f} layouts (70B, 512 GPUs), every one costed in full: median "
          f"{now['median_per_s']:,.0f} layouts/s on one core (best {now['best_per_s']:,.0f}; CPU time, "
          f"target >= 4,000,000/s; {rounds} rounds, each in a fresh process)")
    print(f"   exhaustive search of the widened space ({now['search_layouts']:,.0f} layouts; enumerate, "
          f"prune, assess, rank): {now['search_per_s']:,.0f} layouts/s (CPU time, median of 3)")
    print(f"   one layout, one evaluate(): median {now['one_layout_ms']:.2f} ms (CPU time; target <= 0.5 ms)")
    if before_runs and all(before_runs):
        before = {k: float(np.median([r[k] for r in before_runs])) for k in before_runs[0]}
        print(f"   commit {baseline} in the same run, alternating: cost model {before['median_per_s']:,.0f} "
              f"layouts/s (ratio now/then {now['median_per_s'] / before['median_per_s']:.2f}), search "
              f"{before['search_per_s']:,.0f} layouts/s (ratio {now['search_per_s'] / before['search_per_s']:.2f}), "
              f"one layout {before['one_layout_ms']:.2f} ms")


def wall(args: list[str], repeats: int = 3) -> tuple[float, float]:
    """(first, best) wall seconds of ``autoplan ARGS`` as a subprocess."""
    times = [run_measured(args)[0] for _ in range(repeats)]
    return times[0], min(times)


def run_measured(args: list[str]) -> tuple[float, float, int, str]:
    """(wall s, peak RSS GiB, exit code, the recipe line or else the last stderr line) of
    ``autoplan ARGS`` (a fresh
    result folder), the peak resident memory read from the child's rusage."""
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        # cwd: not the repository root, whose autoplan/ `-m` would import ahead of PYTHONPATH's
        child = subprocess.Popen([*AUTOPLAN, *args, "--out", f"{tmp}/out"], stdout=subprocess.DEVNULL,
                                 stderr=subprocess.PIPE, text=True, cwd=tmp)
        err = child.stderr.read()
        _, status, usage = os.wait4(child.pid, 0)
        elapsed = time.perf_counter() - start
        child.returncode = os.waitstatus_to_exitcode(status)
    lines = [line for line in err.splitlines() if line.strip()]
    recipe = [line for line in lines if line.startswith("Recipe:")]
    return elapsed, usage.ru_maxrss / 2**20, child.returncode, (recipe or lines or [""])[-1]


def end_to_end() -> None:
    headline()
    for extra in ([], ["--even-stages-only"]):
        args = ["search", "--model", "deepseek-v3", "--gpus", "2048", "--gbs-seqs", "15360", *extra]
        first, best = wall(args, repeats=2)
        print(f"3. `autoplan {' '.join(args)}` (MoE space): {first:.2f} s first, {best:.2f} s best "
              "(target <= 15 s)")


def compile_bytecode() -> None:
    """Write autoplan's bytecode (``python -m compileall``) before timing a command: an installed
    wheel ships it, so a user's run never compiles the package, while a checkout run with
    ``PYTHONDONTWRITEBYTECODE=1`` would compile every module on every start (~0.1 s of CPU).
    Python checks the bytecode against each source file's timestamp, so it is never stale."""
    import autoplan  # the checkout this script measures (PYTHONPATH decides which)

    package = os.path.dirname(os.path.abspath(autoplan.__file__))
    subprocess.run([sys.executable, "-m", "compileall", "-q", package], check=False,
                   env={k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"})


def headline() -> None:
    compile_bytecode()
    times = sorted(run_measured(["search", "--model", "70b", "--gpus", "512", "--gbs-tokens", "4M"])[0]
                   for _ in range(9))
    print(f"2. `autoplan search --model 70b --gpus 512 --gbs-tokens 4M`: median {times[4]:.2f} s of 9 "
          f"(min {times[0]:.2f}, max {times[-1]:.2f}; target <= 0.4 s; load {os.getloadavg()[0]:.1f})")


def scenario_inputs(model, gpus, gbs_tokens, seq_len, trainer, space_name):
    spec = load_model(model)
    seq = seq_len or spec.seq_len
    ctx = build_context(spec, build_training(gpus, seq, int(gbs_tokens // seq)), trainer=trainer)
    space = load_space(space_name or ("moe" if ctx.model.is_moe else "default"))
    return ctx, space


def best_speed(result) -> float:
    rows = result.plan_rows(1)
    return float(result.table["tokens_per_s_per_gpu"][rows[0]]) if len(rows) else float("nan")


def shortfall(got: float, optimum: float) -> float:
    """Percent below the optimum (0 when neither finds a feasible plan)."""
    if np.isnan(optimum) and np.isnan(got):
        return 0.0
    return 100 * (1 - got / optimum)


def optimality(tpe_trials: int) -> None:
    tpe = f" and tpe ({tpe_trials} trials + polish)" if tpe_trials else ""
    print(f"4. optimality: default sampler (auto){tpe} vs exhaustive")
    header = (f"   {'model':<16}{'gpus':>6}{'gbs':>6}{'seq':>7} {'trainer':<11}{'space':<13}{'layouts':>8}"
              f"{'feasible':>9}{'optimum tok/s':>14}{'auto':>11}{'gap':>7}{'tpe gap':>9}{'time':>7}")
    print(header)
    hits, tpe_hits, total = 0, 0, 0
    for scenario in SCENARIOS:
        ctx, space = scenario_inputs(*scenario)
        start = time.perf_counter()
        auto = search(ctx, space, SearchOptions(sampler="auto", allow_uneven_pp=True))
        elapsed = time.perf_counter() - start
        exact = search(ctx, space, SearchOptions(sampler="exhaustive", allow_uneven_pp=True))
        optimum, got = best_speed(exact), best_speed(auto)
        gap = shortfall(got, optimum)
        tpe_gap = float("nan")
        if tpe_trials:
            options = SearchOptions(sampler="tpe", trials=tpe_trials, allow_uneven_pp=True)
            tpe_gap = shortfall(best_speed(search(ctx, space, options)), optimum)
            tpe_hits += tpe_gap <= 0.5
        total += 1
        hits += gap <= 0.5
        model, gpus, gbs, _, trainer, _ = scenario
        print(f"   {model:<16}{gpus:>6}{gbs / M:>5g}M{ctx.training.seq_len:>7} {trainer:<11}{space.name:<13}"
              f"{exact.counts.candidates:>8}{exact.counts.reach_batch:>9}{optimum:>14,.0f}{auto.sampler:>11}"
              f"{gap:>6.2f}%{tpe_gap:>8.2f}%{elapsed:>6.2f}s")
    print(f"   default sampler within 0.5 % of the exhaustive optimum in {hits}/{total} scenarios "
          f"({100 * hits / total:.0f} %; target >= 95 %)")
    if tpe_trials:
        print(f"   tpe ({tpe_trials} trials + polish) within 0.5 % in {tpe_hits}/{total} scenarios "
              f"({100 * tpe_hits / total:.0f} %)")


WIDENED = ["--tp", "1,2,4,8,16", "--pp", "1,2,4,8,16,32,64", "--vpp", "1,2,3,4,5,6,8,10",
           "--cp", "1,2,4,8,16", "--mbs", "1,2,3,4,5,6,8,10,12,16", "--recompute", "none,selective,full",
           "--zero", "0,1,2,3", "--precision", "bf16,fp8",
           "--placement", "tp-cp-dp-pp,tp-dp-cp-pp,tp-pp-cp-dp,cp-tp-dp-pp"]
# The widened space times 75 (5 tp·cp·pp-neutral knob sets x 15 more micro-batch sizes): ~1e8 layouts.
HUGE = [*WIDENED[:8], "--mbs", ",".join(str(m) for m in range(1, 33)) + ",40,48,56,64", *WIDENED[10:],
        "--recompute-layers", "0,1,2,4,8", "--recompute-modules", "", "--recompute-modules", "core_attn",
        "--recompute-modules", "mlp", "--recompute-modules", "core_attn,mlp"]


def at_scale(huge: bool) -> None:
    print("5. search at scale (70B, 512 H100s, 4M tokens)")
    base = ["search", "--model", "70b", "--gpus", "512", "--gbs-tokens", "4M", "--format", "json"]
    for label, extra in (("widened, auto", WIDENED), ("widened, exhaustive", [*WIDENED, "--sampler", "exhaustive"]),
                         *([("1e8 space, exhaustive", [*HUGE, "--sampler", "exhaustive"])] if huge else [])):
        elapsed, rss_gib, code, last = run_measured([*base, *extra])
        print(f"   {label:<22} {elapsed:7.2f} s  peak {rss_gib:5.2f} GiB  exit {code}  {last[:150]}")
    for gpus, hardware in ((96, "h100-sxm"), (72, "gb200-nvl72")):
        args = ["search", "--model", "70b", "--gpus", str(gpus), "--hardware", hardware, "--gbs-tokens", "4M"]
        elapsed, _, code, last = run_measured(args)
        print(f"   {gpus} x {hardware:<12} {elapsed:6.2f} s  exit {code}  {last[:150]}")


# The evaluation path before issue 15's speed work (the ratio of section 1 is measured against it).
BASELINE_COMMIT = "90d2972"  # the start of the one-declaration work (issue 43)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tpe-trials", type=int, default=200, help="TPE trials per scenario (0: skip)")
    parser.add_argument("--skip-end-to-end", action="store_true")
    parser.add_argument("--skip-optimality", action="store_true")
    parser.add_argument("--skip-1e8", action="store_true", help="skip the 10^8-layout space (minutes)")
    parser.add_argument("--headline-only", action="store_true", help="only section 2's headline command (seconds)")
    parser.add_argument("--baseline", default=BASELINE_COMMIT, metavar="REV",
                        help="git revision whose cost model section 1 also measures ('' to skip)")
    parser.add_argument("--throughput-json", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.throughput_json:  # section 1's subprocesses
        import json

        print(json.dumps(throughput_figures()))
        return
    compile_sources()
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    if args.headline_only:
        headline()
        return
    cost_model_throughput(args.baseline or None)
    if not args.skip_end_to_end:
        end_to_end()
        at_scale(huge=not args.skip_1e8)
    if not args.skip_optimality:
        optimality(args.tpe_trials)


def compile_sources() -> None:
    """Byte-compile the package first, so that every timed process starts as a second run does
    (PYTHONDONTWRITEBYTECODE would otherwise make each one compile every module again)."""
    import compileall

    import autoplan

    compileall.compile_dir(os.path.dirname(autoplan.__file__), quiet=1)


if __name__ == "__main__":
    main()
