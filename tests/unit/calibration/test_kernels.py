"""The kernel tables measured on an H100 and what autoplan/calibration/kernels.py reads off them."""

import numpy as np
import pytest

from autoplan.calibration.kernels import (
    Table,
    attention_curve,
    elementwise_figures,
    fit_linear_time,
    fp8_speedups,
    kernel_figures,
    layer_params,
    read_table,
)

PEAK = 989e12


def test_linear_time_fit_recovers_a_known_gemm_curve():
    flops = np.geomspace(1e8, 1e13, 40)
    seconds = (flops + 3e9) / (0.7 * PEAK)
    fit = fit_linear_time(flops, seconds, PEAK)
    assert fit.efficiency == pytest.approx(0.7, rel=1e-9)
    assert fit.half_flops == pytest.approx(3e9, rel=1e-9)
    assert fit.fixed_s == pytest.approx(3e9 / (0.7 * PEAK), rel=1e-9)
    assert fit.median_error < 1e-9


def test_linear_time_fit_needs_two_timed_rows():
    with pytest.raises(ValueError, match="at least 2"):
        fit_linear_time([1e9, 2e9], [1e-5, 0.0], PEAK)


def _attention_rows(max_fraction, half_seq):
    rows = []
    for s in (1024, 4096, 16384):
        frac = max_fraction * s / (s + half_seq)
        flops = 3.5 * 2.0 * s * s * 32 * 128
        rows.append({"kind": "attention_flash", "pass": "fwd+bwd", "seq": s, "flops": flops,
                     "seconds": flops / (frac * PEAK)})
    return Table({}, rows)


def test_attention_curve_recovers_its_maximum_and_half_sequence():
    curve = attention_curve(_attention_rows(0.5, 1200.0), "flash", PEAK)
    assert curve.max_fraction == pytest.approx(0.5, rel=1e-9)
    assert curve.half_seq == pytest.approx(1200.0, rel=1e-9)
    with pytest.raises(ValueError, match="cudnn"):
        attention_curve(_attention_rows(0.5, 1200.0), "cudnn", PEAK)


def test_fp8_speedup_pairs_each_gemm_with_its_bf16_twin_and_skips_small_ones():
    base = {"h": 4096, "tp": 1, "tokens": 4096, "note": "up"}
    rows = [{**base, "kind": "gemm_bf16", "pass": "fwd", "flops": 2e11, "seconds": 2.0},
            {**base, "kind": "gemm_fp8_tensorwise", "pass": "fwd", "flops": 2e11, "seconds": 1.25},
            {**base, "kind": "gemm_bf16", "pass": "dgrad", "flops": 1e9, "seconds": 1.0},
            {**base, "kind": "gemm_fp8_tensorwise", "pass": "dgrad", "flops": 1e9, "seconds": 2.0}]
    spread = fp8_speedups(Table({}, rows), "tensorwise")
    assert (spread.median, spread.n) == (1.6, 1)


def test_elementwise_bytes_take_out_the_gradient_accumulation():
    row = {"model": "m", "hidden": 1024, "heads": 8, "kv_heads": 8, "ffn": 4096, "seq": 1000, "mbs": 1, "mode": "eager"}
    copy = 1e12
    params = layer_params(row)
    assert params == 4 * 1024 * 1024 + 3 * 1024 * 4096 + 2 * 1024  # kv_heads = heads: k, v are h x h
    forward_s = 50.0 * 1000 * 1024 / copy  # 50 B per token and hidden unit
    backward_s = (100.0 * 1000 * 1024 + 6.0 * params) / copy  # 2x forward + AccumulateGrad
    rows = [{**row, "pass": "fwd", "elementwise_s": forward_s},
            {**row, "pass": "fwd+bwd", "elementwise_s": forward_s + backward_s}]
    figures = elementwise_figures(Table({}, rows), "eager", copy)
    assert figures.forward_bytes.median == pytest.approx(50.0)
    assert figures.backward_ratio.median == pytest.approx(2.0)


def test_read_table_needs_its_device_line(tmp_path):
    bad = tmp_path / "k.csv"
    bad.write_text("kind,seconds\ngemm_bf16,1\n")
    with pytest.raises(ValueError, match="measuring device"):
        read_table(bad)
    good = tmp_path / "g.csv"
    good.write_text('# {"device": "X"}\nkind,seconds\ngemm_bf16,0.5\n')
    table = read_table(good)
    assert table.meta == {"device": "X"} and table.rows == [{"kind": "gemm_bf16", "seconds": 0.5}]


