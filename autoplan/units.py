"""Quantities with units: parsing at the edges, plain floats in SI units inside.

Inside autoplan every quantity is a float in bytes, seconds, FLOPs (a count), FLOP/s,
bytes/s or tokens, and its name says which. This module is the only place where unit
suffixes are read or written.

Conventions (stated, never silent):

* Bytes: ``KB MB GB TB`` are decimal (10^3 ...), ``KiB MiB GiB TiB`` binary (2^10 ...).
* Bandwidth: ``GB/s`` is gigabytes per second, ``Gb/s`` (or ``Gbps``) gigabits per second
  (divided by 8). Vendor "bidirectional" figures must be halved by the caller: the YAML states
  ``per direction``.
* Token counts: a suffix ``K M G B T`` is *binary* for batch sizes, the field's convention
  (``4M`` = 4·2^20 = 4,194,304 tokens; the playbook's "1M tokens" is 256 × 4096), unless
  ``binary=False`` (used for training-run totals such as ``15T`` = 15·10^12 tokens).
  Plain integers and scientific notation (``4e6``) are taken literally.
"""

from __future__ import annotations

import math
import re

from autoplan.errors import AutoplanError, shown

KB, MB, GB, TB = 1e3, 1e6, 1e9, 1e12
KiB, MiB, GiB, TiB = 2.0**10, 2.0**20, 2.0**30, 2.0**40
BITS_PER_BYTE = 8.0

_BYTES = {"b": 1.0, "kb": KB, "mb": MB, "gb": GB, "tb": TB,
          "kib": KiB, "mib": MiB, "gib": GiB, "tib": TiB}
_BANDWIDTH = {"gb/s": GB, "tb/s": TB, "mb/s": MB, "gib/s": GiB,
              "gbit/s": GB / BITS_PER_BYTE, "mbit/s": MB / BITS_PER_BYTE, "gbps": GB / BITS_PER_BYTE, "tbit/s": TB / BITS_PER_BYTE}
_FLOPS = {"flop/s": 1.0, "gflop/s": 1e9, "tflop/s": 1e12, "pflop/s": 1e15,
          "tflops": 1e12, "pflops": 1e15}
# Exponentials per second of a GPU's special-function units (MUFU.EX2; NVIDIA quotes
# "TeraExponentials/s"): a count per second, like FLOP/s.
_EXP = {"exp/s": 1.0, "gexp/s": 1e9, "texp/s": 1e12}
_TIME = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9, "min": 60.0, "h": 3600.0}
_COUNT_BINARY = {"": 1.0, "k": 2.0**10, "m": 2.0**20, "g": 2.0**30, "b": 2.0**30, "t": 2.0**40}
_COUNT_DECIMAL = {"": 1.0, "k": 1e3, "m": 1e6, "g": 1e9, "b": 1e9, "t": 1e12}

_QUANTITY = re.compile(r"^\s*([-+]?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|[-+]?\.\d+)\s*([A-Za-zµ/]*)\s*(.*)$")


PER_DIRECTION = "per direction"  # the one qualifier a bandwidth may carry


class UnitError(AutoplanError):
    """A quantity that could not be read; the message shows the expected form."""


def _split(text: object, kind: str, example: str) -> tuple[float, str, str]:
    if isinstance(text, bool) or not isinstance(text, (str, int, float)):
        raise UnitError(f"expected {kind} like '{example}', got {shown(text)}")
    if isinstance(text, (int, float)):
        raise UnitError(f"expected {kind} like '{example}' (with a unit), got a bare number {shown(text)}")
    match = _QUANTITY.match(text)
    if not match:
        raise UnitError(f"expected {kind} like '{example}', got {shown(text)}")
    value = float(match.group(1))
    if not math.isfinite(value):
        raise UnitError(f"expected {kind} like '{example}' with a finite number, got {shown(text)}")
    return value, match.group(2), match.group(3).strip()


def _parse(text: object, table: dict[str, float], kind: str, example: str,
           qualifiers: tuple[str, ...] | None = ("",)) -> float:
    """``text`` in the unit of ``table``; the words after the unit must be one of ``qualifiers``
    (compared lower-case, '-' as a space; ``None``: any, the caller checks them)."""
    value, unit, rest = _split(text, kind, example)
    key = unit.lower()
    if key == "gb/s" and unit.startswith("Gb"):
        key = "gbit/s"
    if key == "tb/s" and unit.startswith("Tb"):
        key = "tbit/s"
    if key == "mb/s" and unit.startswith("Mb"):
        key = "mbit/s"
    if key not in table:
        units = ", ".join(sorted({u for u in table if u}))
        raise UnitError(f"expected {kind} like '{example}' (units: {units}), got {shown(text)}")
    if qualifiers is not None and normalise_qualifier(rest) not in qualifiers:
        allowed = " or ".join(repr(q) for q in qualifiers if q)
        raise UnitError(f"expected {kind} like '{example}', got trailing text {shown(rest)} in {shown(text)}"
                        + (f" (only {allowed} may follow the unit)" if allowed else ""))
    if value < 0:
        raise UnitError(f"{kind} must not be negative, got {shown(text)}")
    return value * table[key]


