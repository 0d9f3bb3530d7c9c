"""Records to layouts: the one way from a dict, a CSV row or a plans.json row to a ``Layout``."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from autoplan.errors import LayoutError, shown
from autoplan.knobs import KNOBS
from autoplan.layout import (
    CODE_FIELDS,
    FIELDS,
    INT_FIELDS,
    OPTIONAL_CODE_FIELDS,
    PRODUCTION_DEFAULTS,
    SETUP_FIELDS,
    Layout,
    as_bool,
    as_int,
    is_blank,
    production_knobs,
    resolve_layout,
)

if TYPE_CHECKING:
    from autoplan.specs.training import TrainingSpec


# Names other tools and papers give the record columns (Megatron's and DeepSpeed's argument names,
# the refdata tables'): a CSV column spelled so is refused with the name autoplan reads, where
# passing it through would leave the knob at its default unseen. The knobs' own are declared
# with them (autoplan.knobs); the setup columns' here.
SETUP_ALIASES = {"num_gpus": "gpus", "world_size": "gpus", "seq_length": "seq_len", "sequence_length": "seq_len",
                 "global_batch_size": "gbs_seqs", "global_batch_seqs": "gbs_seqs", "gbs": "gbs_seqs"}
COLUMN_ALIASES = {**{alias: knob.name for knob in KNOBS for alias in knob.aliases}, **SETUP_ALIASES}


def check_record_columns(columns: Iterable[str], where: str, known: Iterable[str]) -> None:
    """Refuse a column that names a record field in another spelling (``COLUMN_ALIASES``) or is a
    near miss of a ``known`` column, with the name to use; other columns pass (labels, notes)."""
    import difflib

    from autoplan.errors import SpecError

    columns, known = list(columns), list(known)
    for column in columns:
        if column in known:
            continue
        alias = COLUMN_ALIASES.get(column.strip().lower().replace("-", "_"))
        if alias is not None and alias not in columns:
            raise SpecError(where, f"column '{column}' is not read: autoplan reads this knob as '{alias}' "
                                   f"(rename the column; left as it is, {alias} would take its default)")
        close = difflib.get_close_matches(column, known, n=1, cutoff=0.75)
        if close and alias is None:
            unit = " (memory is read in GiB = 2^30 bytes)" if "mem" in column else ""
            raise SpecError(where, f"unknown column '{column}' (did you mean '{close[0]}'?){unit}")


def record_setup(record: Mapping[str, Any], required: Iterable[str] = ()) -> dict[str, int]:
    """The setup columns (gpus, seq_len, gbs_seqs) a record has, as integers; LayoutError when
    one of ``required`` is missing or blank."""
    out = {}
    for name in SETUP_FIELDS:
        if name in record and not is_blank(record[name]):
            out[name] = as_int(name, record[name])
            if out[name] < 1:
                raise LayoutError(f"{name} must be >= 1, got {out[name]}")
        elif name in required:
            raise LayoutError(f"layout needs '{name}'")
    return out


def layout_from_record(record: Mapping[str, Any], training: TrainingSpec | None = None) -> Layout:
    """The one way from a record (a dict, a CSV row, a plans.json row) to a ``Layout``.

    With ``training``, the layout knobs (``FIELDS``) go through :func:`resolve_layout`, blank
    cells taking its defaults; other columns (predictions, names) are ignored. The setup columns
    a record may carry must agree with ``training``: gpus and seq_len equal, and gbs_seqs equal
    to the layout's dp·mbs·grad_acc. Without ``training`` (display of a results-file row) the
    record must hold every knob; they are converted and checked for type, not re-derived.
    """
    if training is None:
        return _complete_layout(record)
    layout = resolve_layout({k: record[k] for k in FIELDS if k in record}, training)
    setup = record_setup(record)
    expected = {"gpus": training.gpus, "seq_len": training.seq_len, "gbs_seqs": layout.gbs_seqs}
    for name, value in setup.items():
        if value != expected[name]:
            raise LayoutError(f"the record's {name} ({value}) must equal the training setup's "
                              f"{name} ({expected[name]}) for {layout.describe()}")
    return layout


def _complete_layout(record: Mapping[str, Any]) -> Layout:
    missing = [name for name in FIELDS if name not in PRODUCTION_DEFAULTS and name not in OPTIONAL_CODE_FIELDS
               and (name not in record or is_blank(record[name]))]
    if missing:
        raise LayoutError(f"a record without its training setup must hold every layout field; "
                          f"missing {', '.join(missing)}")
    values: dict[str, Any] = {name: as_int(name, record[name]) for name in INT_FIELDS}
    values["sp"] = as_bool("sp", record["sp"])
    for name, choices in CODE_FIELDS.items():
        raw = record.get(name)
        values[name] = choices[0] if name in OPTIONAL_CODE_FIELDS and is_blank(raw) else str(raw).strip().lower()
        if values[name] not in choices:
            raise LayoutError(f"{name} must be one of {', '.join(choices)}, got {shown(raw)}")
    given = {k: record[k] for k in PRODUCTION_DEFAULTS if k in record and not is_blank(record[k])}
    values.update(production_knobs(given, values["recompute"]))
    return Layout(**values)
