"""Calibrated profile files written by ``autoplan calibrate`` and read with ``--profile``.

Format (YAML): ``trainer: megatron``, ``hardware: h100-sxm``, ``efficiency: {name: value ...}``
plus free ``fit:`` metadata (rows, errors, seed). Only ``Efficiency`` fields are accepted.
"""

from __future__ import annotations

from pathlib import Path

from autoplan.errors import SpecError
from autoplan.profiles.profile import TrainerProfile, efficiency_from_mapping
from autoplan.specs.yaml_io import check_keys, read_mapping


def apply_profile_file(profile: TrainerProfile, gpu_name: str, path: str | Path) -> TrainerProfile:
    """Return ``profile`` with the calibrated efficiency of ``path`` for ``gpu_name``."""
    data = read_mapping(path)
    where = str(path)
    check_keys(data, where, required=["trainer", "hardware", "efficiency"], optional=["fit", "sources"])
    if str(data["trainer"]).lower() != profile.name:
        raise SpecError(where, f"calibrated for trainer '{data['trainer']}', but --trainer is '{profile.name}'")
    if str(data["hardware"]).lower() != gpu_name:
        raise SpecError(where, f"calibrated for hardware '{data['hardware']}', but --hardware is '{gpu_name}'")
    if not isinstance(data["efficiency"], dict):
        raise SpecError(where, "efficiency: expected a mapping of parameter: value")
    eff = efficiency_from_mapping(data["efficiency"], f"{where}: efficiency", profile.efficiency_for(gpu_name))
    return profile.with_efficiency(gpu_name, eff)
