"""Efficiencies fitted on one GPU, carried to a GPU the trainer was never measured on.

A physical efficiency is a fraction of a hardware peak (GEMM, attention, HBM, NVLink, NIC) or
an overlap fraction: the same fraction applies to another GPU's peaks, which the cost model
reads from the GPU's own figures (``hardware_db/gpus``). The one dimensioned efficiency,
``gemm_half_flops``, stands for a fixed time per GEMM (launch, tail wave): F_half/(η·peak);
keeping that time means scaling F_half with the peak. Corrections are not carried: each stands in
for a mechanism seen on its own measured rows, so the target GPU gets the profile's defaults.
The source GPU is the calibrated one nearest in (BF16 peak, HBM bandwidth), log distance.
``fitted_on`` says that the values are transferred and from where, so every prediction for the
pair says it was not measured.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from autoplan.profiles.efficiency import CalibratedParameters

TRANSFERRED = "transferred"  # the first word of ``fitted_on`` for transferred values


def _distance(a, b) -> float:
    return (abs(math.log(a.peak_bf16_flops_per_s / b.peak_bf16_flops_per_s))
            + abs(math.log(a.hbm_bytes_per_s / b.hbm_bytes_per_s)))


def transfer_parameters(calibrated: Mapping[str, CalibratedParameters], target_gpu: str,
                        default: CalibratedParameters) -> CalibratedParameters:
    """The parameters for ``target_gpu`` (a preset name) from the nearest calibrated GPU; the
    ``default`` ones when nothing is calibrated or the GPU is not a preset."""
    from autoplan.errors import UnknownNameError
    from autoplan.specs.hardware import load_gpu

    if not calibrated:
        return default
    try:
        target = load_gpu(target_gpu)
        sources = {name: load_gpu(name) for name in calibrated}
    except (UnknownNameError, OSError):
        return default
    name = min(sorted(sources), key=lambda n: _distance(sources[n], target))
    fitted = calibrated[name]
    scale = target.peak_bf16_flops_per_s / sources[name].peak_bf16_flops_per_s
    physical = {n: fitted.value(n) for n in fitted.fitted if n in fitted.efficiency.__dataclass_fields__}
    if "gemm_half_flops" in physical:
        physical["gemm_half_flops"] *= scale
    note = (f"{TRANSFERRED} from {name} (not measured on {target_gpu}): physical efficiencies as fitted "
            f"there, gemm_half_flops × {scale:.3g} (BF16 peak ratio); corrections at the profile's defaults")
    return default.with_values(physical, fitted_on=note, fitted=False)
