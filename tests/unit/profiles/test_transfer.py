"""Transfer of fitted efficiencies to a GPU the trainer was never measured on."""

import pytest

from autoplan.profiles.profile import load_profile
from autoplan.profiles.transfer import TRANSFERRED, attention_transfer_factor
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
    # for the 500 W source is its nominal peak × power_limited_clock_fraction.
    profile = load_profile("torchtitan")
    source, target = load_gpu("h100-96gb-500w"), load_gpu("a100-80gb")
    fitted = profile.parameters_for("h100-96gb-500w").value("gemm_half_flops")
    moved = profile.parameters_for("a100-80gb").value("gemm_half_flops")
    ratio = target.peak_bf16_flops_per_s / (source.peak_bf16_flops_per_s * source.power_limited_clock_fraction)
    assert moved == pytest.approx(fitted * ratio, rel=1e-6)