def parse_bytes(text: object) -> float:
    """'80 GiB' -> 85899345920.0 bytes; 'GB' is decimal, 'GiB' binary."""
    return _parse(text, _BYTES, "a size", "80 GiB")


def parse_bandwidth(text: object, qualifiers: tuple[str, ...] | None = ("", PER_DIRECTION)) -> float:
    """'450 GB/s' -> 4.5e11 bytes/s; '400 Gb/s' (bits) -> 5e10 bytes/s; '400 Gb/s per direction'
    too. Other words after the unit ('bidirectional', typos) are refused; ``qualifiers=None``
    leaves them to the caller (hardware files, which explain 'bidirectional')."""
    return _parse(text, _BANDWIDTH, "a bandwidth", "400 Gb/s", qualifiers)


def normalise_qualifier(text: str) -> str:
    """'Per-Direction ' -> 'per direction'."""
    return " ".join(text.lower().replace("-", " ").split())


def bandwidth_qualifier(text: str) -> str:
    """The words after a bandwidth's unit, e.g. 'per direction' in '450 GB/s per direction'."""
    return _split(text, "a bandwidth", "450 GB/s per direction")[2]


def parse_flops_rate(text: object) -> float:
    """'989 TFLOP/s' -> 9.89e14 FLOP/s."""
    return _parse(text, _FLOPS, "a compute rate", "989 TFLOP/s")


def parse_exp_rate(text: object) -> float:
    """'10.7 Texp/s' -> 1.07e13 exponentials per second."""
    return _parse(text, _EXP, "an exponential rate", "10.7 Texp/s")


def parse_time(text: object) -> float:
    """'3 us' -> 3e-6 seconds."""
    return _parse(text, _TIME, "a time", "5 us")


def parse_count(text: object, *, binary: bool = True, what: str = "a token count") -> float:
    """'4M' -> 4·2^20 (binary=True, batch sizes) or 4e6 (binary=False, run totals).

    Plain integers ('4096') and scientific notation ('4e6') are literal. Suffixes: K, M, G/B, T.
    """
    if isinstance(text, bool):
        raise UnitError(f"expected {what} like '4M' or '4194304', got {shown(text)}")
    if isinstance(text, (int, float)):
        value = float(text)
    else:
        match = re.match(r"^\s*(\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|\.\d+)\s*([A-Za-z]?)\s*$", str(text))
        if not match:
            raise UnitError(f"expected {what} like '4M' or '4194304', got {shown(text)}")
        table = _COUNT_BINARY if binary else _COUNT_DECIMAL
        suffix = match.group(2).lower()
        if suffix not in table:
            raise UnitError(f"expected {what} like '4M' (suffixes K, M, G, T), got {shown(text)}")
        value = float(match.group(1)) * table[suffix]
    if not math.isfinite(value) or value <= 0:
        raise UnitError(f"{what} must be a positive number, got {shown(text)}")
    return value


def format_bytes(num_bytes: float, *, binary: bool = True) -> str:
    """85899345920 -> '80.0 GiB' (binary) or '85.9 GB' (decimal)."""
    units = (("TiB", TiB), ("GiB", GiB), ("MiB", MiB), ("KiB", KiB)) if binary else (
        ("TB", TB), ("GB", GB), ("MB", MB), ("KB", KB))
    for name, size in units:
        if abs(num_bytes) >= size:
            return f"{num_bytes / size:.1f} {name}"
    return f"{num_bytes:.0f} B"


def format_count(count: float) -> str:
    """A count in decimal powers (never 1024s): 70553706496 -> '70.55B'."""
    for name, size in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(count) >= size:
            return f"{count / size:.2f}{name}"
    return f"{count:.0f}"


def format_time(seconds: float) -> str:
    """0.0123 -> '12.3 ms'."""
    if seconds >= 1:
        return f"{seconds:.2f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.1f} ms"
    return f"{seconds * 1e6:.1f} us"
