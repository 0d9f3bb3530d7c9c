"""The SM clock a Hopper part sustains under dense GEMMs at a lower power limit, from the power
draw and clock measured at 700 W (``validation/h200_gemm_power.csv``, ``benchmarks/gpu_power.py``).

Mechanism. Under dense tensor-core load a Hopper GPU at its 700 W limit is power-bound: with
random BF16 inputs the board draws the limit and the driver lowers the SM clock until it fits
(clock-event reason 0x4, software power cap). A compute-bound GEMM's throughput follows the SM
clock: the measured table shows it (all-zero inputs draw less power, run at a higher clock, and
are faster by the clock ratio, within 1.5%). A part run at a lower limit P_cap (torchtitan's
H100s at 500 W) therefore reaches the fraction f(P_cap)/f(700 W) of the 700 W part's GEMM rate.

Power model: P = P_idle + P_dyn(f), the dynamic part ∝ f·V² with the supply voltage rising with
the clock along the DVFS curve, P_dyn ∝ f^α (Weste & Harris, *CMOS VLSI Design*, Sec. 5.1;
α = 3 where V ∝ f, 2 where V is nearly flat). With P_idle and P(700 W) measured on the same
board, f(P_cap)/f(700) = ((P_cap − P_idle)/(P_700 − P_idle))^(1/α); ``DVFS_EXPONENT`` = 2.5 is the
middle of the range, and ``clock_fraction`` also returns the fractions at 2 and 3 as the range.

The measurement is an H200 (HBM3e); the 500 W part has HBM2e. A GEMM's power is mostly the SMs'
(the operands stay in L2 and shared memory), so the memory type is ignored here.

Two more tables from the same GPU say how far short loops overstate a training step's rates:
``h200_gemm_power_burst.csv`` (a second run; ``sustained_over_burst``: bare GEMMs hold 0.84-0.85
of a burst after a pause) and ``h200_layer_power.csv`` (``layer_sustained_over_burst``: a Llama
layer stack's fwd+bwd 0.90-0.97), with ``h100_sxm_layer_power.csv`` the same on an H100 SXM at
its 700 W (0.90-0.97 too, each within 0.015 of the H200's). They are recorded, not applied to the
profiles.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from autoplan.calibration.kernels import read_table
from autoplan.paths import data_dir

POWER_FILE = "h200_gemm_power.csv"
BURST_FILE = "h200_gemm_power_burst.csv"  # a second run, with a burst after a pause (burst_tflops)
LAYER_FILE = "h200_layer_power.csv"  # Llama layers' fwd+bwd, burst and sustained (gpu_layer_power.py)
H100_LAYER_FILE = "h100_sxm_layer_power.csv"  # the same on an H100 SXM (700 W)
DVFS_EXPONENT = 2.5  # P_dyn ∝ f^α; α between 2 and 3 (module doc)
DVFS_EXPONENT_RANGE = (2.0, 3.0)


@dataclass(frozen=True)
class PowerFigures:
    """What the power table says: idle power, the random-input GEMMs' median power and SM clock,
    the power limit it ran at, and throughput over clock between all-zero and random inputs."""

    idle_w: float
    gemm_w: float
    gemm_clock_mhz: float
    limit_w: float
    throughput_per_clock: tuple[float, ...]  # (TFLOP/s ratio)/(clock ratio), zeros over random, per shape


def power_figures(table=None) -> PowerFigures:
    """``PowerFigures`` of ``table`` (default: the shipped ``validation/h200_gemm_power.csv``)."""
    table = table or read_table(data_dir("validation") / POWER_FILE)
    idle = table.select(kind="idle")
    random = table.select(kind="gemm", inputs="randn")
    if not idle or not random:
        raise ValueError(f"the power table needs an idle row and random-input GEMM rows, got {len(idle)} and {len(random)}")
    ratios = []
    for r in random:
        zeros = table.select(kind="gemm", inputs="zeros", m=r["m"], n=r["n"], k=r["k"])
        if zeros:
            z = zeros[0]
            ratios.append((z["tflops"] / r["tflops"]) / (z["sm_clock_mhz"] / r["sm_clock_mhz"]))
    return PowerFigures(idle_w=float(idle[0]["power_w"]),
                        gemm_w=statistics.median(float(r["power_w"]) for r in random),
                        gemm_clock_mhz=statistics.median(float(r["sm_clock_mhz"]) for r in random),
                        limit_w=float(table.meta["power_limit_w"]), throughput_per_clock=tuple(ratios))


def clock_fraction(limit_w: float, figures: PowerFigures | None = None,
                   exponent: float = DVFS_EXPONENT) -> float:
    """f(limit_w)/f(measured limit) for dense GEMMs (module doc); 1 at or above the power the
    GEMMs drew at the measured limit."""
    figures = figures or power_figures()
    if limit_w <= figures.idle_w:
        raise ValueError(f"a power limit must exceed the idle power {figures.idle_w:.0f} W, got {limit_w:.0f} W")
    dynamic = (limit_w - figures.idle_w) / (figures.gemm_w - figures.idle_w)
    return min(1.0, dynamic ** (1.0 / exponent))


def sustained_over_burst(table=None, min_flops: float = 1e12) -> tuple[float, ...]:
    """Per random-input GEMM of at least ``min_flops``: the sustained TFLOP/s (power-capped,
    steady clock) over the burst right after an idle pause (``burst_tflops``), from
    ``validation/h200_gemm_power_burst.csv`` by default. A kernel benchmark of short timed loops
    (benchmarks/gpu_kernels.py: the fastest of three batches of 30 ms) sees the burst rate; a
    training step that runs GEMMs back to back for seconds runs nearer the sustained one."""
    table = table or read_table(data_dir("validation") / BURST_FILE)
    return tuple(r["tflops"] / r["burst_tflops"] for r in table.select(kind="gemm", inputs="randn")
                 if r.get("burst_tflops") and 2.0 * r["m"] * r["n"] * r["k"] >= min_flops)


def layer_sustained_over_burst(table=None) -> dict[tuple[str, str], float]:
    """(model, mode) -> a Llama layer stack's fwd+bwd rate sustained for seconds over its rate in a
    burst after a pause (``validation/h200_layer_power.csv``): the training mix is power-capped too,
    less than back-to-back GEMMs because its attention and memory-bound kernels draw less power."""
    table = table or read_table(data_dir("validation") / LAYER_FILE)
    return {(r["model"], r["mode"]): float(r["sustained_over_burst"]) for r in table.rows}
