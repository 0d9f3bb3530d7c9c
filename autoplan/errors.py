"""User-facing error types.

Every error caused by user input derives from :class:`AutoplanError` (a ``ValueError``), so the
CLI can turn it into one clear line and exit code 2. ``assert`` is kept for internal invariants.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class AutoplanError(ValueError):
    """Bad user input: the message says what was wrong, where, and what would be valid."""


SHOWN_CHARS = 80  # a value echoed in a message is cut to this many characters


def shown(value: object, limit: int = SHOWN_CHARS) -> str:
    """``repr(value)`` for a message: control characters escaped, cut to ``limit`` characters
    with an ellipsis, so a 300 MB value or a terminal escape never reaches the terminal whole."""
    if isinstance(value, int) and value.bit_length() > 1000:  # repr() refuses over 4,300 digits
        return f"an integer of about {int(value.bit_length() * 0.30103)} digits"
    text = repr(value) if isinstance(value, str) else escape(repr(value))
    return text if len(text) <= limit else text[:limit - 1] + "…"


def escape(text: object) -> str:
    """``str(text)`` with control and format characters (a newline, an escape sequence, the
    right-to-left override U+202E, lone surrogates) as escapes: the one way a value the user gave
    (a path, a name, a CSV cell) is echoed to a terminal."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(text))


class UnknownNameError(AutoplanError):
    """A name (model, hardware, trainer, sampler ...) that is not in the registry."""

    def __init__(self, kind: str, name: str, known: Iterable[str]):
        known = sorted(set(known))
        match = suggest(name, known)
        hint = f" (did you mean '{match}'?)" if match else ""
        listed = ", ".join(known[:30]) + (" ..." if len(known) > 30 else "")
        super().__init__(f"unknown {kind} {shown(name)}{hint}; known: {listed}")
        self.name = name
        self.known = known


def suggest(name: str, known: Iterable[str]) -> str | None:
    """The known name nearest to ``name``: first one containing every word and number of it
    ('70B-llama' -> 'llama3-70b'), else the closest spelling (difflib)."""
    import re

    known = list(known)
    words = re.findall(r"[a-z]+|\d+(?:\.\d+)?[a-z]?", name.lower())
    if words:
        holders = [k for k in known if all(w in k.lower() for w in words)]
        if holders:
            # shortest first; among equals the later version (llama3-70b before llama2-70b)
            return min(holders, key=lambda k: (len(k), tuple(-ord(c) for c in k)))
    close = difflib.get_close_matches(name.lower(), [k.lower() for k in known], n=1, cutoff=0.5)
    return next((k for k in known if k.lower() == close[0]), None) if close else None


class SpecError(AutoplanError):
    """A model, hardware, search-space or profile file (or dict) that is malformed."""

    def __init__(self, where: str, message: str):
        shown_where = escape(where) if len(where) <= 200 else escape(where[:199]) + "…"
        super().__init__(f"{shown_where}: {message}")
        self.where = where


class LayoutError(AutoplanError):
    """A layout that breaks a rule (degrees, divisibility, batch size)."""


class NoFeasiblePlanError(AutoplanError):
    """The search found no layout that is legal, fits and reaches the batch size (exit code 1)."""

    exit_code = 1
