"""The probe's output folder: ``hardware.yaml``, ``profile.yaml`` and the measured tables.

``hardware.yaml`` is a GPU file of ``hardware_db/README.md``'s schema (units in every value,
:func:`autoplan.specs.hardware.gpu_to_mapping`), for ``--hardware FILE``; ``profile.yaml`` a
calibrated profile file (``autoplan/calibration/profile_file.py``) for ``--profile FILE`` with
that GPU's name; ``kernels.csv``, ``host_link.csv`` and ``collectives.csv`` hold every timing,
each headed by the provenance line. Each file is written to a temporary name and renamed
(``report.destination.write_text``): an interrupted probe leaves the old file or none.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from autoplan.probe.tables import COLLECTIVE_FIELDS, HOST_LINK_FIELDS, KERNEL_FIELDS, table_text
from autoplan.profiles.efficiency import PARAMETERS, SECTIONS
from autoplan.report.destination import OutputError, write_text
from autoplan.specs.hardware import GPUSpec, gpu_to_mapping

HARDWARE_FILE, PROFILE_FILE = "hardware.yaml", "profile.yaml"
TABLE_FILES = {"kernels": ("kernels.csv", KERNEL_FIELDS), "host_link": ("host_link.csv", HOST_LINK_FIELDS),
               "collectives": ("collectives.csv", COLLECTIVE_FIELDS)}


def plain(value):
    """``value`` with numpy scalars as Python numbers, for yaml.safe_dump (mappings and lists kept)."""
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        return value.item()
    return value


def provenance_line(meta: dict) -> str:
    keys = ("device", "driver", "torch", "cuda", "nccl", "backend", "date", "nodes", "ranks")
    return ", ".join(f"{k} {meta[k]}" for k in keys if meta.get(k) not in (None, ""))


def hardware_text(gpu: GPUSpec, meta: dict, notes: list[str]) -> str:
    data = gpu_to_mapping(gpu)
    data["notes"] = "; ".join([f"measured by autoplan probe: {provenance_line(meta)}", *notes])
    header = f"# {gpu.name}: written by `autoplan probe` ({provenance_line(meta)}); load with --hardware FILE\n"
    return header + yaml.safe_dump(data, sort_keys=False, width=100, allow_unicode=True)


def profile_text(trainer: str, gpu_name: str, parameters: dict[str, float], meta: dict, figures: dict,
                 notes: list[str]) -> str:
    data = {"trainer": trainer, "hardware": gpu_name,
            "fitted_on": f"autoplan probe: kernels and collectives measured ({provenance_line(meta)})"}
    for kind in SECTIONS:
        section = {n: float(v) for n, v in parameters.items() if PARAMETERS[n].kind == kind}
        if section:
            data[kind] = section
    data["fit"] = plain({"provenance": meta, "figures": figures, "notes": list(notes)})
    data["sources"] = ["autoplan probe (autoplan/probe/): the measured tables beside this file"]
    header = f"# {trainer} on {gpu_name}: written by `autoplan probe`; use with --hardware {HARDWARE_FILE} --profile FILE\n"
    return header + yaml.safe_dump(data, sort_keys=False, width=100, allow_unicode=True)


def check_out(out: str | Path) -> Path:
    """The output folder, made if missing; refused if it is a file."""
    path = Path(out)
    if path.exists() and not path.is_dir():
        raise OutputError(f"--out {out}: not a folder")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"--out {out}: cannot make it: {exc.strerror or type(exc).__name__}") from None
    return path


def write_all(out: Path, texts: dict[str, str], measured: dict) -> list[Path]:
    """The tables first, the two YAML files last; each whole or not at all."""
    written = []
    for key, (name, fields) in TABLE_FILES.items():
        if measured.get(key):
            written.append(write_text(out / name, table_text(measured["meta"], fields, measured[key])))
    for name, text in texts.items():
        written.append(write_text(out / name, text))
    return written
