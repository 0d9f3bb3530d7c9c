"""The probe's fits on synthetic timings with known answers (no PyTorch needed).

Each generator draws timings from the model the fit assumes, with parameters chosen here; the fit
must give those parameters back (exactly without noise, within the noise with it)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from autoplan.probe.calibrated import kernel_parameters, link_parameters
from autoplan.probe.fit import (
    BUS_FACTORS,
    LATENCY_HOPS,
    fit_collective,
    fit_collectives,
    fit_kernels,
    link_figures,
    with_bandwidths,
)
from autoplan.probe.tables import as_table, collective_row, kernel_row
from autoplan.specs.hardware import load_gpu

SIZES = np.array([2.0**p for p in range(12, 31, 2)])  # 4 KiB .. 1 GiB
NOISE = np.array([1.02, 0.98, 1.01, 0.99, 1.015, 0.985, 1.0, 1.02, 0.98, 1.01])  # ±2%, fixed


def test_latency_and_bus_bandwidth_of_an_all_reduce():
    # t = 20 us + S/algbw, algbw 50 GB/s, 8 ranks: busbw = 50·2·7/8 = 87.5 GB/s (nccl-tests
    # PERFORMANCE.md), per hop 20/(2·log2 8) = 3.333 us (cost.comm.all_reduce_s charges 2·log2(n)·α).
    seconds = 20e-6 + SIZES / 50e9
    f = fit_collective("all_reduce", "scale_up", 8, SIZES, seconds)
    assert f.latency_s == pytest.approx(20e-6, rel=1e-9)
    assert f.algbw_bytes_per_s == pytest.approx(50e9, rel=1e-9)
    assert f.busbw_bytes_per_s == pytest.approx(87.5e9, rel=1e-9)
    assert f.hop_latency_s == pytest.approx(20e-6 / 6, rel=1e-9)
    assert f.median_error == pytest.approx(0.0, abs=1e-9)


def test_the_fit_holds_within_the_noise():
    # all-gather over 4 ranks: α 35 us, algbw 120 GB/s -> busbw 120·3/4 = 90 GB/s, hop 35/2 us
    seconds = (35e-6 + SIZES / 120e9) * NOISE
    f = fit_collective("all_gather", "scale_up", 4, SIZES, seconds)
    assert f.busbw_bytes_per_s == pytest.approx(90e9, rel=0.03)
    assert f.latency_s == pytest.approx(35e-6, rel=0.05)
    assert f.hop_latency_s == pytest.approx(17.5e-6, rel=0.05)


def test_rows_are_grouped_per_collective_and_level():
    rows = [collective_row("send_recv", "scale_out", 2, s, 8e-6 + s / 40e9) for s in SIZES]
    rows += [collective_row("all_reduce", "scale_up", 2, s, 10e-6 + s / 100e9) for s in SIZES]
    rows.append(collective_row("reduce_scatter", "scale_up", 2, 0.0, 0.0, note="not run"))
    fits = {(f.collective, f.level): f for f in fit_collectives(rows)}
    assert set(fits) == {("send_recv", "scale_out"), ("all_reduce", "scale_up")}
    assert fits["send_recv", "scale_out"].busbw_bytes_per_s == pytest.approx(40e9, rel=1e-9)  # factor 1
    up = link_figures(list(fits.values()), "scale_up")
    assert up.bus_bytes_per_s == pytest.approx(100e9 * 2 * 1 / 2, rel=1e-9)  # 2(n-1)/n = 1 at n = 2
    assert up.hop_latency_s == pytest.approx(10e-6 / 2, rel=1e-9)
    filled = with_bandwidths(rows[:1])[0]
    assert filled["algbw_gb_per_s"] == pytest.approx(SIZES[0] / (8e-6 + SIZES[0] / 40e9) / 1e9)


def test_factors_and_hops_are_the_cost_models():
    """BUS_FACTORS and LATENCY_HOPS against cost.comm's own collective times: with busbw B and
    per-hop latency α, comm's time is S·factor(n)/B + hops(n)·α for each collective."""
    from autoplan.api import build_context, build_training
    from autoplan.cost import comm

    ctx = build_context("llama3-8b", build_training(8, 4096, 8, hardware="h100-sxm"))
    busbw = ctx.cluster.gpu.scale_up_bytes_per_s * ctx.efficiency.scale_up_efficiency
    alpha = ctx.cluster.gpu.scale_up_latency_s
    S = np.array([1e6])
    for n in (2, 4, 8):
        size = np.array([float(n)])
        link = comm.group_link(ctx, size, np.array([1.0]))
        times = {"all_reduce": comm.all_reduce_s(link, S), "all_gather": comm.all_gather_s(link, S),
                 "reduce_scatter": comm.reduce_scatter_s(link, S), "all_to_all": comm.all_to_all_s(ctx, link, S)}
        if n == 2:
            times["send_recv"] = comm.p2p_s(ctx, np.array([1.0]), size, S)
        for name, t in times.items():
            expected = S[0] * BUS_FACTORS[name](n) / busbw + LATENCY_HOPS[name](n) * alpha
            assert float(t[0]) == pytest.approx(expected, rel=1e-12), (name, n)


def _gemm_rows(efficiency: float, half_flops: float, peak: float, kind: str = "gemm_bf16", speedup: float = 1.0):
    rows = []
    for h in (1024, 2048, 4096, 8192):
        for tokens in (1024, 4096, 16384):
            flops = 2.0 * tokens * h * 3.5 * h
            seconds = (flops + half_flops) / (efficiency * peak) / speedup
            rows.append(kernel_row(kind, flops=flops, seconds=seconds, h=h, tp=1, tokens=tokens, note="up",
                                   **{"pass": "fwd"}))
    return rows


