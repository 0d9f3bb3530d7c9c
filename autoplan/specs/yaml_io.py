"""Strict YAML and JSON reading: safe_load only, known keys only, errors that say where."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from autoplan.errors import SpecError

MAX_FILE_BYTES = 16 * 2**20  # a spec file larger than this is refused, not parsed


def read_mapping(path: str | Path) -> dict[str, Any]:
    """Read a YAML or JSON file whose top level is a mapping, with clear errors."""
    path = Path(path)
    where = str(path)
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise SpecError(where, f"cannot read file ({exc.strerror or exc})") from None
    if path.is_dir():
        raise SpecError(where, "is a folder, expected a file")
    if size > MAX_FILE_BYTES:
        raise SpecError(where, f"file is {size} bytes, larger than the {MAX_FILE_BYTES} bytes allowed")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise SpecError(where, f"not UTF-8 text (byte {exc.start})") from None
    except OSError as exc:
        raise SpecError(where, f"cannot read file ({exc.strerror or exc})") from None
    return parse_mapping(text, where, is_json=path.suffix.lower() == ".json")


def parse_mapping(text: str, where: str, *, is_json: bool = False) -> dict[str, Any]:
    """Parse YAML (or JSON) text whose top level must be a mapping."""
    if not text.strip():
        raise SpecError(where, "file is empty")
    try:
        data = json.loads(text) if is_json else yaml.safe_load(text)
    except json.JSONDecodeError as exc:
        raise SpecError(where, f"invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1} column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or "syntax error"
        raise SpecError(where, f"invalid YAML{at}: {problem}") from None
    except RecursionError:
        raise SpecError(where, "nesting too deep") from None
    if not isinstance(data, Mapping):
        raise SpecError(where, f"expected a mapping at the top level, got {type(data).__name__}")
    return dict(data)


def check_keys(data: Mapping[str, Any], where: str, *, required: Iterable[str],
               optional: Iterable[str] = ()) -> None:
    """Refuse unknown keys (with a 'did you mean') and missing required ones."""
    import difflib

    required, optional = list(required), list(optional)
    known = required + optional
    for key in data:
        if key not in known:
            close = difflib.get_close_matches(str(key), known, n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            raise SpecError(where, f"unknown key '{key}'{hint}")
    missing = [key for key in required if key not in data]
    if missing:
        raise SpecError(where, f"missing required key(s): {', '.join(missing)}")


MAX_INT = 2**31  # no model or cluster dimension is larger; bigger values are typos or absurd


def get_int(data: Mapping[str, Any], key: str, where: str, *, default: int | None = None,
            minimum: int = 1, maximum: int = MAX_INT) -> int:
    """An integer field in [minimum, maximum]; bools and floats with a fraction are refused."""
    value = data.get(key, default)
    if value is None:
        raise SpecError(where, f"missing required key '{key}'")
    if isinstance(value, float) and value.is_integer():
        if abs(value) > MAX_INT:
            raise SpecError(where, f"{key}: must be <= {MAX_INT}, got {value:.3g}")
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise SpecError(where, f"{key}: expected an integer, got {value!r}")
    if value < minimum:
        raise SpecError(where, f"{key}: must be >= {minimum}, got {value}")
    if value > maximum:
        raise SpecError(where, f"{key}: must be <= {maximum}, got {value:.3g}")
    return value
