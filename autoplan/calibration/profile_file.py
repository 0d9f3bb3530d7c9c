"""Calibrated profile files written by ``autoplan calibrate`` and read with ``--profile``.

Format (YAML): ``trainer: megatron``, ``hardware: h100-sxm``, ``fitted_on: ...``, the two
sections ``physical_efficiency: {name: value ...}`` and ``corrections: {name: value ...}``, plus
free ``fit:`` metadata (rows, errors, seed) and ``sources:``. A file of the older flat form
(``efficiency: {name: value ...}``) is still read: its keys are mapped onto the two sections.
"""

from __future__ import annotations

from dataclasses import replace
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
    check_keys(data, where, required=["trainer", "hardware"], optional=list(_PARAMETER_KEYS) + ["fit", "sources", "band"])
    if not any(k in data for k in (PHYSICAL, CORRECTIONS, "efficiency")):
        raise SpecError(where, f"no parameters: expected the sections '{PHYSICAL}:' and/or '{CORRECTIONS}:'")
    if str(data["trainer"]).lower() != profile.name:
        raise SpecError(where, f"calibrated for trainer '{data['trainer']}', but --trainer is '{profile.name}'")
    if str(data["hardware"]).lower() != gpu_name:
        raise SpecError(where, f"calibrated for hardware '{data['hardware']}', but --hardware is '{gpu_name}'")
    if "efficiency" in data and not isinstance(data["efficiency"], dict):
        raise SpecError(where, "efficiency: expected a mapping of parameter: value")
    parameters = {k: data[k] for k in _PARAMETER_KEYS if k in data}
    profile = profile.with_parameters(gpu_name, file_parameters(parameters, where, profile.parameters_for(gpu_name)))
    if "band" not in data:
        return profile
    return replace(profile, own_bands={**profile.own_bands, gpu_name: _band(data["band"], where)})


def _band(block: object, where: str) -> dict:
    """The ``band:`` block, checked: factor pairs 0 < low <= 1 <= high, a row count."""
    if not isinstance(block, dict):
        raise SpecError(where, "band: expected a mapping (tokens_per_s: [low, high], rows: n, ...)")
    check_keys(block, f"{where} band", required=["tokens_per_s", "rows"], optional=["peak_memory", "memory_rows", "rule"])
    for key in ("tokens_per_s", "peak_memory"):
        pair = block.get(key, [1.0, 1.0])
        ok = (isinstance(pair, list) and len(pair) == 2 and all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                                                for v in pair))
        if not ok or not 0.0 < pair[0] <= 1.0 <= pair[1] < float("inf"):
            raise SpecError(where, f"band: {key} must be [low, high] with 0 < low <= 1 <= high, got {pair!r}")
    if not isinstance(block["rows"], int) or isinstance(block["rows"], bool) or block["rows"] < 1:
        raise SpecError(where, f"band: rows must be a positive integer, got {block['rows']!r}")
    return dict(block)
