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

A group's tokens/s band may be split by scale (``SCALE_CLASSES``, GPU counts): where a class of
the group has enough held-out rows of its own the file holds its band under
``tokens_per_s_by_scale``, and a prediction for that many GPUs reads it (``error_band(...,
gpus=N)``); the other classes read the group's band.
"""

from __future__ import annotations

from collections.abc import Mapping
import math
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from autoplan.errors import AutoplanError
from autoplan.specs.gpu_generation import UNKNOWN_GENERATION, generation_of
from autoplan.specs.hardware import GPUSpec
from autoplan.specs.yaml_io import parse_mapping

BANDS_FILE = Path(__file__).resolve().parent / "error_bands.yaml"
# Scale classes of the tokens/s bands: (largest GPU count, label). One node of 8, a few nodes
# inside one rail-optimised network block, more.
SCALE_CLASSES = ((8, "1-8"), (128, "9-128"), (math.inf, "129+"))


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


def scale_class(gpus: float) -> str:
    """The label of the ``SCALE_CLASSES`` entry ``gpus`` GPUs fall in."""
    return next(label for bound, label in SCALE_CLASSES if gpus <= bound)


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


def scale_bands_from_mapping(band: ErrorBand, data: Mapping[str, Any]) -> dict[str, ErrorBand]:
    """The group ``band`` split by scale: ``{class label: band}`` from its entry's
    ``tokens_per_s_by_scale`` (tokens/s factors and rows of the class; memory as the group's)."""
    out = {}
    for label, entry in (data.get("tokens_per_s_by_scale") or {}).items():
        try:
            out[str(label)] = replace(band, group=f"{band.group} at {label} GPUs", measured=True,
                                      num_heldout_rows=int(entry["num_heldout_rows"]),
                                      tokens_low_factor=float(entry["tokens_per_s"][0]),
                                      tokens_high_factor=float(entry["tokens_per_s"][1]))
        except (KeyError, TypeError, IndexError, ValueError) as exc:
            raise BandsError(f"{BANDS_FILE.name}: group '{band.group}' scale '{label}' is malformed ({exc!r})") from exc
    return out


@lru_cache(maxsize=4)
def _load(path: Path) -> tuple[dict[str, ErrorBand], dict[str, dict[str, ErrorBand]]]:
    if not path.is_file():
        raise BandsError(f"error-band file {path} is missing; regenerate it with "
                         "`python benchmarks/accuracy.py --write-bands`")
    data = parse_mapping(path.read_text(), path.name)  # libyaml's parser where PyYAML has it
    if not isinstance(data, dict) or not isinstance(data.get("groups"), dict):
        raise BandsError(f"{path.name}: expected a mapping with a 'groups:' mapping")
    bands = {name: band_from_mapping(name, entry) for name, entry in data["groups"].items()}
    scales = {name: scale_bands_from_mapping(bands[name], entry) for name, entry in data["groups"].items()}
    return bands, {name: split for name, split in scales.items() if split}


def load_bands(path: Path = BANDS_FILE) -> dict[str, ErrorBand]:
    """Every group of the bands file, by group name."""
    return _load(path)[0]


def load_scale_bands(path: Path = BANDS_FILE) -> dict[str, dict[str, ErrorBand]]:
    """The groups split by scale: ``{group: {class label: band}}``."""
    return _load(path)[1]


def trainer_family(trainer: str) -> tuple[str, ...]:
    """The trainer and the profiles it inherits from (``TrainerProfile.family``: megatron-bridge
    runs Megatron-Core's code); a name that is no trainer profile stands alone."""
    from autoplan.profiles import list_trainers, load_profile

    return load_profile(trainer).family if trainer in list_trainers() else (trainer,)


def _group_of_family(bands: Mapping[str, ErrorBand], trainer: str, generation: str, moe: bool) -> str:
    """The group a prediction reads: the trainer's own, unless it is unmeasured and an ancestor's
    (``TrainerProfile.lineage``) is measured."""
    own = group_name(trainer, generation, moe)
    if own in bands and bands[own].measured:
        return own
    for base in trainer_family(trainer)[1:]:
        group = group_name(base, generation, moe)
        if group in bands and bands[group].measured:
            return group
    return own


def error_band(trainer: str, hardware: GPUSpec | str, moe: bool, gpus: float | None = None) -> ErrorBand:
    """The error band of predictions for ``trainer`` on ``hardware`` (the ``GPUSpec`` of
    ``TrainingSpec.cluster.gpu``, or a preset name), dense or MoE, on ``gpus`` GPUs: the band of
    the group's scale class where the file splits the group by scale and has that class, else
    the group's.

    A trainer that inherits another's profile (``inherits:``, e.g. megatron-bridge from megatron)
    runs that trainer's code on its transferred parameters: where its own group is unmeasured, it
    reads the nearest ancestor's group that is measured. A trainer the file does not know (a
    user's own profile name) gets the widest unmeasured band of the GPU's generation group across
    trainers.
    """
    bands = load_bands()
    generation = generation_of(hardware)
    if generation not in {name.split("/")[1] for name in bands}:
        generation = UNKNOWN_GENERATION
    name = _group_of_family(bands, trainer.lower(), generation, moe)
    if name in bands:
        split = load_scale_bands().get(name, {}) if gpus is not None else {}
        return split.get(scale_class(gpus), bands[name]) if split else bands[name]
    kind = "moe" if moe else "dense"
    others = [b for n, b in bands.items() if n.endswith(f"/{generation}/{kind}")]
    if not others:
        raise BandsError(f"{BANDS_FILE.name} has no group '{name}' and no '*/{generation}/{kind}' group")
    return max(others, key=lambda b: b.tokens_high_factor / b.tokens_low_factor)


# The predicted figures an error band covers (``intervals``).
BAND_FIGURES = ("tokens_per_s_per_gpu", "step_time_s", "peak_memory_bytes", "peak_memory_gib")


def intervals(band: ErrorBand, figures: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """``{column_low, column_high}`` for each of BAND_FIGURES present in ``figures`` (arrays of
    point predictions), in the order tokens/s, peak memory (bytes, GiB), step time."""
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
