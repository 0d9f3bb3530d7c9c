"""Strict YAML and JSON reading: safe_load only, known keys only, errors that say where."""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Hashable, Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from autoplan.errors import SpecError, shown
from autoplan.files import read_user_text
from autoplan.specs import yaml_cache


def read_mapping(path: str | Path) -> dict[str, Any]:
    """Read a YAML or JSON file whose top level is a mapping, with clear errors (a regular file
    of at most 16 MiB: :func:`autoplan.files.read_user_text`)."""
    text = read_user_text(path)
    return parse_mapping(text, str(path), is_json=Path(path).suffix.lower() == ".json")


def _safe_loader_base() -> type:
    """``yaml.SafeLoader``, with libyaml's C scanner and parser when PyYAML was built with it.

    The C parser (what ``yaml.CSafeLoader`` runs) reads the shipped files ~6x faster than the
    pure-Python one (benchmarks/speed.py); the composer stays PyYAML's Python one (CSafeLoader
    composes in C, where :class:`_StrictLoader` could not see an alias), and so does the safe
    constructor: what is accepted and refused, and every message, is the same either way.
    """
    try:
        from yaml._yaml import CParser
    except ImportError:  # PyYAML without libyaml
        return yaml.SafeLoader
    from yaml.composer import Composer
    from yaml.constructor import SafeConstructor
    from yaml.resolver import Resolver

    class LibyamlSafeLoader(Composer, CParser, SafeConstructor, Resolver):
        def __init__(self, stream):
            CParser.__init__(self, stream)
            Composer.__init__(self)
            SafeConstructor.__init__(self)
            Resolver.__init__(self)

    return LibyamlSafeLoader


class _NoDuplicateKeys:
    """``construct_mapping`` that refuses a key given twice in one mapping (YAML would keep the
    last silently)."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if not isinstance(key, Hashable):
                continue  # SafeLoader refuses it with its own message
            if key in seen:
                raise yaml.constructor.ConstructorError(None, None, f"key {shown(key)} appears twice",
                                                        key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep)


class _StrictLoader(_NoDuplicateKeys, _safe_loader_base()):
    """``safe_load`` that refuses aliases (nested aliases expand to gigabytes: the "billion
    laughs") and a key given twice in one mapping (YAML would keep the last silently)."""

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise yaml.composer.ComposerError(None, None, f"aliases (*{event.anchor}) are not allowed in "
                                              "autoplan files; write the value out", event.start_mark)
        return super().compose_node(parent, index)


# The C composer recurses on the C stack: a document nested ~30,000 deep crashes the process
# (measured, PyYAML 6 with libyaml 0.2.5). Each level of nesting needs one indicator of its own
# ('[', '{', '-', '?' or ':'), so a text with fewer indicators than this nests less deep.
MAX_C_COMPOSER_INDICATORS = 2000
_NOT_COMPOSED = object()


def _load_yaml(text: str) -> Any:
    """``yaml.load(text, Loader=_StrictLoader)``, faster: composed by libyaml in C (~3x faster
    for the shipped files) where that is safe, then checked for aliases (one node reached
    twice) and constructed with the same duplicate-key check. Anything unusual (an alias, an
    error, deep nesting, no libyaml) goes to :class:`_StrictLoader`, whose result or error
    message is the answer in every case. A text parsed before comes from
    :mod:`autoplan.specs.yaml_cache` (keyed by the text; never stale)."""
    cached = yaml_cache.lookup(text)
    if cached is not yaml_cache.MISSING:
        return cached
    data = _parsed(text)
    yaml_cache.store(text, data)
    return data


def _parsed(text: str) -> Any:
    if _CComposedLoader is not None and sum(map(text.count, "[{-?:")) < MAX_C_COMPOSER_INDICATORS:
        try:
            data = _c_composed(text)
        except Exception:  # noqa: BLE001 - whatever it is, _StrictLoader raises it with its own words
            data = _NOT_COMPOSED
        if data is not _NOT_COMPOSED:
            return data
    return yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass


def _c_composed(text: str) -> Any:
    loader = _CComposedLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        if _reached_twice(node):
            return _NOT_COMPOSED  # an alias: _StrictLoader says where
        return loader.construct_document(node)
    finally:
        loader.dispose()


def _reached_twice(root) -> bool:
    """Whether some node of the graph is reached twice (libyaml composes an alias as the
    anchored node itself)."""
    seen: set[int] = set()
    stack = [root]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            return True
        seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            stack.extend(item for pair in node.value for item in pair)
        elif isinstance(node, yaml.SequenceNode):
            stack.extend(node.value)
    return False


def _c_composed_loader() -> type | None:
    """libyaml's composer with PyYAML's safe constructor and resolver (``yaml.CSafeLoader``) and
    the duplicate-key check; None without libyaml."""
    if not hasattr(yaml, "CSafeLoader"):
        return None

    class CComposedLoader(_NoDuplicateKeys, yaml.CSafeLoader):
        pass

    return CComposedLoader


_CComposedLoader = _c_composed_loader()


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
    text = str(exc)
    if "integer string conversion" in text:
        return "an integer too long to be a number (over 4,300 digits)"
    return text


def parse_mapping(text: str, where: str, *, is_json: bool = False) -> dict[str, Any]:
    """Parse YAML (or JSON) text whose top level must be a mapping."""
    if not text.strip():
        raise SpecError(where, "file is empty")
    if is_json:
        data = parse_json(text, where)
    else:
        try:
            data = _load_yaml(text)
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            at = f" at line {mark.line + 1} column {mark.column + 1}" if mark else ""
            problem = getattr(exc, "problem", None) or "syntax error"
            raise SpecError(where, f"invalid YAML{at}: {problem}") from None
        except RecursionError:
            raise SpecError(where, "invalid YAML: nesting too deep") from None
        except ValueError as exc:  # an integer over Python's 4,300 digits
            raise SpecError(where, f"invalid YAML: {_short(exc)}") from None
    if not isinstance(data, Mapping):
        raise SpecError(where, f"expected a mapping at the top level, got {type(data).__name__}")
    return dict(data)


MAX_NAME_CHARS = 255  # a name becomes part of a file name (result folders, exported configs)
# Unicode categories refused in names: control characters, lone surrogates (not encodable as
# UTF-8), line and paragraph separators; a name is one line that a terminal shows as written.
_NOT_IN_NAMES = ("Cc", "Cs", "Zl", "Zp")


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
