"""The model registry: presets in ``model_db/*.yaml`` and user files (HF ``config.json`` or YAML).

A preset is an HF ``config.json`` written as YAML plus autoplan's keys (``name`` equal to the
file name, ``aliases``, ``sources`` naming where the values come from, ``seq_len``); unknown
keys are refused. Names and aliases are matched case-insensitively and must be unique.
"""

from __future__ import annotations

import functools
from pathlib import Path

from autoplan.errors import AutoplanError, SpecError, UnknownNameError, shown
from autoplan.files import exists
from autoplan.paths import data_dir
from autoplan.specs.hf_config import model_from_hf_config
from autoplan.specs.model import ModelSpec
from autoplan.specs.yaml_io import read_mapping

_FILE_SUFFIXES = (".json", ".yaml", ".yml")


def load_model(name_or_path: str | Path) -> ModelSpec:
    """A preset by name or alias (any case), or the model in a ``config.json``/YAML file.

    Text with a path separator or a ``.json``/``.yaml``/``.yml`` suffix is a path; a folder
    means its ``config.json`` (a downloaded HF snapshot). A preset name wins over a file of the
    same name in the working directory.
    """
    text = str(name_or_path).strip()
    presets, index = _registry()
    if not text:
        raise UnknownNameError("model", "(empty)", known_names(presets))
    if not _looks_like_path(text) and text.lower() in index:
        return presets[index[text.lower()]]
    if _looks_like_path(text) or exists(text):
        if _looks_like_hub_id(text) and not exists(text):
            raise AutoplanError(f"model {text!r} is not a preset nor a local file: autoplan reads a model's "
                                "config.json from disk (no download); fetch it with `huggingface-cli download "
                                f"{text} config.json --local-dir DIR` and give --model DIR/config.json, or use "
                                "a preset (`autoplan models`)")
        return load_model_file(text)
    raise UnknownNameError("model", text, known_names(presets))


def _looks_like_hub_id(text: str) -> bool:
    """'org/name' with no file suffix: a Hugging Face hub repository id, not a path."""
    parts = text.split("/")
    return (len(parts) == 2 and all(parts) and not text.startswith((".", "~"))
            and not text.lower().endswith((".json", ".yaml", ".yml")))


def is_preset(name_or_path: str | Path) -> bool:
    """Whether :func:`load_model` resolves ``name_or_path`` to a preset (else to a file)."""
    text = str(name_or_path).strip()
    _, index = _registry()
    return not _looks_like_path(text) and text.lower() in index


def load_model_file(path: str | Path) -> ModelSpec:
    """Read a user's HF ``config.json`` (any extra HF keys are ignored) or YAML file."""
    path = Path(path)
    if path.is_dir():
        path = path / "config.json"
    config = read_mapping(path)
    has_own_name = "name" in config or config.get("_name_or_path")
    return model_from_hf_config(config, str(path), name=None if has_own_name else _name_of(path))


def list_models() -> list[ModelSpec]:
    """Every preset, sorted by name."""
    presets, _ = _registry()
    return [presets[name] for name in sorted(presets)]


def read_presets(folder: str | Path) -> dict[str, ModelSpec]:
    """Read and check every ``*.yaml`` preset in ``folder`` (not cached; see :func:`load_model`)."""
    folder = Path(folder)
    presets = {}
    for path in sorted(folder.glob("*.yaml")):
        spec = _read_preset(path, where=f"{folder.name}/{path.name}")
        presets[spec.name] = spec
    build_index(presets)  # raises on a collision
    return presets


def build_index(presets: dict[str, ModelSpec]) -> dict[str, str]:
    """Lower-cased name or alias -> preset name; a name or alias used twice is an error."""
    index: dict[str, str] = {}
    for spec in presets.values():
        where = f"model '{spec.name}'"
        keys = [key.lower() for key in (spec.name, *spec.aliases)]
        repeated = sorted({key for key in keys if keys.count(key) > 1})
        if repeated:
            raise SpecError(where, f"aliases {repeated} repeat its name or each other "
                                   "(case-insensitive)")
        for key in keys:
            if key in index:
                raise SpecError(where, f"name or alias '{key}' is also used by "
                                       f"'{index[key]}'; names and aliases must be unique "
                                       "(case-insensitive)")
            index[key] = spec.name
    return index


def known_names(presets: dict[str, ModelSpec]) -> list[str]:
    """Every name and alias as written in the presets (for 'did you mean')."""
    return [key for spec in presets.values() for key in (spec.name, *spec.aliases)]


@functools.cache
def _registry() -> tuple[dict[str, ModelSpec], dict[str, str]]:
    presets = read_presets(data_dir("model_db"))
    return presets, build_index(presets)


def _read_preset(path: Path, where: str) -> ModelSpec:
    config = read_mapping(path)
    if config.get("name") != path.stem:
        raise SpecError(where, f"name must equal the file name '{path.stem}', "
                               f"got {shown(config.get('name'))}")
    if not config.get("sources"):
        raise SpecError(where, "sources: a preset must say where its values come from "
                               "(e.g. the config.json it was copied from)")
    return model_from_hf_config(config, where, strict=True)


def _looks_like_path(text: str) -> bool:
    return "/" in text or "\\" in text or text.lower().endswith(_FILE_SUFFIXES)


def _name_of(path: Path) -> str:
    """``.../Llama-3.1-8B/config.json`` -> ``Llama-3.1-8B``; ``my-model.yaml`` -> ``my-model``."""
    if path.stem == "config" and path.parent.name:
        return path.parent.name
    return path.stem
