"""How far a prediction can be off: the held-out error band of its (trainer, GPU generation,
dense/MoE) group, read from the generated ``autoplan/calibration/error_bands.yaml``.

A band is a pair of factors per figure that multiply a point prediction: the measured value of
a held-out run lay inside ``[point · low, point · high]`` for the band's share of the group's
held-out runs (the file's ``coverage``; ``low <= 1 <= high`` always, so an interval contains its
point). The file is written by ``python benchmarks/accuracy.py --write-bands``
(:mod:`autoplan.calibration.band_fit` says how: k-fold cross-validation for the measured groups,
a stated widening rule for the groups never measured, ``measured: false``).

Step time is tokens per step / (tokens/s), so its band is the tokens/s band inverted:
``step_low = point / tokens_high`` and ``step_high = point / tokens_low``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from autoplan.errors import AutoplanError
from autoplan.specs.gpu_generation import UNKNOWN_GENERATION, generation_of
from autoplan.specs.hardware import GPUSpec
from autoplan.specs.yaml_io import parse_mapping

BANDS_FILE = Path(__file__).resolve().parent / "error_bands.yaml"


class BandsError(AutoplanError):
    """The error-band file is missing, malformed or lacks a group."""


@dataclass(frozen=True)
class ErrorBand:
    """Factors that multiply a point prediction to give its interval (low <= 1 <= high).

    ``measured`` is False for a group with no (or too few) held-out measurements: its band was
    built by the file's widening rule. ``num_heldout_rows`` counts the held-out tokens/s rows
    behind the band; ``memory_measured`` / ``num_heldout_memory_rows`` the same for memory.
    """

    group: str
    measured: bool
    num_heldout_rows: int
    tokens_low_factor: float
    tokens_high_factor: float
    memory_low_factor: float
    memory_high_factor: float
    memory_measured: bool = False
    num_heldout_memory_rows: int = 0

    def __post_init__(self) -> None:
        for figure in ("tokens", "memory"):
            low, high = getattr(self, f"{figure}_low_factor"), getattr(self, f"{figure}_high_factor")
            if not 0.0 < low <= 1.0 <= high:
                raise BandsError(f"band '{self.group}': 0 < {figure}_low_factor <= 1 <= {figure}_high_factor "
                                 f"must hold, got ({low}, {high})")

    @property
    def step_time_low_factor(self) -> float:
        return 1.0 / self.tokens_high_factor

    @property
    def step_time_high_factor(self) -> float:
        return 1.0 / self.tokens_low_factor


def group_name(trainer: str, generation: str, moe: bool) -> str:
    return f"{trainer}/{generation}/{'moe' if moe else 'dense'}"


def band_from_mapping(group: str, data: Mapping[str, Any]) -> ErrorBand:
    """An ``ErrorBand`` from one ``groups:`` entry of the bands file."""
    try:
        return ErrorBand(group=group, measured=bool(data["measured"]),
                         num_heldout_rows=int(data["num_heldout_rows"]),
                         tokens_low_factor=float(data["tokens_per_s"][0]),
                         tokens_high_factor=float(data["tokens_per_s"][1]),
                         memory_low_factor=float(data["peak_memory"][0]),
                         memory_high_factor=float(data["peak_memory"][1]),
                         memory_measured=bool(data["memory_measured"]),
                         num_heldout_memory_rows=int(data["num_heldout_memory_rows"]))
    except (KeyError, TypeError, IndexError, ValueError) as exc:
        raise BandsError(f"{BANDS_FILE.name}: group '{group}' is malformed ({exc!r})") from exc


@lru_cache(maxsize=4)
def load_bands(path: Path = BANDS_FILE) -> dict[str, ErrorBand]:
    """Every group of the bands file, by group name."""
    if not path.is_file():
        raise BandsError(f"error-band file {path} is missing; regenerate it with "
                         "`python benchmarks/accuracy.py --write-bands`")
    data = parse_mapping(path.read_text(), path.name)  # libyaml's parser where PyYAML has it
    if not isinstance(data, dict) or not isinstance(data.get("groups"), dict):
        raise BandsError(f"{path.name}: expected a mapping with a 'groups:' mapping")
    return {name: band_from_mapping(name, entry) for name, entry in data["groups"].items()}


def error_band(trainer: str, hardware: GPUSpec | str, moe: bool) -> ErrorBand:
    """The error band of predictions for ``trainer`` on ``hardware`` (the ``GPUSpec`` of
    ``TrainingSpec.cluster.gpu``, or a preset name), dense or MoE.

    A trainer the file does not know (a user's own profile name) gets the widest unmeasured
    band of the GPU's generation group across trainers.
    """
    bands = load_bands()
    generation = generation_of(hardware)
    if generation not in {name.split("/")[1] for name in bands}:
        generation = UNKNOWN_GENERATION
    name = group_name(trainer.lower(), generation, moe)
    if name in bands:
        return bands[name]
    kind = "moe" if moe else "dense"
    others = [b for n, b in bands.items() if n.endswith(f"/{generation}/{kind}")]
    if not others:
        raise BandsError(f"{BANDS_FILE.name} has no group '{name}' and no '*/{generation}/{kind}' group")
    return max(others, key=lambda b: b.tokens_high_factor / b.tokens_low_factor)


def intervals(band: ErrorBand, figures: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """``{column_low, column_high}`` for each of tokens_per_s_per_gpu, peak_memory_bytes,
    peak_memory_gib and step_time_s present in ``figures`` (arrays of point predictions)."""
    memory = (band.memory_low_factor, band.memory_high_factor)
    factors = {"tokens_per_s_per_gpu": (band.tokens_low_factor, band.tokens_high_factor),
               "peak_memory_bytes": memory, "peak_memory_gib": memory,
               "step_time_s": (band.step_time_low_factor, band.step_time_high_factor)}
    out = {}
    for column, (low, high) in factors.items():
        if column in figures:
            point = np.asarray(figures[column], dtype=float)
            out[f"{column}_low"], out[f"{column}_high"] = point * low, point * high
    return out


def band_record(band: ErrorBand) -> dict[str, Any]:
    """The band as plain data (JSON): its group, whether it was measured and its factors."""
    return {"group": band.group, "measured": band.measured, "num_heldout_rows": band.num_heldout_rows,
            "tokens_per_s": [band.tokens_low_factor, band.tokens_high_factor],
            "step_time": [band.step_time_low_factor, band.step_time_high_factor],
            "peak_memory": [band.memory_low_factor, band.memory_high_factor],
            "memory_measured": band.memory_measured, "num_heldout_memory_rows": band.num_heldout_memory_rows}


def band_text(low_factor: float, high_factor: float) -> str:
    """``±9%`` when the band is symmetric to the percent, else ``-12/+7%``."""
    down, up = round(100 * (1 - low_factor)), round(100 * (high_factor - 1))
    return f"±{up}%" if down == up else f"-{down}/+{up}%"
