"""The published validation sources by name: one loader per reference file of ``validation/``
(:mod:`autoplan.calibration.validation`, :mod:`autoplan.calibration.published_runs`)."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from autoplan.calibration.megatron_bridge_source import load_megatron_bridge
from autoplan.calibration.nemo_source import load_nemo, load_nemo_added
from autoplan.calibration.published_runs import load_mpt, load_other_runs
from autoplan.calibration.rows import Source
from autoplan.calibration.validation import (
    load_korthikanti,
    load_llama3_405b,
    load_megatron_core_h100,
    load_playbook_best,
    load_playbook_sweep,
    load_sc21,
    load_torchtitan,
)
from autoplan.errors import UnknownNameError

SOURCES: dict[str, Callable[[], Source]] = {
    "playbook_sweep": load_playbook_sweep,
    "playbook_best": load_playbook_best,
    "torchtitan": load_torchtitan,
    "sc21": load_sc21,
    "korthikanti": load_korthikanti,
    "megatron_core_h100": load_megatron_core_h100,
    "llama3_405b": load_llama3_405b,
    "mpt": load_mpt,
    "other_runs": load_other_runs,
    "nemo": load_nemo,
    "nemo_added": load_nemo_added,
    "megatron_bridge": load_megatron_bridge,
}


def load_source(name: str) -> Source:
    if name not in SOURCES:
        raise UnknownNameError("validation source", name, SOURCES)
    return SOURCES[name]()


def load_sources(names: Iterable[str] | None = None) -> dict[str, Source]:
    """The named sources (all of them by default), loaded."""
    return {name: load_source(name) for name in (names or SOURCES)}