def test_the_shipped_h100_tables_give_physical_figures():
    """The measured H100 SXM figures sit where the hardware allows (each a fraction of a
    datasheet peak at most 1) and agree with published kernel figures: FlashAttention-2 at most
    335 TFLOP/s forward + backward on an H100 (Dao 2023, Fig. 7), cuBLAS large BF16 GEMMs at
    0.6-0.85 of the peak, FP8 below twice BF16 for the median large GEMM."""
    k = kernel_figures()
    assert "H100" in k.device
    assert 0.6 <= k.gemm_bf16.efficiency <= 0.85
    assert 1e8 <= k.gemm_bf16.half_flops <= 5e10
    assert 1.5 <= k.fp8_speedup["tensorwise"].median <= 2.0
    assert k.fp8_speedup["rowwise"].median < k.fp8_speedup["tensorwise"].median
    assert k.attention["flash"].max_fraction <= 335 / 989 * 1.05
    assert k.attention["cudnn"].max_fraction > k.attention["flash"].max_fraction
    assert 0.8 <= k.hbm_copy_efficiency <= 0.95
    assert k.elementwise["compile"].forward_bytes.median < k.elementwise["eager"].forward_bytes.median
    big = [ratio for experts, per_expert, ratio, _ in k.grouped if per_expert >= 1024 and experts > 1]
    assert all(0.9 <= r <= 1.1 for r in big)  # the grouped GEMM runs as one GEMM of every local token


def _measured_elementwise_bytes(mode: str, params) -> float:
    """The measured forward element-wise traffic of a Llama layer, expressed at ``params``'
    HBM efficiency (the cost model divides the bytes by hbm_efficiency × the datasheet bandwidth)."""
    from autoplan.calibration.kernels import elementwise_bytes_at

    return elementwise_bytes_at(kernel_figures(), mode, params.value("hbm_efficiency"))


def test_the_hf_profile_moves_what_an_eager_llama_layer_was_measured_to_move():
    from autoplan.profiles import load_profile

    params = load_profile("hf").parameters["default"]
    expected = _measured_elementwise_bytes("eager", params)
    assert params.value("elementwise_bytes_per_token_hidden") == pytest.approx(expected, rel=0.02)


def test_the_default_elementwise_traffic_is_a_fused_layers():
    """The default (trainers with fused norms, rotary and SwiGLU: Megatron with Transformer
    Engine, torchtitan compiled) within 10% of the compiled layer's measured traffic."""
    from autoplan.profiles.parameter_files import load_defaults

    params = load_defaults()
    expected = _measured_elementwise_bytes("compile", params)
    assert params.value("elementwise_bytes_per_token_hidden") == pytest.approx(expected, rel=0.10)


def test_profiles_that_take_the_measured_kernels_hold_their_figures():
    """Where a profile states a value as measured on the H100 (nanotron's GEMM curve and
    attention, the FP8 speed-up default), it is the figure the
    shipped tables give (1%, the rounding of the stated value)."""
    from autoplan.profiles import load_profile
    from autoplan.profiles.parameter_files import load_defaults

    k = kernel_figures()
    nanotron = load_profile("nanotron").parameters["h100-sxm-efa"]
    assert nanotron.value("gemm_efficiency_max") == pytest.approx(k.gemm_bf16.efficiency, rel=0.01)
    assert nanotron.value("gemm_half_flops") == pytest.approx(k.gemm_bf16.half_flops, rel=0.01)
    flash = k.attention["flash"]
    assert nanotron.value("attention_efficiency") == pytest.approx(flash.max_fraction, rel=0.01)
    assert nanotron.value("attention_half_seq_tokens") == pytest.approx(flash.half_seq, rel=0.01)
    for seq in (4096, 32768):  # the curve it costs against the kernel's measured fraction
        curve = nanotron.value("attention_efficiency") * seq / (seq + nanotron.value("attention_half_seq_tokens"))
        assert curve == pytest.approx(flash.by_seq[seq], rel=0.03), seq
    assert load_defaults().value("fp8_gemm_speedup") == pytest.approx(k.fp8_speedup["tensorwise"].median, rel=0.01)


