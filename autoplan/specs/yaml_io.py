"""Strict YAML and JSON reading: safe_load only, known keys only, errors that say where."""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from autoplan.errors import SpecError, shown
from autoplan.files import read_user_text
from autoplan.specs import yaml_cache


def read_mapping(path: str | Path) -> dict[str, Any]:
    """Read a YAML or JSON file whose top level is a mapping, with clear errors (a regular file
    of at most 16 MiB: :func:`autoplan.files.read_user_text`)."""
    text = read_user_text(path)
    return parse_mapping(text, str(path), is_json=Path(path).suffix.lower() == ".json")


def _load_yaml(text: str, where: str = "<text>") -> Any:
    """``text`` parsed by :func:`autoplan.specs.yaml_parse.parse_yaml` (the strict loader, with
    libyaml's C composer where that is safe), or, for a text parsed before, from
    :mod:`autoplan.specs.yaml_cache` (keyed by the text; never stale) without importing PyYAML."""
    cached = yaml_cache.lookup(text)
    if cached is not yaml_cache.MISSING:
        return cached
    data = _parse_uncached(text, where)
    yaml_cache.store(text, data)
    return data


def _parse_uncached(text: str, where: str) -> Any:
    from autoplan.specs.yaml_parse import parse_yaml

    return parse_yaml(text, where)


def _json_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object; a key given twice is refused (``json`` would keep the last silently)."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"key {shown(key)} appears twice")
        out[key] = value
    return out


def parse_json(text: str, where: str) -> Any:
    """JSON text, strictly: no duplicate keys, no NaN, nesting and numbers of sane size."""
    try:
        return json.loads(text, object_pairs_hook=_json_object, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        raise SpecError(where, f"invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None
    except RecursionError:
        raise SpecError(where, "invalid JSON: nesting too deep") from None
    except ValueError as exc:  # a duplicate key, or an integer over Python's 4,300 digits
        raise SpecError(where, f"invalid JSON: {_short(exc)}") from None


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows")


def _short(exc: Exception) -> str:
    from autoplan.specs.yaml_parse import short_error

    return short_error(exc)


def parse_mapping(text: str, where: str, *, is_json: bool = False) -> dict[str, Any]:
    """Parse YAML (or JSON) text whose top level must be a mapping."""
    if not text.strip():
        raise SpecError(where, "file is empty")
    if is_json:
        data = parse_json(text, where)
    else:
        data = _load_yaml(text, where)
    if not isinstance(data, Mapping):
        raise SpecError(where, f"expected a mapping at the top level, got {type(data).__name__}")
    return dict(data)


MAX_NAME_CHARS = 255  # a name becomes part of a file name (result folders, exported configs)
# Unicode categories refused in names: control characters, format characters (the right-to-left
# override U+202E makes a terminal show text reversed; zero-width ones hide), lone surrogates (not
# encodable as UTF-8), line and paragraph separators; a name is one line shown as written.
_NOT_IN_NAMES = ("Cc", "Cf", "Cs", "Zl", "Zp")


def check_name(value: Any, key: str, where: str) -> str:
    """A name (of a model, GPU, alias): a non-empty single line of printable text of at most
    255 characters, stripped."""
    if not isinstance(value, str) or not value.strip():
        raise SpecError(where, f"{key}: expected a non-empty string, got {shown(value)}")
    text = value.strip()
    if len(text) > MAX_NAME_CHARS:
        raise SpecError(where, f"{key}: at most {MAX_NAME_CHARS} characters, got {len(text)}: {shown(text)}")
    bad = next((c for c in text if unicodedata.category(c) in _NOT_IN_NAMES), None)
    if bad is not None:
        raise SpecError(where, f"{key}: control or invalid character {shown(bad)} in {shown(text)}")
    return text


def check_keys(data: Mapping[str, Any], where: str, *, required: Iterable[str],
               optional: Iterable[str] = ()) -> None:
    """Refuse unknown keys (with a 'did you mean') and missing required ones."""
    import difflib

    required, optional = list(required), list(optional)
    known = required + optional
    for key in data:
        if key not in known:
            close = difflib.get_close_matches(key, known, n=1) if isinstance(key, str) else []
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            raise SpecError(where, f"unknown key {shown(key)}{hint}")
    missing = [key for key in required if key not in data]
    if missing:
        raise SpecError(where, f"missing required key(s): {', '.join(missing)}")


def is_file_stem(name: str) -> bool:
    """Whether ``name`` can only name a file in the folder it is looked up in: ASCII letters,
    digits, '-', '_' and '.', not starting with '.' (no path separator, no '..')."""
    return (name.isascii() and not name.startswith(".")
            and name.replace("-", "").replace("_", "").replace(".", "").isalnum())


MAX_INT = 2**31  # no model or cluster dimension is larger; bigger values are typos or absurd


def get_int(data: Mapping[str, Any], key: str, where: str, *, default: int | None = None,
            minimum: int = 1, maximum: int = MAX_INT) -> int:
    """An integer field in [minimum, maximum]; bools and floats with a fraction are refused."""
    value = data.get(key, default)
    if value is None:
        raise SpecError(where, f"missing required key '{key}'")
    if isinstance(value, float) and value.is_integer():
        if abs(value) > MAX_INT:
            raise SpecError(where, f"{key}: must be <= {MAX_INT}, got {shown(value)}")
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise SpecError(where, f"{key}: expected an integer, got {shown(value)}")
    if value < minimum:
        raise SpecError(where, f"{key}: must be >= {minimum}, got {shown(value)}")
    if value > maximum:
        raise SpecError(where, f"{key}: must be <= {maximum}, got {shown(value)}")
    return value
