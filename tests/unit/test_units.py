"""Parsing and formatting of quantities with units (autoplan/units.py)."""

from __future__ import annotations

import pytest

from autoplan.errors import AutoplanError
from autoplan.units import (
    GB,
    TB,
    GiB,
    KiB,
    MiB,
    UnitError,
    bandwidth_qualifier,
    format_bytes,
    format_count,
    format_time,
    parse_bandwidth,
    parse_bytes,
    parse_count,
    parse_flops_rate,
    parse_time,
)


@pytest.mark.parametrize("text, expected", [
    ("80 GiB", 80 * 2**30),          # 85,899,345,920
    ("80GiB", 80 * 2**30),
    ("80 GB", 80e9),                 # decimal
    ("81559 MiB", 81559 * 2**20),    # H100 usable memory
    ("1.5 TiB", 1.5 * 2**40),
    ("2 TB", 2e12),
    ("512 KiB", 512 * 1024),
    ("4 kb", 4e3),                   # case-insensitive byte units
    ("100 B", 100.0),
    ("1e3 MB", 1e9),
    (".5 GiB", 2**29),
])
def test_parse_bytes(text, expected):
    assert parse_bytes(text) == expected


@pytest.mark.parametrize("text, expected", [
    ("400 Gb/s", 5e10),              # bits: 400e9 / 8
    ("400 Gbps", 5e10),
    ("400 Gbit/s", 5e10),
    ("450 GB/s", 4.5e11),            # bytes
    ("3.35 TB/s", 3.35e12),
    ("1.6 Tb/s", 2e11),
    ("450 GB/s per direction", 4.5e11),
    ("100 GiB/s", 100 * 2**30),
])
def test_parse_bandwidth(text, expected):
    assert parse_bandwidth(text) == pytest.approx(expected, rel=1e-15)


def test_megabits_per_second_are_bits():
    assert parse_bandwidth("100 Mb/s") == pytest.approx(1.25e7)


def test_bandwidth_qualifier():
    assert bandwidth_qualifier("450 GB/s per direction") == "per direction"
    assert bandwidth_qualifier("3.35 TB/s") == ""


@pytest.mark.parametrize("text, expected", [
    ("989 TFLOP/s", 9.89e14),
    ("1979 TFLOPS", 1.979e15),
    ("2.5 PFLOP/s", 2.5e15),
    ("100 GFLOP/s", 1e11),
])
def test_parse_flops_rate(text, expected):
    assert parse_flops_rate(text) == pytest.approx(expected, rel=1e-15)


@pytest.mark.parametrize("text, expected", [
    ("3 us", 3e-6), ("3 µs", 3e-6), ("10 ms", 1e-2), ("2 s", 2.0), ("5 ns", 5e-9),
    ("1.5 min", 90.0), ("2 h", 7200.0),
])
def test_parse_time(text, expected):
    assert parse_time(text) == pytest.approx(expected, rel=1e-15)


@pytest.mark.parametrize("parse, value", [
    (parse_bytes, 80), (parse_bytes, 80.0), (parse_bandwidth, 400), (parse_flops_rate, 989),
    (parse_time, 3),
])
def test_bare_numbers_are_refused_with_the_unit_named(parse, value):
    with pytest.raises(UnitError, match="bare number"):
        parse(value)


@pytest.mark.parametrize("parse, text", [
    (parse_bytes, "80"),             # no unit
    (parse_bytes, "80 GiBs"),
    (parse_bytes, "eighty GiB"),
    (parse_bytes, "80 GiB of HBM"),  # trailing text is only allowed after bandwidths
    (parse_bytes, "-80 GiB"),
    (parse_bytes, "1e400 GiB"),      # overflows to inf
    (parse_bytes, "nan GiB"),
    (parse_bytes, ""),
    (parse_bytes, None),
    (parse_bytes, True),
    (parse_bytes, ["80 GiB"]),
    (parse_bandwidth, "400 G/s"),
    (parse_bandwidth, "-400 Gb/s"),
    (parse_flops_rate, "989 TFLOP"),
    (parse_time, "3 weeks"),
])
def test_bad_quantities(parse, text):
    with pytest.raises(UnitError) as info:
        parse(text)
    assert isinstance(info.value, AutoplanError)  # a user error: one line, exit code 2
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("text, expected", [
    ("4M", 4194304),                 # binary for batch sizes: 4·2^20
    ("4m", 4194304),
    ("4 M", 4194304),
    ("1M", 2**20),
    ("1.5K", 1536),
    ("2G", 2 * 2**30),
    ("2B", 2 * 2**30),
    ("1T", 2**40),
    ("4194304", 4194304),            # plain integers are literal
    ("4e6", 4e6),                    # scientific notation is literal
    (4096, 4096),
    (2.5e6, 2.5e6),
])
def test_parse_count_binary(text, expected):
    assert parse_count(text) == expected


@pytest.mark.parametrize("text, expected", [("15T", 15e12), ("4M", 4e6), ("1.5K", 1500.0), ("7", 7.0)])
def test_parse_count_decimal(text, expected):
    assert parse_count(text, binary=False) == expected


@pytest.mark.parametrize("text", ["0", "-4M", "4X", "4MB", "M", "", "inf", "1e400", True, 0, -5, None,
                                  float("nan")])
def test_bad_counts(text):
    with pytest.raises(UnitError):
        parse_count(text)


def test_unit_constants():
    assert (GB, TB) == (1e9, 1e12)
    assert (KiB, MiB, GiB) == (1024.0, 2.0**20, 2.0**30)


@pytest.mark.parametrize("value, binary, text", [
    (80 * 2**30, True, "80.0 GiB"),
    (85899345920, False, "85.9 GB"),
    (1536, True, "1.5 KiB"),
    (512, True, "512 B"),
    (3 * 2**40, True, "3.0 TiB"),
    (2.5e6, False, "2.5 MB"),
])
def test_format_bytes(value, binary, text):
    assert format_bytes(value, binary=binary) == text


@pytest.mark.parametrize("value, text", [
    (70553706496, "70.55B"),          # decimal powers for counts, never 1024s
    (174.6e9, "174.60B"),             # llm-analysis printed this as '162.58 G'
    (8030261248, "8.03B"),
    (1.5e12, "1.50T"),
    (4194304, "4.19M"),
    (1234, "1.23K"),
    (999, "999"),
])
def test_format_count(value, text):
    assert format_count(value) == text


@pytest.mark.parametrize("seconds, text", [(2.5, "2.50 s"), (0.0123, "12.3 ms"), (4.5e-5, "45.0 us"),
                                           (1.0, "1.00 s"), (1e-3, "1.0 ms")])
def test_format_time(seconds, text):
    assert format_time(seconds) == text


def test_parse_and_format_round_trip():
    for num_bytes in (2**30, 80 * 2**30, 1.5 * 2**40):
        assert parse_bytes(format_bytes(num_bytes)) == num_bytes