def test_smaller_heads_run_attention_below_the_larger_ones():
    """Head dim 64 against 128 at the same heads and tokens (the shipped H100 table): every
    backend and length slower per FLOP, as FlashAttention-2's own figures show (Dao 2023,
    Fig. 7: head dim 64 below 128), and by a bounded share (0.7-1.0)."""
    from autoplan.calibration.kernels import HEAD_DIM_FILE, head_dim_ratios
    from autoplan.paths import data_dir

    ratios = head_dim_ratios(read_table(data_dir("validation") / HEAD_DIM_FILE), PEAK)
    assert set(ratios) == {"flash", "cudnn"}
    for backend, by_seq in ratios.items():
        assert len(by_seq) == 5, backend
        assert all(0.7 <= r < 1.0 for r in by_seq.values()), (backend, by_seq)


def test_half_head_dim_inverts_the_head_dim_curve():
    from autoplan.calibration.kernels import half_head_dim

    for d0 in (0.0, 20.0, 43.0, 128.0):  # r = 64(128 + d0)/(128(64 + d0)) back to d0
        assert half_head_dim(64 * (128 + d0) / (128 * (64 + d0))) == pytest.approx(d0, abs=1e-9)
    with pytest.raises(ValueError, match=r"must lie in \(0.5, 1\]"):
        half_head_dim(0.4)


def test_nanotron_states_the_flash_attention_head_dim_figure_measured():
    """nanotron runs FlashAttention-2: its attention_half_head_dim is the d_0 of the shipped
    head-dim table's median FlashAttention-2 ratio (1%)."""
    import statistics

    from autoplan.calibration.kernels import HEAD_DIM_FILE, half_head_dim, head_dim_ratios
    from autoplan.paths import data_dir
    from autoplan.profiles import load_profile

    ratios = head_dim_ratios(read_table(data_dir("validation") / HEAD_DIM_FILE), PEAK)
    measured = half_head_dim(statistics.median(ratios["flash"].values()))
    stated = load_profile("nanotron").parameters["h100-sxm-efa"].value("attention_half_head_dim")
    assert stated == pytest.approx(measured, rel=0.01)


def _moe_table(fixed_s, per_token_s, experts_s=lambda t: 1e-3 + 2e-7 * t):
    rows = []
    for t in (128, 256, 512, 2048, 8192, 16384):
        rows.append({"config": "toy", "hidden": 1024, "experts": 4, "top_k": 2, "ffn_expert": 512, "tokens": t,
                     "part": "experts", "seconds": experts_s(t)})
        rows.append({"config": "toy", "hidden": 1024, "experts": 4, "top_k": 2, "ffn_expert": 512, "tokens": t,
                     "part": "layer", "seconds": experts_s(t) + fixed_s + per_token_s * t})
    return Table({}, rows)


def test_moe_fixed_time_is_the_intercept_of_layer_less_experts():
    from autoplan.calibration.kernels import moe_fixed_times

    (fit,) = moe_fixed_times(_moe_table(7e-4, 3e-7))
    assert (fit.config, fit.n) == ("toy", 6)
    assert fit.fixed_s == pytest.approx(7e-4, rel=1e-9)
    assert fit.seconds_per_token == pytest.approx(3e-7, rel=1e-9)


def test_moe_fixed_time_shrugs_off_one_noisy_point():
    from autoplan.calibration.kernels import moe_fixed_times

    table = _moe_table(7e-4, 3e-7)
    table.rows[-1]["seconds"] += 5e-3  # the layer at 16,384 tokens 5 ms slow
    assert moe_fixed_times(table)[0].fixed_s == pytest.approx(7e-4, rel=0.05)


def test_expert_floor_ratio_counts_each_weight_twelve_bytes():
    from autoplan.calibration.kernels import expert_floor_ratios

    # 3·4·1024·512 weights × (2 + 2 + 2 + 6) B at 1e12 B/s = 75.5 µs; timed 151 µs at 128 tokens
    params = 3 * 4 * 1024 * 512
    table = _moe_table(7e-4, 3e-7, experts_s=lambda t: 2 * params * 12 / 1e12 + 0 * t)
    assert expert_floor_ratios(table, 1e12) == {"toy": pytest.approx(2.0, rel=1e-12)}


