"""Search spaces: the candidate values of every layout knob, and their enumeration.

A space lives in ``search_spaces/<name>.yaml`` (or any YAML path): one list per knob (tp, pp,
vpp, cp, ep, etp, zero, mbs, recompute, precision, placement), read strictly (an unknown knob
is an error with a "did you mean"). CLI options replace a knob's list. Enumeration is the
cartesian product of the lists, built as index arrays (``np.unravel_index``, no Python loop
over layouts); dp, grad_acc and sp come from :func:`autoplan.layout.derive_batch_knobs`
(layouts with a non-integer dp are dropped).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from autoplan.errors import (
    AutoplanError,
    LayoutError,
    SpecError,
    UnknownNameError,
    shown,
)
from autoplan.files import exists
from autoplan.knobs import SEARCHED
from autoplan.layout import (
    CODE_FIELDS,
    FIELDS,
    MAX_DEGREE,
    LayoutBatch,
    derive_batch_knobs,
    modules_code,
    modules_text,
)
from autoplan.paths import data_dir
from autoplan.specs.yaml_io import check_keys, read_mapping

if TYPE_CHECKING:
    from autoplan.specs.training import TrainingSpec

# What a space holds, from the knob registry (autoplan.knobs): the searched knobs in its order
# (the product's), integers, choices and module sets among them, and the single value a space
# file that leaves a knob out takes (the knob's default).
KNOBS = tuple(k.name for k in SEARCHED)
INT_KNOBS = tuple(k.name for k in SEARCHED if k.kind in ("degree", "count", "stage"))
CHOICE_KNOBS = tuple(k.name for k in SEARCHED if k.kind == "choice")
MODULE_KNOBS = tuple(k.name for k in SEARCHED if k.kind == "modules")  # comma-separated sets ('' = none)
ZERO_BASED = tuple(k.name for k in SEARCHED if k.kind in ("count", "stage"))  # integer knobs whose values may be 0
KNOB_DEFAULTS: dict[str, tuple] = {k.name: (k.default,) for k in SEARCHED}


class EmptySpaceError(AutoplanError):
    """A search space with no layout left (after overrides and the degree checks)."""


@dataclass(frozen=True)
class SearchSpace:
    """Candidate values per knob: ints for ``INT_KNOBS``, names for ``CHOICE_KNOBS``."""

    name: str
    values: Mapping[str, tuple]
    description: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "values", {k: _check_values(k, self.values.get(k, KNOB_DEFAULTS[k]),
                                                              f"search space '{self.name}'")
                                            for k in KNOBS})

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(len(self.values[k]) for k in KNOBS)

    @property
    def size(self) -> int:
        """Layouts in the cartesian product (before the degree and batch checks)."""
        return int(np.prod(self.shape, dtype=np.float64))

    def with_overrides(self, **overrides: Sequence | None) -> SearchSpace:
        """A copy with the given knobs replaced (``None`` keeps the space's list)."""
        unknown = [k for k in overrides if k not in KNOBS]
        if unknown:
            raise AutoplanError(f"unknown knob(s) {unknown}; knobs: {', '.join(KNOBS)}")
        values = dict(self.values)
        values.update({k: tuple(v) for k, v in overrides.items() if v is not None})
        return SearchSpace(self.name, values, self.description)

    def code_values(self, knob: str) -> np.ndarray:
        """The knob's candidates as float64 (categorical knobs as their ``layout`` codes)."""
        if knob in CODE_FIELDS:
            return np.array([CODE_FIELDS[knob].index(v) for v in self.values[knob]], dtype=np.float64)
        if knob in MODULE_KNOBS:
            return np.array([modules_code(v) for v in self.values[knob]], dtype=np.float64)
        return np.array(self.values[knob], dtype=np.float64)

    def to_dict(self) -> dict[str, list]:
        return {k: list(self.values[k]) for k in KNOBS}


def _check_values(knob: str, raw: Any, where: str) -> tuple:
    """A knob's list: a scalar or a list, deduplicated and sorted (ints) or in code order."""
    items = list(raw) if isinstance(raw, (list, tuple)) else [raw]
    if not items:
        raise SpecError(where, f"{knob}: needs at least one value")
    if knob in CHOICE_KNOBS:
        choices = CODE_FIELDS[knob]
        names = [str(v).strip().lower() for v in items]
        bad = [v for v in names if v not in choices]
        if bad:
            raise SpecError(where, f"{knob}: {shown(bad[0])} is not one of {', '.join(choices)}")
        return tuple(c for c in choices if c in names)
    if knob in MODULE_KNOBS:
        try:
            return tuple(dict.fromkeys(modules_text(modules_code(v)) for v in items))
        except LayoutError as exc:
            raise SpecError(where, str(exc)) from None
    low = 0 if knob in ZERO_BASED else 1
    high = 3 if knob == "zero" else MAX_DEGREE
    for v in items:
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not low <= v <= high:
            raise SpecError(where, f"{knob}: values must be integers in [{low}, {high}], got {shown(v)}")
    return tuple(sorted({int(v) for v in items}))


def list_spaces() -> list[str]:
    """Names of the built-in spaces in ``search_spaces/``."""
    return sorted(p.stem for p in data_dir("search_spaces").glob("*.yaml"))


def load_space(name_or_path: str | Path) -> SearchSpace:
    """A built-in space by name (``default``, ``moe``, ``long-context``) or a YAML file path."""
    text = str(name_or_path).strip()
    path = Path(text)
    if "/" not in text and "\\" not in text and not text.lower().endswith((".yaml", ".yml")):
        path = data_dir("search_spaces") / f"{text}.yaml"
        if not exists(path):
            raise UnknownNameError("search space", text, list_spaces())
    data = read_mapping(path)
    check_keys(data, str(path), required=[], optional=["description", *KNOBS])
    values = {k: _check_values(k, data[k], str(path)) for k in KNOBS if k in data}
    return SearchSpace(name=path.stem, values=values, description=str(data.get("description", "")))


def layouts_from_values(values: Mapping[str, np.ndarray],
                        training: TrainingSpec) -> tuple[LayoutBatch, np.ndarray, np.ndarray]:
    """Complete knob arrays (float64 codes) into layouts.

    Returns ``(batch, kept, reaches)``: ``kept`` marks the inputs whose dp = gpus/(tp·pp·cp) is
    a positive integer (only those are in ``batch``), ``reaches`` the batch's layouts whose
    batch dp·mbs·grad_acc (the nearest achievable) is within the tolerance of ``training``'s.
    """
    derived = derive_batch_knobs(values, training)
    kept = derived["dp_whole"]
    arrays = {k: np.asarray(values[k], dtype=np.float64)[kept] for k in KNOBS}
    arrays.update({k: derived[k][kept] for k in ("dp", "grad_acc", "sp")})
    assert set(arrays) == set(FIELDS)
    return LayoutBatch(arrays), kept, derived["reaches"][kept]


def indices_to_values(space: SearchSpace, flat_index: np.ndarray) -> dict[str, np.ndarray]:
    """Knob code arrays of the layouts at ``flat_index`` in the product (C order over KNOBS)."""
    return axes_to_values(space, np.unravel_index(flat_index, space.shape))


def axes_to_values(space: SearchSpace, axes: Sequence[np.ndarray]) -> dict[str, np.ndarray]:
    """Knob code arrays from each knob's value index (``np.unravel_index`` of flat indices)."""
    return {k: space.code_values(k)[axis] for k, axis in zip(KNOBS, axes)}


def params_to_values(space: SearchSpace, params: Sequence[Mapping[str, Any]]) -> dict[str, np.ndarray]:
    """Knob code arrays from Optuna-style parameter dicts (knob -> value as in the space)."""
    out = {}
    for k in KNOBS:
        column = [p[k] for p in params]
        if k in CODE_FIELDS:
            out[k] = np.array([CODE_FIELDS[k].index(v) for v in column], dtype=np.float64)
        elif k in MODULE_KNOBS:
            out[k] = np.array([modules_code(v) for v in column], dtype=np.float64)
        else:
            out[k] = np.array(column, dtype=np.float64)
    return out


def count_enumerable(space: SearchSpace, training: TrainingSpec) -> int:
    """Layouts whose dp is an integer: the degree sub-grid (tp, pp, cp) times the other knobs."""
    tp, pp, cp = (space.code_values(k) for k in ("tp", "pp", "cp"))
    product = tp[:, None, None] * pp[None, :, None] * cp[None, None, :]
    ok = (training.gpus % product == 0) & (product <= training.gpus)
    rest = space.size // (len(tp) * len(pp) * len(cp))
    return int(ok.sum()) * rest


def enumerate_space(space: SearchSpace, training: TrainingSpec) -> tuple[LayoutBatch, np.ndarray]:
    """Every layout of the space with an integer dp, as one batch, and where each reaches gbs.

    Raises ``EmptySpaceError`` when no combination of tp·pp·cp divides the GPU count.
    """
    batch, _, reaches = layouts_from_values(indices_to_values(space, np.arange(space.size)), training)
    if len(batch) == 0:
        raise EmptySpaceError(_empty_message(space, training))
    return batch, reaches


def _empty_message(space: SearchSpace, training: TrainingSpec) -> str:
    return (f"search space '{space.name}' has no layout for {training.gpus} GPUs: no tp·pp·cp of "
            f"tp {list(space.values['tp'])}, pp {list(space.values['pp'])}, "
            f"cp {list(space.values['cp'])} divides {training.gpus}")


def check_not_empty(space: SearchSpace, training: TrainingSpec) -> int:
    """The number of enumerable layouts; raises ``EmptySpaceError`` when it is 0."""
    count = count_enumerable(space, training)
    if count == 0:
        raise EmptySpaceError(_empty_message(space, training))
    return count
