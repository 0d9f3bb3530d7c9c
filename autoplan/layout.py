"""Layouts: one parallel configuration (``Layout``) and a batch of them (``LayoutBatch``).

A ``LayoutBatch`` is a struct of float64 arrays, one per field, so the cost model can evaluate
10^5–10^6 layouts in one vectorised call (STYLE.md §2); one layout is a batch of one.
Categorical fields are stored as integer codes (their index in the knob's choices,
``autoplan.knobs``: ``PRECISION["fp8"]`` is fp8's code).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, fields
from typing import TYPE_CHECKING, Any

import numpy as np

from autoplan.errors import LayoutError, shown
from autoplan.knobs import (  # noqa: F401 (re-exported: the knobs' choices by their old names)
    CHOICES,
    DEFAULT_PLACEMENT,
    MAX_DEGREE,
    OFFLOADS,
    OPTIMIZERS,
    PLACEMENTS,
    PP_SCHEDULES,
    PP_SPLITS,
    PRECISIONS,
    RECOMPUTE,
)
from autoplan.recompute_modules import modules_code, modules_text

if TYPE_CHECKING:
    from autoplan.specs.training import TrainingSpec

# The knobs' allowed values are declared with the knobs (autoplan.knobs) and re-exported here.
PRECISION = {name: float(i) for i, name in enumerate(PRECISIONS)}  # name -> its code in a LayoutBatch

INT_FIELDS = ("dp", "tp", "pp", "vpp", "cp", "ep", "etp", "zero", "mbs", "grad_acc")
# The pipeline knobs a record may leave out (older plans.json, CSV rows): their first choice.
OPTIONAL_CODE_FIELDS = {"pp_schedule": PP_SCHEDULES, "pp_split": PP_SPLITS,
                        "optimizer": OPTIMIZERS, "offload": OFFLOADS}
CODE_FIELDS = dict(CHOICES)  # the categorical knobs and their names, in code order (autoplan.knobs)
# Recompute and offload as production runs them (see ``Layout``), with the value that means
# "as before": full recompute of every layer, the trainer's own selective set, no offload.
# hsdp: hybrid sharding (autoplan.cost.hybrid_shard), 0 = shard over the whole ZeRO group.
PRODUCTION_DEFAULTS = {"recompute_layers": 0, "recompute_modules": "", "offload_layers": 0, "hsdp": 0}
FIELDS = INT_FIELDS + ("sp",) + tuple(CODE_FIELDS) + tuple(PRODUCTION_DEFAULTS)
# The columns of a plan record (CSV, JSON, plans.json): the layout plus the training setup's
# gpus, seq_len and the layout's batch, in the order results files have always used.
SETUP_FIELDS = ("gpus", "seq_len", "gbs_seqs")
RECORD_FIELDS = ("gpus", *INT_FIELDS, "seq_len", "gbs_seqs", "sp", "recompute", "precision", "placement",
                 *PRODUCTION_DEFAULTS, *OPTIONAL_CODE_FIELDS)


@dataclass(frozen=True)
class Layout:
    """The parallel knobs of one layout, every one resolved (see ``resolve_layout``).

    The training setup (GPUs, sequence length, global batch) is a ``TrainingSpec`` of its own;
    ``precision`` stays a layout knob because the search explores bf16 and fp8.

    Recompute and offload as production uses them (Megatron-Core core_v0.15.3
    ``transformer_config.py``, ``TransformerBlock._checkpointed_forward``):

    * ``recompute_layers`` (full recompute only): 0 recomputes every layer (``--recompute-method
      uniform --recompute-num-layers 1``); N > 0 recomputes the first N layers of each (virtual)
      stage and keeps the others' activations (``--recompute-method block
      --recompute-num-layers N``).
    * ``recompute_modules`` (selective only): comma-separated ``RECOMPUTE_MODULES``
      (``--recompute-modules``); empty is the trainer's own selective recompute (Megatron's
      default ``core_attn``).
    * ``offload_layers``: activations of N layers per stage go to host memory during forward
      and come back for backward (``TransformerConfig.cpu_offloading_num_layers``).

    ``pp_schedule`` (``PP_SCHEDULES``) and ``pp_split`` (``PP_SPLITS``) choose the pipeline
    schedule and how layers fall on stages (``autoplan.cost.schedule``, ``autoplan.cost.stages``);
    ``optimizer`` (``OPTIMIZERS``) and ``offload`` (``OFFLOADS``) the optimizer and what of the
    model states lives in host memory (``autoplan.cost.optimizer``, ``autoplan.cost.offload``).

    ``hsdp``: hybrid sharding, ZeRO's model states sharded inside groups of ``hsdp`` ranks of the
    ZeRO group and replicated across them (FSDP2 HSDP, Megatron's distributed-optimizer
    instances, DeepSpeed ZeRO++ hpZ; ``autoplan.cost.hybrid_shard``); 0 shards over the whole group.
    """

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
    sp: bool
    recompute: str = "none"
    precision: str = "bf16"
    placement: str = DEFAULT_PLACEMENT
    recompute_layers: int = 0
    recompute_modules: str = ""
    offload_layers: int = 0
    pp_schedule: str = "default"
    pp_split: str = "balanced"
    optimizer: str = "adamw"
    offload: str = "none"
    hsdp: int = 0

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
        if self.recompute_layers:
            parts.append(f"rc_layers={self.recompute_layers}")
        if self.recompute_modules:
            parts.append(f"rc_modules={self.recompute_modules}")
        if self.offload_layers:
            parts.append(f"offload={self.offload_layers}")
        if self.pp_schedule != "default":
            parts.append(f"sched={self.pp_schedule}")
        if self.pp_split != "balanced":
            parts.append(f"split={self.pp_split}")
        if self.optimizer != "adamw":
            parts.append(f"opt={self.optimizer}")
        if self.offload != "none":
            parts.append(f"offload_states={self.offload}")
        if self.hsdp:
            parts.append(f"hsdp={self.hsdp}")
        if self.precision != "bf16":
            parts.append(self.precision)
        if not self.sp and self.tp > 1:
            parts.append("no-sp")
        return " ".join(parts)

    @property
    def gbs_seqs(self) -> int:
        """The global batch in sequences this layout trains with: dp·mbs·grad_acc."""
        return self.dp * self.mbs * self.grad_acc

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_record(self, training: TrainingSpec) -> dict[str, Any]:
        """The layout with the setup columns (gpus, seq_len, gbs_seqs), in ``RECORD_FIELDS`` order."""
        values = {**self.to_dict(), "gpus": training.gpus, "seq_len": training.seq_len,
                  "gbs_seqs": self.gbs_seqs}
        return {name: values[name] for name in RECORD_FIELDS}


def as_int(name: str, value: Any) -> int:
    if isinstance(value, bool):
        raise LayoutError(f"{name} must be an integer, got {shown(value)}")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise LayoutError(f"{name} must be an integer, got {shown(value)}") from None
    except OverflowError:  # an int beyond float64
        raise LayoutError(f"{name} = {shown(value)} is absurdly large") from None
    if not np.isfinite(number) or number != int(number):
        raise LayoutError(f"{name} must be an integer, got {shown(value)}")
    if abs(number) > 2**40:
        raise LayoutError(f"{name} = {shown(value)} is absurdly large")
    return int(number)


def as_bool(name: str, value: Any) -> bool:
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise LayoutError(f"{name} must be true or false, got {shown(value)}")


def production_knobs(v: Mapping[str, Any], recompute: str) -> dict[str, Any]:
    """recompute_layers, recompute_modules, offload_layers and hsdp of a layout, checked against
    ``recompute`` (layers only with full, modules only with selective)."""
    out: dict[str, Any] = {}
    for name in ("recompute_layers", "offload_layers", "hsdp"):
        out[name] = as_int(name, v.get(name, 0))
        if out[name] < 0:
            raise LayoutError(f"{name} must be >= 0, got {out[name]}")
    out["recompute_modules"] = modules_text(modules_code(v.get("recompute_modules", "")))
    if out["recompute_layers"] and recompute != "full":
        raise LayoutError(f"recompute_layers ({out['recompute_layers']}) needs recompute = full, "
                          f"got recompute = {recompute}")
    if out["recompute_modules"] and recompute != "selective":
        raise LayoutError(f"recompute_modules ({out['recompute_modules']}) needs recompute = selective, "
                          f"got recompute = {recompute}")
    return out


def derive_batch_knobs(values: Mapping[str, Any], training: TrainingSpec) -> dict[str, np.ndarray]:
    """dp, grad_acc and sp of layouts from their other knobs: the one derivation, over arrays.

    ``values`` maps knobs to float64 arrays (a batch of one is an array of one); a given ``dp``,
    ``grad_acc`` or ``sp`` is kept, a missing one is derived:

    * ``dp = gpus/(tp·pp·cp)``;
    * ``grad_acc`` is the integer >= 1 whose batch ``dp·mbs·grad_acc`` lies nearest
      ``training.gbs_seqs`` (ties to the smaller batch);
    * ``sp = tp > 1`` (Megatron's and torchtitan's default with tensor parallelism).

    Also returns two masks: ``dp_whole`` (dp is a positive integer and dp·tp·pp·cp = gpus) and
    ``reaches`` (``|dp·mbs·grad_acc - gbs| <= tolerance·gbs``; with tolerance 0: exactly).
    """
    tp, pp, cp, mbs = (np.asarray(values[k], dtype=np.float64) for k in ("tp", "pp", "cp", "mbs"))
    gbs = float(training.gbs_seqs)
    with np.errstate(divide="ignore", invalid="ignore"):
        model_parallel = tp * pp * cp
        dp = np.asarray(values["dp"], dtype=np.float64) if "dp" in values else training.gpus / model_parallel
        dp_whole = (dp >= 1) & (dp == np.floor(dp)) & (dp * model_parallel == training.gpus)
        per_step = dp * mbs
        if "grad_acc" in values:
            grad_acc = np.asarray(values["grad_acc"], dtype=np.float64)
        else:
            exact = gbs / per_step
            low = np.maximum(np.floor(exact), 1.0)
            high = np.maximum(np.ceil(exact), 1.0)
            use_high = np.abs(high * per_step - gbs) < np.abs(low * per_step - gbs)
            grad_acc = np.where(use_high, high, low)
        reaches = np.abs(grad_acc * per_step - gbs) <= training.gbs_tolerance * gbs + 1e-9
    sp = np.asarray(values["sp"], dtype=np.float64) if "sp" in values else (tp > 1).astype(np.float64)
    return {"dp": dp, "grad_acc": grad_acc, "sp": sp, "dp_whole": dp_whole, "reaches": reaches}


def resolve_layout(values: Mapping[str, Any], training: TrainingSpec) -> Layout:
    """Fill in the defaults of a partial layout for ``training`` and check its invariants.

    Defaults: ``vpp = cp = ep = etp = 1``, ``zero = 1``, ``mbs = 1``, ``recompute = none``,
    ``precision = bf16``; dp, grad_acc and sp from :func:`derive_batch_knobs`. Raises
    ``LayoutError`` naming the rule and the values when a degree or the batch does not divide.
    """
    unknown = set(values) - set(FIELDS)
    if unknown:
        raise LayoutError(f"unknown layout field(s) {sorted(unknown)}; valid: {', '.join(FIELDS)}")
    v: dict[str, Any] = {k: val for k, val in values.items() if not is_blank(val)}
    out: dict[str, Any] = {}
    for name in ("tp", "pp", "vpp", "cp", "ep", "etp", "mbs"):
        out[name] = as_int(name, v.get(name, 1))
        if out[name] < 1:
            raise LayoutError(f"{name} must be >= 1, got {out[name]}")
    out["zero"] = as_int("zero", v.get("zero", 1))
    if not 0 <= out["zero"] <= 3:
        raise LayoutError(f"zero must be 0, 1, 2 or 3, got {out['zero']}")
    given = {name: as_int(name, v[name]) for name in ("dp", "grad_acc") if name in v}
    if "sp" in v:
        given["sp"] = as_bool("sp", v["sp"])
    derived = {k: a[0] for k, a in derive_batch_knobs(
        {k: np.array([float(x)]) for k, x in {**out, **given}.items()}, training).items()}
    _check_derived(out, given, derived, training)
    out.update(dp=int(derived["dp"]), grad_acc=int(derived["grad_acc"]), sp=bool(derived["sp"]))
    for name, choices in CODE_FIELDS.items():
        value = str(v.get(name, choices[0])).strip().lower()
        if value not in choices:
            raise LayoutError(f"{name} must be one of {', '.join(choices)}, got {shown(v.get(name))}")
        out[name] = value
    out.update(production_knobs(v, out["recompute"]))
    return Layout(**out)


def _check_derived(out: dict[str, int], given: dict[str, Any], derived: dict[str, Any],
                   training: TrainingSpec) -> None:
    """LayoutError when dp is not whole or the batch is not reached, with the values."""
    gpus, model_parallel = training.gpus, out["tp"] * out["pp"] * out["cp"]
    if "dp" not in given and gpus % model_parallel:
        raise LayoutError(f"gpus ({gpus}) must be a multiple of tp·pp·cp "
                          f"({out['tp']}·{out['pp']}·{out['cp']} = {model_parallel})")
    if not derived["dp_whole"]:
        raise LayoutError(f"dp·tp·pp·cp must equal gpus, got dp({given['dp']})·tp({out['tp']})·"
                          f"pp({out['pp']})·cp({out['cp']}) != gpus({gpus})")
    if given.get("grad_acc", 1) < 1:
        raise LayoutError(f"grad_acc must be >= 1, got {given['grad_acc']}")
    if derived["reaches"]:
        return
    dp, mbs, gbs = int(derived["dp"]), out["mbs"], training.gbs_seqs
    within = f" within ±{training.gbs_tolerance:g}" if training.gbs_tolerance else ""
    if "grad_acc" in given:
        raise LayoutError(f"gbs_seqs ({gbs}) must equal dp·mbs·grad_acc{within}, got dp({dp})·mbs({mbs})·"
                          f"grad_acc({given['grad_acc']}) = {dp * mbs * given['grad_acc']}")
    raise LayoutError(f"gbs_seqs ({gbs}) must be a multiple of dp·mbs{within} "
                      f"({dp}·{mbs} = {dp * mbs})")


def is_blank(value: Any) -> bool:
    """None, NaN or an empty cell: a value left to the defaults."""
    return value is None or value != value or (isinstance(value, str) and not value.strip())


class LayoutBatch:
    """A struct of arrays: ``batch.tp`` is a float64 array with one entry per layout."""

    def __init__(self, arrays: Mapping[str, np.ndarray]):
        missing = [name for name in FIELDS if name not in arrays and name not in PRODUCTION_DEFAULTS
                   and name not in OPTIONAL_CODE_FIELDS]
        assert not missing, f"LayoutBatch is missing fields {missing}"
        size = {np.shape(arrays[name]) for name in FIELDS if name in arrays}
        assert len(size) == 1, f"LayoutBatch fields differ in shape: {size}"
        for name in FIELDS:  # recompute and offload knobs left out take their defaults (codes 0)
            value = arrays[name] if name in arrays else np.zeros(np.shape(arrays["tp"]))
            setattr(self, name, np.asarray(value, dtype=np.float64))

    def __len__(self) -> int:
        return int(self.tp.shape[0])

    @property
    def gbs_seqs(self) -> np.ndarray:
        """The global batch in sequences of each layout: dp·mbs·grad_acc."""
        return self.dp * self.mbs * self.grad_acc

    @classmethod
    def from_layouts(cls, layouts: Iterable[Layout]) -> LayoutBatch:
        layouts = list(layouts)
        columns = []
        for name in FIELDS:
            if name in CODE_FIELDS:
                codes = CODE_FIELDS[name]
                columns.append([codes.index(getattr(x, name)) for x in layouts])
            elif name == "recompute_modules":
                columns.append([modules_code(x.recompute_modules) for x in layouts])
            else:
                columns.append([float(getattr(x, name)) for x in layouts])
        # (one array, a row per field: one numpy call where there were one per field)
        table = np.array(columns, dtype=np.float64).reshape(len(FIELDS), len(layouts))
        # Every field, float64 rows of one shape: what __init__ checks and converts holds already.
        batch = cls.__new__(cls)
        for name, row in zip(FIELDS, table):
            setattr(batch, name, row)
        return batch

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
            elif f.name == "recompute_modules":
                values[f.name] = modules_text(raw)
            else:
                values[f.name] = int(raw)
        return Layout(**values)

    def records(self, training: TrainingSpec) -> list[dict[str, Any]]:
        return [self.layout(i).to_record(training) for i in range(len(self))]
