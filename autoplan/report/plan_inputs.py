"""What a plans.json records of the inputs its plans were searched with, and reading it back.

A plan is a layout *for* a model, a cluster, a trainer profile and a setup; ``export``,
``explain`` and ``estimate --plan`` must price and write it for those, not for the options'
defaults. ``inputs_record`` writes, under ``inputs`` in plans.json: the model and the hardware as
the user named them (a preset name, or a file's absolute path with its SHA-256, so a later
edit of the file is noticed), the cluster's GPUs per node and NIC share, the profile file, the
FLOPs convention. ``recorded_inputs`` reads them back; a file whose content changed since the
search is named in a note.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

MAX_HASHED_BYTES = 64 * 2**20  # a model or GPU YAML is kilobytes; anything larger is not hashed


def file_reference(ref: str | None) -> dict[str, Any]:
    """``{"ref": ...}`` for a preset name, ``{"ref": absolute path, "sha256": ...}`` for a file."""
    if not ref:
        return {}
    path = Path(ref)
    try:
        if path.is_file() and path.stat().st_size <= MAX_HASHED_BYTES:
            return {"ref": str(path.resolve()), "sha256": hashlib.sha256(path.read_bytes()).hexdigest()}
    except OSError:
        pass
    return {"ref": str(ref)}


def inputs_record(ctx: Any, references: Mapping[str, str | None] | None = None) -> dict[str, Any]:
    """The inputs of a search with context ``ctx`` (a CostContext); ``references`` are the model,
    hardware and profile as given on the command line (None: the loaded names)."""
    refs = dict(references or {})
    cluster, training = ctx.cluster, ctx.training
    return {"model": file_reference(refs.get("model") or ctx.model.name),
            "hardware": file_reference(refs.get("hardware") or cluster.gpu.name),
            "profile": file_reference(refs.get("profile")) or None,
            "gpus_per_node": cluster.gpus_per_node, "nic_bytes_per_s": cluster.nic_bytes_per_s,
            "flops_convention": training.flops_convention}


def recorded_inputs(data: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """(the recorded model, hardware, profile, gpus_per_node, nic_bytes_per_s and
    flops_convention that a plans.json holds, with notes on files changed since); a file written
    before ``inputs`` existed gives its top-level model and hardware names."""
    inputs = data.get("inputs") if isinstance(data.get("inputs"), dict) else {}
    out: dict[str, Any] = {}
    notes = []
    for name in ("model", "hardware", "profile"):
        entry = inputs.get(name)
        if isinstance(entry, dict) and isinstance(entry.get("ref"), str):
            out[name] = entry["ref"]
            if "sha256" in entry and file_reference(entry["ref"]).get("sha256") != entry["sha256"]:
                notes.append(f"{entry['ref']} has changed (or gone) since the search; the plan was "
                             "searched with its earlier content")
        elif name != "profile" and isinstance(data.get(name), str):
            out[name] = data[name]
    for name, kind in (("gpus_per_node", int), ("nic_bytes_per_s", (int, float)), ("flops_convention", str)):
        if isinstance(inputs.get(name), kind) and not isinstance(inputs.get(name), bool):
            out[name] = inputs[name]
    return out, notes
