"""Efficiencies fitted on one GPU, carried to a GPU the trainer was never measured on.

A physical efficiency is a fraction of a hardware peak (GEMM, attention, HBM, NVLink, NIC) or
an overlap fraction: the same fraction applies to another GPU's peaks, which the cost model
reads from the GPU's own figures (``hardware_db/gpus``). The one dimensioned efficiency,
``gemm_half_flops``, stands for a fixed time per GEMM (launch, tail wave): F_half/(η·peak);
keeping that time means scaling F_half with the peak (the compute peak: nominal ×
``power_limited_clock_fraction``, so that a power-capped source's fit carries its clock's share). Corrections are not carried: each stands in
for a mechanism seen on its own measured rows, so the target GPU gets the profile's defaults;
except a correction of an attention kernel's regime (``Parameter.regime``: unfused_attention_factor,
eager attention), which stands for what that kernel does on any GPU and is carried.
The attention kernel is the exception: the fraction of the peak that one flash-attention kernel
reaches depends on the generation it was written for. PyTorch's SDPA flash backend (what
torchtitan runs) is FlashAttention-2, tuned for Ampere: its forward + backward reaches up to
225 TFLOP/s on A100 (72% of 312) and, without Hopper's wgmma/TMA instructions, up to 335
TFLOP/s on H100 (34% of 989) (Dao 2023, arXiv 2307.08691, Sec. 4.1 and Fig. 7).
``attention_efficiency`` therefore moves across generations by the ratio of those fractions. That
assumes the trainer runs FlashAttention-2 on both GPUs (PyTorch SDPA, flash-attn 2: torchtitan,
nanotron, llm-foundry); a Hopper-native kernel (FlashAttention-3, cuDNN) is not this ratio.
The source GPU is the calibrated one nearest in (BF16 peak, HBM bandwidth), log distance.
``fitted_on`` says that the values are transferred and from where, so every prediction for the
pair says it was not measured.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from autoplan.profiles.efficiency import PARAMETERS, CalibratedParameters
from autoplan.specs.gpu_generation import generation_of

TRANSFERRED = "transferred"  # the first word of ``fitted_on`` for transferred values
# FlashAttention-2 forward + backward, best published fraction of the BF16 dense peak per
# generation (Dao 2023, arXiv 2307.08691: Sec. 4.1 "up to 225 TFLOPs/s" on A100 of 312; Fig. 7,
# "up to 335 TFLOPs/s" on H100 SXM of 989). Generations not listed keep the fitted value.
FLASH_ATTENTION_2_PEAK_FRACTION = {"ampere": 225.0 / 312.0, "hopper": 335.0 / 989.0}


def _distance(a, b) -> float:
    return (abs(math.log(a.peak_bf16_flops_per_s / b.peak_bf16_flops_per_s))
            + abs(math.log(a.hbm_bytes_per_s / b.hbm_bytes_per_s)))


def attention_transfer_factor(source_gpu, target_gpu) -> float:
    """The factor on ``attention_efficiency`` from ``source_gpu`` to ``target_gpu`` (GPUSpecs):
    FLASH_ATTENTION_2_PEAK_FRACTION of the target's generation over the source's; 1 when either
    generation is not listed or both are the same."""
    source, target = generation_of(source_gpu), generation_of(target_gpu)
    if source not in FLASH_ATTENTION_2_PEAK_FRACTION or target not in FLASH_ATTENTION_2_PEAK_FRACTION:
        return 1.0
    return FLASH_ATTENTION_2_PEAK_FRACTION[target] / FLASH_ATTENTION_2_PEAK_FRACTION[source]


def transfer_parameters(calibrated: Mapping[str, CalibratedParameters], target_gpu: str,
                        default: CalibratedParameters, *,
                        borrowed: Mapping[tuple[str, str], CalibratedParameters] | None = None) -> CalibratedParameters:
    """The parameters for ``target_gpu`` (a preset name) from the nearest calibrated GPU; the
    ``default`` ones when the GPU is not a preset.

    A trainer calibrated on no GPU at all (``calibrated`` empty) starts from ``borrowed``, the
    calibrations of the other trainers ((trainer, GPU) -> parameters): their nearest GPU, and of
    the trainers calibrated there the one with the lowest fitted GEMM ceiling (the conservative
    pick), physical efficiencies only; never from the kernel peaks of the defaults, which predicted
    an uncalibrated DeepSpeed at 67% HFU, beating calibrated Megatron on the same layout."""
    from autoplan.errors import UnknownNameError
    from autoplan.specs.hardware import load_gpu

    pairs = {("", name): params for name, params in calibrated.items()} or dict(borrowed or {})
    if not pairs:
        return default
    try:
        target = load_gpu(target_gpu)
        sources = {gpu: load_gpu(gpu) for _, gpu in pairs}
    except (UnknownNameError, OSError):
        return default
    (trainer, name), fitted = min(sorted(pairs.items()), key=lambda item: (
        _distance(sources[item[0][1]], target), item[1].value("gemm_efficiency_max")))
    scale = target.compute_peak_bf16_flops_per_s / sources[name].compute_peak_bf16_flops_per_s
    physical = {n: fitted.value(n) for n in fitted.fitted if n in fitted.efficiency.__dataclass_fields__}
    regime = {n: fitted.value(n) for n in fitted.fitted if PARAMETERS[n].regime and not trainer}
    if "gemm_half_flops" in physical:
        physical["gemm_half_flops"] *= scale
    attention = attention_transfer_factor(sources[name], target)
    if "attention_efficiency" in physical:
        physical["attention_efficiency"] = min(1.0, physical["attention_efficiency"] * attention)
    kept = f", {', '.join(regime)} as fitted (kernel corrections)" if regime else ""
    origin = (f"{trainer}'s calibration on {name} (this trainer was never measured on any GPU)" if trainer
              else name)
    note = (f"{TRANSFERRED} from {origin} (not measured on {target_gpu}): physical efficiencies as fitted "
            f"there, gemm_half_flops × {scale:.3g} (compute-peak ratio), attention_efficiency × {attention:.3g} "
            f"(FlashAttention-2's fraction of peak by generation){kept}; other corrections at the profile's defaults")
    return default.with_values({**physical, **regime}, fitted_on=note, fitted=False)


def transferred_note(params: CalibratedParameters) -> str:
    """What ``transfer_parameters`` did, for parameters carried from another GPU ('' for a
    measured pair): the line a prediction prints so that it never passes for a measured one."""
    return params.fitted_on if params.fitted_on.startswith(TRANSFERRED) else ""
