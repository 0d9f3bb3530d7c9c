"""Transfer of fitted efficiencies to a GPU the trainer was never measured on."""

import pytest

from autoplan.profiles.profile import load_profile
from autoplan.profiles.transfer import TRANSFERRED, attention_transfer_factor, transfer_parameters
from autoplan.specs.hardware import load_gpu


def test_attention_factor_hopper_to_ampere_is_flash_attention_2_ratio():
    # FlashAttention-2 fwd+bwd: 225/312 = 0.7212 of A100's peak, 335/989 = 0.3387 of H100's
    # (Dao 2023, Sec. 4.1 and Fig. 7): 0.7212 / 0.3387 = 2.129.
    factor = attention_transfer_factor(load_gpu("h100-96gb-500w"), load_gpu("a100-80gb"))
    assert factor == pytest.approx(2.129, abs=1e-3)
    assert attention_transfer_factor(load_gpu("a100-80gb"), load_gpu("h100-sxm")) == pytest.approx(1 / 2.129, abs=1e-3)


@pytest.mark.parametrize("source, target", [("h100-96gb-500w", "h200"), ("a100-40gb", "a100-80gb"),
                                            ("h100-sxm", "b200")])
def test_attention_factor_is_one_within_a_generation_or_without_a_figure(source, target):
    assert attention_transfer_factor(load_gpu(source), load_gpu(target)) == 1.0


def test_torchtitan_on_a100_carries_the_hopper_attention_efficiency_scaled():
    profile = load_profile("torchtitan")
    fitted = profile.parameters_for("h100-96gb-500w").value("attention_efficiency")
    moved = profile.parameters_for("a100-80gb")
    assert moved.fitted_on.startswith(TRANSFERRED)
    assert "attention_efficiency ×" in moved.fitted_on
    assert moved.value("attention_efficiency") == pytest.approx(min(1.0, fitted * 2.129), rel=1e-3)
    # Same generation: the efficiency is carried unchanged.
    assert profile.parameters_for("h200").value("attention_efficiency") == pytest.approx(fitted)


def test_gemm_half_flops_scales_with_the_compute_peaks_of_a_power_limited_source():
    # F_half/(η·peak) is a fixed time per GEMM: carried at the ratio of the compute peaks, which
    # for the 500 W source is its nominal peak × power_limited_clock_fraction. (No shipped profile
    # fits it on a power-limited part now that torchtitan holds its default: a fit of 4e10 FLOP.)
    default = load_profile("torchtitan").parameters["default"]
    fitted = default.with_values({"gemm_half_flops": 4e10, "gemm_efficiency_max": 0.6})
    source, target = load_gpu("h100-96gb-500w"), load_gpu("a100-80gb")
    moved = transfer_parameters({"h100-96gb-500w": fitted}, "a100-80gb", default)
    ratio = target.peak_bf16_flops_per_s / (source.peak_bf16_flops_per_s * source.power_limited_clock_fraction)
    assert source.power_limited_clock_fraction < 1.0
    assert moved.value("gemm_half_flops") == pytest.approx(4e10 * ratio, rel=1e-6)
    # A value held at its default is not fitted: it is the target's default too, unscaled.
    unfitted = transfer_parameters({"h100-96gb-500w": default.with_values({"gemm_efficiency_max": 0.6})},
                                   "a100-80gb", default)
    assert unfitted.value("gemm_half_flops") == default.value("gemm_half_flops")


def test_the_eager_attention_correction_survives_transfer():
    """megatron's unfused_attention_factor (3.28, fitted on the 2021 A100-80GB eager runs) stands
    for what the eager kernel does on any GPU: carried to the 40 GB part, where it was dropped."""
    profile = load_profile("megatron")
    fitted = profile.parameters_for("a100-80gb").value("unfused_attention_factor")
    assert fitted > 1.0
    moved = profile.parameters_for("a100-40gb")
    assert moved.fitted_on.startswith(TRANSFERRED) and "unfused_attention_factor as fitted" in moved.fitted_on
    assert moved.value("unfused_attention_factor") == fitted
    assert moved.value("step_overhead_s") == profile.parameters["default"].value("step_overhead_s")


@pytest.mark.parametrize("kernel", ["flash", "eager"])
def test_the_80gb_a100_is_never_slower_than_the_40gb_one(kernel):
    """The same 70B layout was predicted 399 tokens/s/GPU on the 40 GB A100 and 322 on the 80 GB
    one: the eager-attention correction was applied under the flash kernel on the calibrated part
    only. The 80 GB part has the same compute and more HBM bandwidth (2.04 vs 1.56 TB/s)."""
    from autoplan.api import build_context, build_training
    from autoplan.cost.evaluate import evaluate
    from autoplan.layout import LayoutBatch, resolve_layout

    speeds = {}
    for hardware in ("a100-40gb", "a100-80gb"):
        training = build_training(512, 4096, 1024, hardware=hardware, attention_kernel=kernel)
        ctx = build_context("llama3-70b", training)
        layout = resolve_layout({"tp": 8, "pp": 4, "vpp": 4, "cp": 2, "mbs": 1, "zero": 1}, training)
        speeds[hardware] = float(evaluate(ctx, LayoutBatch.from_layouts([layout]))["tokens_per_s_per_gpu"][0])
    assert speeds["a100-80gb"] >= speeds["a100-40gb"], speeds


@pytest.mark.parametrize("trainer", ["deepspeed", "hf"])
def test_a_trainer_calibrated_nowhere_starts_from_another_trainers_calibration(trainer):
    """DeepSpeed and the HF Trainer were never measured: they started from the kernel peaks of
    defaults.yaml (GEMM 0.75, attention 0.45), so an uncalibrated DeepSpeed ZeRO-3 run showed 67%
    HFU and beat calibrated Megatron on the same layout. They now start from the calibrated pair
    on the nearest GPU (on an H100: Megatron's fit there) and say so."""
    profile, megatron = load_profile(trainer), load_profile("megatron").parameters_for("h100-sxm")
    assert set(profile.parameters) == {"default"}
    moved = profile.parameters_for("h100-sxm")
    assert moved.fitted_on.startswith(f"{TRANSFERRED} from megatron's calibration on h100-sxm")
    for name in ("gemm_efficiency_max", "attention_efficiency"):
        assert moved.value(name) == megatron.value(name) < profile.parameters["default"].value(name)


def test_an_uncalibrated_deepspeed_does_not_beat_calibrated_megatron_on_one_layout():
    from autoplan.api import build_context, build_training
    from autoplan.cost.evaluate import evaluate
    from autoplan.layout import LayoutBatch, resolve_layout

    training = build_training(64, 8192, 512)
    layout = resolve_layout({"tp": 1, "pp": 1, "cp": 1, "mbs": 1, "zero": 3, "recompute": "full"}, training)
    table = {t: evaluate(build_context("llama3-8b", training, trainer=t), LayoutBatch.from_layouts([layout]))
             for t in ("deepspeed", "megatron")}
    assert table["deepspeed"]["tokens_per_s_per_gpu"][0] <= table["megatron"]["tokens_per_s_per_gpu"][0]
    assert table["deepspeed"]["hfu"][0] < 0.55  # was 0.67 from the kernel peaks
