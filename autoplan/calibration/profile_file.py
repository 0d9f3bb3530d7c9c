"""Calibrated profile files written by ``autoplan calibrate`` and read with ``--profile``.

Format (YAML): ``trainer: megatron``, ``hardware: h100-sxm``, ``fitted_on: ...``, the two
sections ``physical_efficiency: {name: value ...}`` and ``corrections: {name: value ...}``, plus
free ``fit:`` metadata (rows, errors, seed) and ``sources:``. A file of the older flat form
(``efficiency: {name: value ...}``) is still read: its keys are mapped onto the two sections.
"""

from __future__ import annotations

from pathlib import Path

from autoplan.errors import SpecError
from autoplan.profiles.efficiency import CORRECTIONS, PHYSICAL
from autoplan.profiles.parameter_files import file_parameters
from autoplan.profiles.profile import TrainerProfile
from autoplan.specs.yaml_io import check_keys, read_mapping

_PARAMETER_KEYS = ("fitted_on", PHYSICAL, CORRECTIONS, "efficiency")


def apply_profile_file(profile: TrainerProfile, gpu_name: str, path: str | Path) -> TrainerProfile:
    """Return ``profile`` with the calibrated parameters of ``path`` for ``gpu_name``."""
    data = read_mapping(path)
    where = str(path)
    check_keys(data, where, required=["trainer", "hardware"], optional=list(_PARAMETER_KEYS) + ["fit", "sources"])
    if not any(k in data for k in (PHYSICAL, CORRECTIONS, "efficiency")):
        raise SpecError(where, f"no parameters: expected the sections '{PHYSICAL}:' and/or '{CORRECTIONS}:'")
    if str(data["trainer"]).lower() != profile.name:
        raise SpecError(where, f"calibrated for trainer '{data['trainer']}', but --trainer is '{profile.name}'")
    if str(data["hardware"]).lower() != gpu_name:
        raise SpecError(where, f"calibrated for hardware '{data['hardware']}', but --hardware is '{gpu_name}'")
    if "efficiency" in data and not isinstance(data["efficiency"], dict):
        raise SpecError(where, "efficiency: expected a mapping of parameter: value")
    parameters = {k: data[k] for k in _PARAMETER_KEYS if k in data}
    return profile.with_parameters(gpu_name, file_parameters(parameters, where, profile.parameters_for(gpu_name)))
