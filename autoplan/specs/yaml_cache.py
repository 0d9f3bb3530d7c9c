"""A cache of parsed YAML, keyed by the text itself, so a rerun skips PyYAML's constructor.

Every command reads ~20 YAML files (presets, profiles, error bands); PyYAML constructs their
Python objects in pure Python (~25 ms of the headline search). Here the parsed value of a text
is stored with :mod:`marshal` under the SHA-256 of the text, the installed PyYAML (the size and
modification time of its ``__init__.py``, found without importing it: a reinstall or an upgrade
changes them), this format's version and Python's version: a changed file has another key, so
an entry can never be stale, only unused. A hit never imports PyYAML (~20 ms). A value marshal
cannot hold exactly (a date, an alias shared between two places) is not stored. The cache is an optimisation only: a missing, unreadable or unwritable folder
(or ``AUTOPLAN_YAML_CACHE=0``) means the text is parsed as before, and a damaged entry is
parsed again and rewritten.

Folder: ``$AUTOPLAN_CACHE_DIR``, else ``$XDG_CACHE_HOME/autoplan``, else ``~/.cache/autoplan``,
then ``yaml/``.
"""

from __future__ import annotations

import hashlib
import importlib.util
import marshal
import os
import sys
from functools import lru_cache
from pathlib import Path
from typing import Any

CACHE_FORMAT = 2  # 2: YAML 1.2 booleans and numbers (specs/yaml_parse.YAML12_RESOLVERS)
MISSING = object()  # lookup's answer for a text not stored
_PLAIN = (dict, list, str, int, float, bool, type(None))


def cache_dir() -> Path | None:
    """The folder of entries, or None when caching is off."""
    if os.environ.get("AUTOPLAN_YAML_CACHE", "1") == "0":
        return None
    root = os.environ.get("AUTOPLAN_CACHE_DIR")
    if not root:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        root = os.path.join(base, "autoplan")
    return Path(root) / "yaml"


@lru_cache(maxsize=1)
def _pyyaml_identity() -> str:
    """Which PyYAML is installed, without importing it: its ``__init__.py``'s path, size and
    modification time ('' when it cannot be found: the key still holds the text)."""
    try:
        spec = importlib.util.find_spec("yaml")
        origin = spec.origin if spec is not None else None
        stat = os.stat(origin) if origin else None
    except (ImportError, ValueError, OSError):
        return ""
    return f"{origin}:{stat.st_size}:{stat.st_mtime_ns}" if stat else ""


def _key(text: str) -> str:
    salt = f"{CACHE_FORMAT}|{_pyyaml_identity()}|{sys.version_info[:2]}|"
    return hashlib.sha256((salt + text).encode("utf-8", "surrogatepass")).hexdigest()


def lookup(text: str) -> Any:
    """The stored value of ``text``, or ``MISSING``."""
    folder = cache_dir()
    if folder is None:
        return MISSING
    try:
        return marshal.loads((folder / _key(text)).read_bytes())
    except (OSError, ValueError, EOFError, TypeError):
        return MISSING


def store(text: str, value: Any) -> None:
    """Keep ``value`` (the parsed ``text``) when it is plain data held exactly by marshal."""
    folder = cache_dir()
    if folder is None or not _is_plain(value, set()):
        return
    path = folder / _key(text)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        partial.write_bytes(marshal.dumps(value))
        os.replace(partial, path)  # whole or not at all, whoever writes it at the same time
    except OSError:
        return


def _is_plain(value: Any, seen: set[int]) -> bool:
    """Whether ``value`` is a tree of dicts, lists, strings, numbers, booleans and None in
    which no container is reached twice (marshal would not keep the sharing of an alias)."""
    if type(value) not in _PLAIN:
        return False
    if isinstance(value, dict | list):
        if id(value) in seen:
            return False
        seen.add(id(value))
        items = [*value.keys(), *value.values()] if isinstance(value, dict) else value
        return all(_is_plain(item, seen) for item in items)
    return True