def _kernel_table(peak: float):
    rows = _gemm_rows(0.7, 3e9, peak) + _gemm_rows(0.7, 3e9, peak, "gemm_fp8_tensorwise", speedup=1.8)
    for seq in (1024, 2048, 4096, 8192, 16384):  # frac(s) = 0.5·s/(s + 1000)
        flops = 3.5 * 4.0 * seq * seq * 32 * 128 / 2.0
        fraction = 0.5 * seq / (seq + 1000.0)
        rows.append(kernel_row("attention_flash", flops=flops, seconds=flops / (fraction * peak), seq=seq, heads=32,
                               head_dim=128, **{"pass": "fwd+bwd"}))
    rows += [kernel_row("hbm_copy", seconds=b / 3.9e12, num_bytes=b) for b in (2**29, 2**32)]  # 3.9 TB/s
    rows.append(kernel_row("hbm_copy", seconds=2**31 / 3.0e12, num_bytes=2**31))  # a slower one: the max counts
    return as_table({"device": "synthetic"}, rows)


def test_gemm_attention_copy_and_fp8_curves_come_back():
    peak = 989e12
    k = fit_kernels(_kernel_table(peak), peak, large_gemm_flops=1e11)
    assert k.gemm_bf16.efficiency == pytest.approx(0.7, rel=1e-9)
    assert k.gemm_bf16.half_flops == pytest.approx(3e9, rel=1e-6)
    assert k.gemm_bf16.fixed_s == pytest.approx(3e9 / (0.7 * peak), rel=1e-6)
    assert k.fp8_speedup == {"tensorwise": pytest.approx(1.8, rel=1e-9)}
    assert (k.attention_backend, k.attention_max_fraction, k.attention_half_seq) == (
        "flash", pytest.approx(0.5, rel=1e-9), pytest.approx(1000.0, rel=1e-6))
    assert k.copy_bytes_per_s == pytest.approx(3.9e12, rel=1e-9)
    # On an H200 (4.8 TB/s): hbm_efficiency 3.9/4.8 = 0.8125; every value inside its bounds, no note.
    notes: list[str] = []
    values = kernel_parameters(k, load_gpu("h200").hbm_bytes_per_s, notes)
    assert values == {"gemm_efficiency_max": pytest.approx(0.7), "gemm_half_flops": pytest.approx(3e9),
                      "attention_efficiency": pytest.approx(0.5), "attention_half_seq_tokens": pytest.approx(1000.0),
                      "hbm_efficiency": pytest.approx(0.8125), "fp8_gemm_speedup": pytest.approx(1.8)}
    assert notes == []


def test_a_fit_outside_its_bounds_is_kept_on_the_bound_and_said():
    peak = 989e12
    k = fit_kernels(_kernel_table(peak), peak / 2, large_gemm_flops=1e11)  # against half the peak: 1.4
    notes: list[str] = []
    values = kernel_parameters(k, 4.8e12, notes)
    assert values["gemm_efficiency_max"] == 1.0
    assert any(n.startswith("gemm_efficiency_max: fitted 1.4") for n in notes), notes


def test_link_efficiencies_are_the_all_reduce_busbw_over_the_datasheet():
    # busbw 337.5 GB/s on an H100's 450 GB/s NVLink per direction: 0.75; NIC 50 GB/s, busbw 40: 0.8
    gpu = load_gpu("h100-sxm")
    up = fit_collectives([collective_row("all_reduce", "scale_up", 8, s, 5e-6 + s / (337.5e9 * 8 / 14)) for s in SIZES])
    out = fit_collectives([collective_row("all_reduce", "scale_out", 4, s, 9e-6 + s / (40e9 * 4 / 6)) for s in SIZES])
    links = {"scale_up": link_figures(up, "scale_up"), "scale_out": link_figures(out, "scale_out")}
    values = link_parameters(gpu, links, [])
    assert values == {"scale_up_efficiency": pytest.approx(0.75), "scale_out_efficiency": pytest.approx(0.8)}
    assert links["scale_out"].hop_latency_s == pytest.approx(9e-6 / (2 * math.log2(4)))


def test_a_collective_is_refused_on_one_rank_or_by_an_unknown_name():
    with pytest.raises(ValueError, match="at least 2 ranks"):
        fit_collective("all_reduce", "scale_up", 1, SIZES, SIZES / 1e9)
    with pytest.raises(ValueError, match="unknown collective 'broadcast'"):
        fit_collective("broadcast", "scale_up", 2, SIZES, SIZES / 1e9)


def test_a_failed_attention_backend_gives_way_to_the_next():
    peak = 989e12
    table = _kernel_table(peak)
    failed = kernel_row("attention_cudnn", seq=1024, heads=32, head_dim=128, note="failed: not on this GPU")
    k = fit_kernels(as_table(table.meta, [failed] + table.rows), peak, large_gemm_flops=1e11)
    assert k.attention_backend == "flash"  # the cudnn rows hold no timing
    no_attention = [r for r in table.rows if not str(r["kind"]).startswith("attention")]
    with pytest.raises(ValueError, match="timed no attention"):
        fit_kernels(as_table(table.meta, no_attention + [failed]), peak, large_gemm_flops=1e11)