def test_default_moe_fixed_time_is_the_shipped_measurement():
    """defaults.yaml's moe_layer_fixed_s is the median over the shipped H100 and H200 tables'
    configurations (2%), each of which lies within 0.5-1.5 ms."""
    import statistics

    from autoplan.calibration.kernels import MOE_LAYER_FILES, moe_fixed_times
    from autoplan.paths import data_dir
    from autoplan.profiles.parameter_files import load_defaults

    fits = [f for name in MOE_LAYER_FILES for f in moe_fixed_times(read_table(data_dir("validation") / name))]
    assert sorted(f.config for f in fits) == sorted(["mixtral-8x7b", "qwen3-30b-a3b", "llama4-scout"] * 2)
    assert all(5e-4 < f.fixed_s < 1.5e-3 for f in fits), fits
    assert load_defaults().value("moe_layer_fixed_s") == pytest.approx(statistics.median(f.fixed_s for f in fits), rel=0.02)


def test_recipe_gain_share_is_the_gain_over_the_tensorwise_gain():
    from autoplan.calibration.kernels import recipe_gain_shares

    rows = []
    for k, (bf16, tensor, block) in {1024: (3.0, 1.5, 2.0), 2048: (4.0, 2.0, 2.5)}.items():
        for recipe, s in (("bf16", bf16), ("tensorwise", tensor), ("blockwise", block)):
            rows.append({"tokens": 4096, "k": k, "n": 4096, "recipe": recipe, "flops": 1e12, "seconds": s})
    rows.append({"tokens": 4096, "k": 512, "n": 512, "recipe": "blockwise", "flops": 1e9, "seconds": 9.0})  # too small
    shares = recipe_gain_shares(Table({}, rows))
    # (3/2 − 1)/(3/1.5 − 1) = 0.5; (4/2.5 − 1)/(4/2 − 1) = 0.6
    assert shares["blockwise"].n == 2
    assert (shares["blockwise"].low, shares["blockwise"].high) == (pytest.approx(0.5), pytest.approx(0.6))


def test_hopper_recipe_shares_are_the_shipped_measurements():
    """cost/fp8.py's Hopper blockwise and row-wise shares are the medians over the shipped H100
    and H200 tables, twelve GEMMs each (2%)."""
    from autoplan.calibration.kernels import FP8_RECIPES_FILES, recipe_gain_shares
    from autoplan.cost.fp8 import RECIPE_GAIN_SHARE
    from autoplan.paths import data_dir

    shares = recipe_gain_shares([read_table(data_dir("validation") / f) for f in FP8_RECIPES_FILES])
    for recipe in ("blockwise", "rowwise"):
        assert shares[recipe].n == 24 and 0.0 < shares[recipe].low < shares[recipe].high < 1.0
        assert RECIPE_GAIN_SHARE[recipe][0] == pytest.approx(shares[recipe].median, rel=0.02)


def test_hopper_kernel_figures_carry_from_h100_to_h200():
    """The same benchmark on an H200 (same die and datasheet BF16 peak, more HBM) gives the H100's
    fractions of peak within 3% (GEMM ceiling, both attention kernels, copy) and its fixed GEMM
    time within 10%: what profiles/transfer.py carries unchanged within a generation."""
    from autoplan.calibration.kernels import H200_KERNELS_FILE, shipped_tables
    from autoplan.paths import data_dir
    from autoplan.specs.hardware import load_gpu

    h100 = kernel_figures()
    h200 = kernel_figures(read_table(data_dir("validation") / H200_KERNELS_FILE), shipped_tables()[1], load_gpu("h200"))
    assert h200.device == "NVIDIA H200"
    for a, b in ((h100.gemm_bf16.efficiency, h200.gemm_bf16.efficiency),
                 (h100.attention["flash"].max_fraction, h200.attention["flash"].max_fraction),
                 (h100.attention["cudnn"].max_fraction, h200.attention["cudnn"].max_fraction),
                 (h100.hbm_copy_efficiency, h200.hbm_copy_efficiency)):
        assert b == pytest.approx(a, rel=0.03)
    assert h200.gemm_bf16.fixed_s == pytest.approx(h100.gemm_bf16.fixed_s, rel=0.10)
