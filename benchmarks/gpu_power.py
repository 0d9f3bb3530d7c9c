"""Power draw and SM clock of a GPU while it runs dense BF16 GEMMs back to back (needs CUDA and
nvidia-smi; reads the GPU's state, changes no setting).

    python benchmarks/gpu_power.py --out validation/h200_gemm_power.csv [--quick]

What it is for: a part run below its default power limit (torchtitan's H100s at 500 W) sustains
a lower SM clock under dense tensor-core load than the same chip at 700 W, and a compute-bound
GEMM's throughput follows the SM clock. This script measures, at the GPU's own limit, the
steady power and SM clock of large GEMMs with random inputs (the power-limited case) and with
all-zero inputs (few bit toggles, less power per clock), and the idle power. Each row: the
GEMM, the input pattern, TFLOP/s over the steady window and over a burst of BURST_CALLS GEMMs
right after a pause (what a kernel benchmark of short timed loops sees), the median power (W) and SM clock
(MHz) sampled every 100 ms by ``nvidia-smi``, and the active clock-event (throttle) reasons.
``autoplan/calibration/power.py`` turns the rows into the clock fraction at another power limit.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time

from gpu_common import start, write_table

QUERY = "power.draw,clocks.sm,temperature.gpu"
REASONS = ("clocks_event_reasons.active", "clocks_throttle_reasons.active")  # newer, older drivers
STATIC = "name,power.limit,power.default_limit,power.max_limit,clocks.max.sm"
FIELDS = ["kind", "m", "n", "k", "inputs", "seconds", "tflops", "burst_tflops", "power_w", "sm_clock_mhz",
          "temperature_c", "samples", "reasons"]
STEADY_FIELDS = ("power_w", "sm_clock_mhz", "temperature_c", "samples", "reasons")
BURST_CALLS = 10  # GEMMs timed right after an idle pause, before the power cap bites (tens of ms)
IDLE_PAUSE_S = 3.0


def smi(query: str) -> list[str]:
    out = subprocess.run(["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader,nounits", "-i", "0"],
                         capture_output=True, text=True, check=True)
    return [v.strip() for v in out.stdout.strip().splitlines()[0].split(",")]


def reasons_field() -> str:
    for field in REASONS:
        try:
            smi(field)
            return field
        except subprocess.CalledProcessError:
            continue
    return ""


class Sampler:
    """nvidia-smi sampling power, SM clock, temperature (and throttle reasons) every 100 ms."""

    def __init__(self, reasons: str):
        query = QUERY + ("," + reasons if reasons else "")
        self.proc = subprocess.Popen(["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader,nounits",
                                      "-i", "0", "-lms", "100"], stdout=subprocess.PIPE, text=True)
        self.t0 = time.monotonic()

    def stop(self) -> list[tuple[float, ...]]:
        self.proc.terminate()
        out, _ = self.proc.communicate()
        rows = []
        for line in out.strip().splitlines():
            parts = [p.strip() for p in line.split(",")]
            try:
                rows.append((float(parts[0]), float(parts[1]), float(parts[2]), parts[3] if len(parts) > 3 else ""))
            except (ValueError, IndexError):
                continue
        return rows


def steady(samples, skip_fraction: float = 0.4):
    """Medians of the samples after the first ``skip_fraction`` (the clock settles within seconds)."""
    tail = samples[int(len(samples) * skip_fraction):] or samples
    reasons = sorted({s[3] for s in tail if s[3]})
    return (statistics.median(s[0] for s in tail), statistics.median(s[1] for s in tail),
            statistics.median(s[2] for s in tail), len(tail), " ".join(reasons))


def burst_and_sustained(torch, step, seconds: float, reasons: str, burst_steps: int, batch: int = 1) -> dict:
    """Seconds per ``step`` in a burst of ``burst_steps`` right after an IDLE_PAUSE_S pause and over
    the steady window (after 40%) of a ``seconds`` run in batches of ``batch`` steps, with the
    steady power, SM clock, temperature, sample count and throttle reasons."""
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    time.sleep(IDLE_PAUSE_S)  # cool down: the burst starts from the idle clock
    t0 = time.perf_counter()
    for _ in range(burst_steps):
        step()
    torch.cuda.synchronize()
    burst = (time.perf_counter() - t0) / burst_steps
    sampler = Sampler(reasons)
    t_end, t_steady = time.monotonic() + seconds, time.monotonic() + 0.4 * seconds
    steps, t_start = 0, None
    while time.monotonic() < t_end:
        if t_start is None and time.monotonic() >= t_steady:
            torch.cuda.synchronize()
            t_start, steps = time.perf_counter(), 0
        for _ in range(batch):
            step()
        steps += batch
        torch.cuda.synchronize()  # keeps the host loop within one batch of the wall clock
    sustained_total = time.perf_counter() - t_start
    power, clock, temp, n_samples, active = steady(sampler.stop())
    return {"burst_s": burst, "sustained_s": sustained_total / steps, "sustained_total_s": sustained_total,
            "power_w": power, "sm_clock_mhz": clock, "temperature_c": temp, "samples": n_samples, "reasons": active}


def run_gemm(torch, m: int, n: int, k: int, inputs: str, seconds: float, reasons: str) -> dict:
    make = torch.zeros if inputs == "zeros" else torch.randn
    a = make(m, k, device="cuda", dtype=torch.bfloat16)
    b = make(k, n, device="cuda", dtype=torch.bfloat16)
    out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    r = burst_and_sustained(torch, lambda: torch.matmul(a, b, out=out), seconds, reasons, BURST_CALLS, batch=20)
    flops = 2.0 * m * n * k
    return {"kind": "gemm", "m": m, "n": n, "k": k, "inputs": inputs, "seconds": round(r["sustained_total_s"], 3),
            "tflops": round(flops / r["sustained_s"] / 1e12, 2), "burst_tflops": round(flops / r["burst_s"] / 1e12, 2),
            **{key: r[key] for key in STEADY_FIELDS}}


def main(argv=None) -> int:
    started = start("gpu_power", __doc__, "one GEMM shape, 6 s per run", argv)
    if started is None:
        return 1
    out, args, meta = started
    import torch

    name, limit, default_limit, max_limit, max_clock = smi(STATIC)
    meta.update({"power_limit_w": float(limit), "default_power_limit_w": float(default_limit),
                 "max_power_limit_w": float(max_limit), "max_sm_clock_mhz": float(max_clock)})
    reasons = reasons_field()
    seconds = 6.0 if args.quick else 15.0
    rows = []
    torch.cuda.synchronize()
    time.sleep(2.0)
    sampler = Sampler(reasons)
    time.sleep(4.0)
    power, clock, temp, n_samples, active = steady(sampler.stop(), 0.2)
    rows.append({"kind": "idle", "m": 0, "n": 0, "k": 0, "inputs": "", "seconds": 4.0, "tflops": 0.0, "burst_tflops": 0.0,
                 "power_w": power, "sm_clock_mhz": clock, "temperature_c": temp, "samples": n_samples,
                 "reasons": active})
    shapes = [(8192, 8192, 8192)] if args.quick else [(8192, 8192, 8192), (16384, 8192, 8192), (4096, 4096, 4096)]
    for m, n, k in shapes:
        for inputs in ("randn", "zeros"):
            rows.append(run_gemm(torch, m, n, k, inputs, seconds, reasons))
            print(rows[-1], flush=True)
    write_table(out, meta, FIELDS, rows)
    print(f"wrote {out} ({len(rows)} rows); {name}, power limit {limit} W (default {default_limit})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
