"""PyYAML's side of :mod:`autoplan.specs.yaml_io`: the strict loader and libyaml's fast path.

Imported only when a text is not in :mod:`autoplan.specs.yaml_cache` (PyYAML's import with its
loader classes costs ~20 ms of a command's start; a rerun reads every shipped file from the
cache and never needs it). :func:`parse_yaml` is the one entry point: the parsed value, or a
:class:`~autoplan.errors.SpecError` that says where.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import yaml

from autoplan.errors import SpecError, shown


def parse_yaml(text: str, where: str) -> Any:
    """``text`` parsed strictly (:class:`_StrictLoader`'s rules), errors as ``SpecError``."""
    try:
        return _parsed(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1} column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or "syntax error"
        if "nesting depth" in problem:  # libyaml's own limit (PyYAML >= 6.0.4): the words of RecursionError's
            problem = "nesting too deep"
        raise SpecError(where, f"invalid YAML{at}: {problem}") from None
    except RecursionError:
        raise SpecError(where, "invalid YAML: nesting too deep") from None
    except ValueError as exc:  # an integer over Python's 4,300 digits
        raise SpecError(where, f"invalid YAML: {short_error(exc)}") from None


def short_error(exc: Exception) -> str:
    """The message of a ValueError from parsing, Python's integer-size limit in plain words."""
    text = str(exc)
    if "integer string conversion" in text:
        return "an integer too long to be a number (over 4,300 digits)"
    return text


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


def _yaml12_resolvers() -> dict:
    """PyYAML's implicit resolvers with YAML 1.2's core schema for booleans and numbers: PyYAML
    resolves YAML 1.1's, in which ``1:20`` is the sexagesimal 80, ``010`` the octal 8 and
    ``yes``/``no``/``on``/``off`` booleans, each a silent wrong value in a config (a layer count of
    80). Here those stay strings, which the typed checks then refuse with the key's name;
    ``true``/``false``, decimal integers, ``0x`` hex, decimal floats (``1e8`` too, as YAML 1.2 reads
    it) and ``.inf``/``.nan`` are numbers and booleans as before."""
    import re

    replaced = {"tag:yaml.org,2002:bool", "tag:yaml.org,2002:int", "tag:yaml.org,2002:float"}
    out = {first: [(tag, rx) for tag, rx in resolvers if tag not in replaced]
           for first, resolvers in yaml.resolver.Resolver.yaml_implicit_resolvers.items()}
    core = [("tag:yaml.org,2002:bool", r"^(?:true|True|TRUE|false|False|FALSE)$", "tTfF"),
            ("tag:yaml.org,2002:int", r"^(?:[-+]?(?:0|[1-9][0-9]*)|0x[0-9a-fA-F]+)$", "-+0123456789"),
            # a dot or an exponent (digits alone are an integer, or, with a leading 0, a string)
            ("tag:yaml.org,2002:float", r"^(?:[-+]?(?:\.[0-9]+|[0-9]+\.[0-9]*)(?:[eE][-+]?[0-9]+)?"
                                        r"|[-+]?[0-9]+[eE][-+]?[0-9]+"
                                        r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$", "-+.0123456789")]
    for tag, pattern, first in reversed(core):  # (each inserted first: bool, int, float in that order)
        for char in first:
            out.setdefault(char, []).insert(0, (tag, re.compile(pattern)))
    return out


YAML12_RESOLVERS = _yaml12_resolvers()


class _NoDuplicateKeys:
    """``construct_mapping`` that refuses a key given twice in one mapping (YAML would keep the
    last silently); YAML 1.2's booleans and numbers (``YAML12_RESOLVERS``)."""

    yaml_implicit_resolvers = YAML12_RESOLVERS

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
