"""Physical efficiencies and corrections from YAML, in two sections everywhere.

* ``defaults.yaml`` (beside this module): every parameter, each as ``{value: ..., source: ...}``.
* A trainer profile's ``defaults:`` block overrides single values in the same form (with their
  own source), and its ``calibrated:`` block holds per GPU ``fitted_on:`` (the source of the
  fitted values) and bare numbers under ``physical_efficiency:`` and ``corrections:``.
* A calibrated profile file (``autoplan calibrate``, ``--profile``) has the same two sections;
  a file of the older flat ``efficiency:`` form is still read, its keys mapped to the sections.

Every value is checked against its bounds with an error naming the file and the key.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

from autoplan.errors import SpecError, shown
from autoplan.profiles.efficiency import (
    CORRECTIONS,
    PARAMETERS,
    PHYSICAL,
    SECTIONS,
    CalibratedParameters,
    Corrections,
    PhysicalEfficiency,
)
from autoplan.specs.yaml_io import check_keys, read_mapping

DEFAULTS_PATH = Path(__file__).resolve().parent / "defaults.yaml"
_NAMES = {kind: [name for name, p in PARAMETERS.items() if p.kind == kind] for kind in SECTIONS}


def checked_value(name: str, value: Any, where: str) -> float:
    """``value`` of parameter ``name`` as a float inside its bounds, else a SpecError naming it."""
    key = f"{PARAMETERS[name].kind}.{name}"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SpecError(where, f"{key}: expected a number, got {shown(value)}")
    low, high = PARAMETERS[name].bounds
    if not low <= float(value) <= high:
        raise SpecError(where, f"{key}: must lie in [{low:g}, {high:g}], got {value}")
    return float(value)


def _section(data: Mapping, kind: str, where: str) -> Mapping:
    block = data.get(kind) or {}
    if not isinstance(block, Mapping):
        raise SpecError(where, f"{kind}: expected a mapping of parameter: value, got {shown(block)}")
    misplaced = [k for k in block if k in PARAMETERS and PARAMETERS[k].kind != kind]
    if misplaced:
        other = PARAMETERS[misplaced[0]].kind
        raise SpecError(where, f"{kind}.{misplaced[0]}: belongs under '{other}:', not '{kind}:'")
    check_keys(block, f"{where}: {kind}", required=[], optional=_NAMES[kind])
    return block


def _check_sections(data: Mapping, where: str, extra: list[str]) -> None:
    """Refuse flat parameter keys with a message naming the section they now belong to."""
    for key in data:
        if key in PARAMETERS:
            raise SpecError(where, f"{key}: parameters now sit in two sections; put it under "
                                   f"'{PARAMETERS[key].kind}:'")
    check_keys(data, where, required=[], optional=[PHYSICAL, CORRECTIONS] + extra)


def sourced_values(data: Mapping, where: str) -> dict[str, float]:
    """``{physical_efficiency: {name: {value, source}}, corrections: {...}}`` -> {name: value};
    every value must state a non-empty ``source``."""
    _check_sections(data, where, [])
    out = {}
    for kind in SECTIONS:
        for name, entry in _section(data, kind, where).items():
            if not isinstance(entry, Mapping):
                raise SpecError(where, f"{kind}.{name}: expected {{value: ..., source: '...'}}, got {shown(entry)}")
            check_keys(entry, f"{where}: {kind}.{name}", required=["value", "source"])
            if not str(entry["source"] or "").strip():
                raise SpecError(where, f"{kind}.{name}: source: must say where the value comes from")
            out[name] = checked_value(name, entry["value"], where)
    return out


def fitted_values(data: Mapping, where: str, extra: list[str]) -> dict[str, float]:
    """``{physical_efficiency: {name: value}, corrections: {...}}`` -> {name: value} (bare numbers)."""
    _check_sections(data, where, extra)
    return {name: checked_value(name, value, where)
            for kind in SECTIONS for name, value in _section(data, kind, where).items()}


@lru_cache(maxsize=None)
def load_defaults(path: Path = DEFAULTS_PATH) -> CalibratedParameters:
    """The shared defaults: every parameter with a value and a source."""
    where = str(path)
    values = sourced_values(read_mapping(path), where)
    missing = [name for name in PARAMETERS if name not in values]
    if missing:
        raise SpecError(where, f"missing default(s) for {', '.join(missing)}")
    physical = {n: v for n, v in values.items() if PARAMETERS[n].kind == PHYSICAL}
    corrections = {n: v for n, v in values.items() if PARAMETERS[n].kind == CORRECTIONS}
    return CalibratedParameters(PhysicalEfficiency(**physical), Corrections(**corrections))


def profile_parameters(data: Mapping, where: str) -> dict[str, CalibratedParameters]:
    """A profile's ``defaults:`` and ``calibrated:`` blocks -> {'default' or GPU name: parameters}."""
    if "efficiency" in data:
        raise SpecError(where, "efficiency: replaced by 'defaults:' (physical_efficiency / corrections, each "
                               "value as {value, source}) and 'calibrated: {gpu: {fitted_on, "
                               "physical_efficiency, corrections}}'")
    default = load_defaults().with_values(sourced_values(data.get("defaults") or {}, f"{where}: defaults"),
                                          fitted=False)
    out = {"default": default}
    calibrated = data.get("calibrated") or {}
    if not isinstance(calibrated, Mapping):
        raise SpecError(where, f"calibrated: expected a mapping of GPU name: parameters, got {shown(calibrated)}")
    for gpu, block in calibrated.items():
        at = f"{where}: calibrated.{gpu}"
        if not isinstance(block, Mapping) or not str(block.get("fitted_on") or "").strip():
            raise SpecError(at, "expected fitted_on: '<the rows and fit that gave these values>' and the "
                                "sections physical_efficiency: and corrections:")
        values = fitted_values(block, at, ["fitted_on"])
        out[str(gpu)] = default.with_values(values, fitted_on=str(block["fitted_on"]))
    return out


def file_parameters(data: Mapping, where: str, base: CalibratedParameters) -> CalibratedParameters:
    """The parameters of a calibrated profile file, on top of ``base``.

    The older flat form ``efficiency: {name: value, ..., fitted_on: ...}`` is mapped onto the two
    sections; its ``attention_efficiency`` already carried any non-flash slow-down, so the
    ``unfused_attention_factor`` of ``base`` is reset to neutral unless the file gives one.
    """
    if "efficiency" in data:
        if PHYSICAL in data or CORRECTIONS in data:
            raise SpecError(where, f"give either the flat 'efficiency:' or '{PHYSICAL}:' and '{CORRECTIONS}:'")
        flat = dict(data["efficiency"] or {})
        fitted_on = str(flat.pop("fitted_on", ""))
        check_keys(flat, f"{where}: efficiency", required=[], optional=list(PARAMETERS))
        values = {"unfused_attention_factor": PARAMETERS["unfused_attention_factor"].neutral}
        values.update({k: checked_value(k, v, where) for k, v in flat.items()})
        return base.with_values(values, fitted_on=fitted_on)
    values = fitted_values(data, where, ["fitted_on"])
    return base.with_values(values, fitted_on=str(data.get("fitted_on", "")))
