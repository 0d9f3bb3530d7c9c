"""Layouts: one parallel configuration (``Layout``) and a batch of them (``LayoutBatch``).

A ``LayoutBatch`` is a struct of float64 arrays, one per field, so the cost model can evaluate
10^5–10^6 layouts in one vectorised call (STYLE.md §2); one layout is a batch of one.
Categorical fields are stored as integer codes (``RECOMPUTE``, ``PRECISIONS``, ``PLACEMENTS``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

import numpy as np

from autoplan.errors import LayoutError

RECOMPUTE = ("none", "selective", "full")
PRECISIONS = ("bf16", "fp8")
# Rank orders, innermost (fastest-varying rank index) first. Experts live inside the dp·cp
# ranks of a stage (Megatron's expert grid: etp, ep, expert-dp, pp).
PLACEMENTS = ("tp-cp-dp-pp", "tp-dp-cp-pp", "tp-pp-cp-dp", "cp-tp-dp-pp")
DEFAULT_PLACEMENT = PLACEMENTS[0]

INT_FIELDS = ("gpus", "dp", "tp", "pp", "vpp", "cp", "ep", "etp", "zero", "mbs", "grad_acc",
              "seq_len", "gbs_seqs")
CODE_FIELDS = {"recompute": RECOMPUTE, "precision": PRECISIONS, "placement": PLACEMENTS}
FIELDS = INT_FIELDS + ("sp",) + tuple(CODE_FIELDS)


@dataclass(frozen=True)
class Layout:
    """One layout with every field resolved (see ``resolve_layout`` for the defaults)."""

    gpus: int
    dp: int
    tp: int
    pp: int
    vpp: int
    cp: int
    ep: int
    etp: int
    zero: int
    mbs: int
    grad_acc: int
    seq_len: int
    gbs_seqs: int
    sp: bool
    recompute: str = "none"
    precision: str = "bf16"
    placement: str = DEFAULT_PLACEMENT

    def describe(self) -> str:
        """'tp=8 pp=4 vpp=2 cp=1 dp=16 ... ' in a stable order, for tables and messages."""
        parts = [f"tp={self.tp}", f"pp={self.pp}"]
        if self.vpp > 1:
            parts.append(f"vpp={self.vpp}")
        if self.cp > 1:
            parts.append(f"cp={self.cp}")
        if self.ep > 1 or self.etp > 1:
            parts += [f"ep={self.ep}", f"etp={self.etp}"]
        parts += [f"dp={self.dp}", f"zero={self.zero}", f"mbs={self.mbs}", f"ga={self.grad_acc}",
                  f"rc={self.recompute}"]
        if self.precision != "bf16":
            parts.append(self.precision)
        if not self.sp and self.tp > 1:
            parts.append("no-sp")
        return " ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _as_int(name: str, value: Any) -> int:
    if isinstance(value, bool):
        raise LayoutError(f"{name} must be an integer, got {value!r}")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise LayoutError(f"{name} must be an integer, got {value!r}") from None
    if not np.isfinite(number) or number != int(number):
        raise LayoutError(f"{name} must be an integer, got {value!r}")
    if abs(number) > 2**40:
        raise LayoutError(f"{name} = {value!r} is absurdly large")
    return int(number)


def _as_bool(name: str, value: Any) -> bool:
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise LayoutError(f"{name} must be true or false, got {value!r}")


def resolve_layout(values: Mapping[str, Any]) -> Layout:
    """Fill in the defaults of a partial layout and check its basic invariants.

    Defaults: ``dp = gpus/(tp·pp·cp)``, ``vpp = cp = ep = etp = 1``, ``zero = 1``, ``mbs = 1``,
    ``grad_acc = gbs_seqs/(dp·mbs)``, ``sp = tp > 1``, ``recompute = none``, ``precision = bf16``.
    Raises ``LayoutError`` naming the rule and the values when a degree does not divide.
    """
    unknown = set(values) - set(FIELDS)
    if unknown:
        raise LayoutError(f"unknown layout field(s) {sorted(unknown)}; valid: {', '.join(FIELDS)}")
    v: dict[str, Any] = {k: val for k, val in values.items() if val is not None and val == val}
    out: dict[str, Any] = {}
    for name in ("tp", "pp", "vpp", "cp", "ep", "etp", "mbs"):
        out[name] = _as_int(name, v.get(name, 1))
    out["zero"] = _as_int("zero", v.get("zero", 1))
    for name in ("gpus", "seq_len", "gbs_seqs"):
        if name not in v:
            raise LayoutError(f"layout needs '{name}'")
        out[name] = _as_int(name, v[name])
    for name in ("gpus", "seq_len", "gbs_seqs", "tp", "pp", "vpp", "cp", "ep", "etp", "mbs"):
        if out[name] < 1:
            raise LayoutError(f"{name} must be >= 1, got {out[name]}")
    if not 0 <= out["zero"] <= 3:
        raise LayoutError(f"zero must be 0, 1, 2 or 3, got {out['zero']}")
    model_parallel = out["tp"] * out["pp"] * out["cp"]
    if "dp" in v:
        out["dp"] = _as_int("dp", v["dp"])
    else:
        if out["gpus"] % model_parallel:
            raise LayoutError(f"gpus ({out['gpus']}) must be a multiple of tp·pp·cp "
                              f"({out['tp']}·{out['pp']}·{out['cp']} = {model_parallel})")
        out["dp"] = out["gpus"] // model_parallel
    if out["dp"] < 1 or out["dp"] * model_parallel != out["gpus"]:
        raise LayoutError(f"dp·tp·pp·cp must equal gpus, got dp({out['dp']})·tp({out['tp']})·"
                          f"pp({out['pp']})·cp({out['cp']}) != gpus({out['gpus']})")
    if "grad_acc" in v:
        out["grad_acc"] = _as_int("grad_acc", v["grad_acc"])
        if out["grad_acc"] < 1:
            raise LayoutError(f"grad_acc must be >= 1, got {out['grad_acc']}")
    else:
        per_step = out["dp"] * out["mbs"]
        if out["gbs_seqs"] % per_step:
            raise LayoutError(f"gbs_seqs ({out['gbs_seqs']}) must be a multiple of dp·mbs "
                              f"({out['dp']}·{out['mbs']} = {per_step})")
        out["grad_acc"] = out["gbs_seqs"] // per_step
    out["sp"] = _as_bool("sp", v["sp"]) if "sp" in v else out["tp"] > 1
    for name, choices in CODE_FIELDS.items():
        value = str(v.get(name, choices[0])).strip().lower()
        if value not in choices:
            raise LayoutError(f"{name} must be one of {', '.join(choices)}, got {v.get(name)!r}")
        out[name] = value
    return Layout(**out)


class LayoutBatch:
    """A struct of arrays: ``batch.tp`` is a float64 array with one entry per layout."""

    def __init__(self, arrays: Mapping[str, np.ndarray]):
        missing = [name for name in FIELDS if name not in arrays]
        assert not missing, f"LayoutBatch is missing fields {missing}"
        size = {np.shape(arrays[name]) for name in FIELDS}
        assert len(size) == 1, f"LayoutBatch fields differ in shape: {size}"
        for name in FIELDS:
            setattr(self, name, np.asarray(arrays[name], dtype=np.float64))

    def __len__(self) -> int:
        return int(self.tp.shape[0])

    @classmethod
    def from_layouts(cls, layouts: Iterable[Layout]) -> LayoutBatch:
        layouts = list(layouts)
        arrays: dict[str, np.ndarray] = {}
        for name in FIELDS:
            if name in CODE_FIELDS:
                codes = CODE_FIELDS[name]
                arrays[name] = np.array([codes.index(getattr(x, name)) for x in layouts], dtype=np.float64)
            else:
                arrays[name] = np.array([float(getattr(x, name)) for x in layouts], dtype=np.float64)
        return cls(arrays)

    def arrays(self) -> dict[str, np.ndarray]:
        return {name: getattr(self, name) for name in FIELDS}

    def take(self, index: np.ndarray) -> LayoutBatch:
        return LayoutBatch({name: getattr(self, name)[index] for name in FIELDS})

    def layout(self, i: int) -> Layout:
        """The i-th layout as a ``Layout`` (for display and export)."""
        values: dict[str, Any] = {}
        for f in fields(Layout):
            raw = getattr(self, f.name)[i]
            if f.name in CODE_FIELDS:
                values[f.name] = CODE_FIELDS[f.name][int(raw)]
            elif f.name == "sp":
                values[f.name] = bool(raw)
            else:
                values[f.name] = int(raw)
        return Layout(**values)

    def records(self) -> list[dict[str, Any]]:
        return [self.layout(i).to_dict() for i in range(len(self))]
