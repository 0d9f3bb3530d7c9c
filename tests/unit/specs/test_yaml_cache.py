"""The parsed-YAML cache: a hit gives the parsed value, a changed text is parsed again, odd
values and damaged entries never come back wrong."""

from __future__ import annotations

import pytest

from autoplan.specs import yaml_cache, yaml_io


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("AUTOPLAN_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("AUTOPLAN_YAML_CACHE", raising=False)
    return tmp_path


def _entries(tmp_path):
    return sorted(p.name for p in (tmp_path / "yaml").glob("*"))


def test_second_read_comes_from_the_cache(tmp_path, monkeypatch):
    text = "a: 1\nb: [2.5, -0.0, .inf, null, true]\nc: {d: x}\n"
    first = yaml_io.parse_mapping(text, "t.yaml")
    assert len(_entries(tmp_path)) == 1

    def no_parse(_text, _where):
        raise AssertionError("parsed again although cached")

    monkeypatch.setattr(yaml_io, "_parse_uncached", no_parse)
    second = yaml_io.parse_mapping(text, "t.yaml")
    assert second == first and repr(second) == repr(first)  # -0.0 and inf kept
    assert second is not first and second["c"] is not first["c"]  # a fresh copy each time


def test_a_changed_text_is_parsed_again(tmp_path):
    assert yaml_io.parse_mapping("a: 1\n", "t.yaml") == {"a": 1}
    assert yaml_io.parse_mapping("a: 2\n", "t.yaml") == {"a": 2}
    assert len(_entries(tmp_path)) == 2


def test_values_marshal_cannot_hold_exactly_are_not_stored(tmp_path):
    assert yaml_io.parse_mapping("when: 2024-01-02\n", "t.yaml")["when"].year == 2024  # a date
    one = [1]
    yaml_cache.store("a: &x [1]\nb: *x\n", {"a": one, "b": one})  # one list reached twice
    assert _entries(tmp_path) == []


def test_a_damaged_entry_is_parsed_again(tmp_path):
    yaml_io.parse_mapping("a: 1\n", "t.yaml")
    (entry,) = (tmp_path / "yaml").glob("*")
    entry.write_bytes(b"\x00garbage")
    assert yaml_io.parse_mapping("a: 1\n", "t.yaml") == {"a": 1}


def test_errors_are_never_cached(tmp_path):
    for _ in range(2):
        with pytest.raises(ValueError, match="twice"):
            yaml_io.parse_mapping("a: 1\na: 2\n", "t.yaml")
    assert _entries(tmp_path) == []


def test_switched_off(tmp_path, monkeypatch):
    monkeypatch.setenv("AUTOPLAN_YAML_CACHE", "0")
    assert yaml_io.parse_mapping("a: 1\n", "t.yaml") == {"a": 1}
    assert yaml_cache.cache_dir() is None and not (tmp_path / "yaml").exists()


def test_a_hit_does_not_import_pyyaml(tmp_path):
    """The point of the cache on a rerun: PyYAML's import (~20 ms) is left out."""
    import os
    import subprocess
    import sys

    code = ("import sys; from autoplan.specs import yaml_io; "
            "d = yaml_io.parse_mapping('a: [1, 2]\\n', 't.yaml'); "
            "print(d == {'a': [1, 2]}, 'yaml' in sys.modules)")
    env = {**os.environ, "AUTOPLAN_CACHE_DIR": str(tmp_path)}
    env.pop("AUTOPLAN_YAML_CACHE", None)
    runs = [subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
            .stdout.split() for _ in range(2)]
    assert runs == [["True", "True"], ["True", "False"]]  # parsed (PyYAML imported), then from the cache
