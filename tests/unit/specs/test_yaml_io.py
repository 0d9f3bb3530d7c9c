"""Strict YAML/JSON reading (issue 18, items 4, 8 and 9): no aliases, no duplicate keys, values
in messages cut short, sane numbers and names."""

from __future__ import annotations

import json

import pytest

from autoplan.errors import SpecError, shown
from autoplan.specs.yaml_io import check_keys, check_name, get_int, parse_json, parse_mapping, read_mapping


def test_yaml_aliases_are_refused_before_they_expand():
    # 9 levels of 10 aliases each expand to 10^9 items: a "one-line" config that fills memory
    levels = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    levels += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 10)]
    with pytest.raises(SpecError, match=r"bomb.yaml: invalid YAML at line 2 column \d+: aliases \(\*a0\) "
                                        "are not allowed in autoplan files"):
        parse_mapping("\n".join(levels), "bomb.yaml")
    with pytest.raises(SpecError, match="aliases"):
        parse_mapping("base: &b {hidden_size: 8}\nmodel:\n  <<: *b\n", "merge.yaml")


def test_an_anchor_without_an_alias_is_harmless():
    assert parse_mapping("a: &x 1\nb: 2\n", "ok.yaml") == {"a": 1, "b": 2}


@pytest.mark.parametrize("text, is_json, message", [
    ("hidden_size: 8\nhidden_size: 16\n", False, "invalid YAML at line 2 column 1: key 'hidden_size' appears twice"),
    ("a:\n  b: 1\n  b: 2\n", False, "invalid YAML at line 3 column 3: key 'b' appears twice"),
    ('{"hidden_size": 8, "hidden_size": 16}', True, "invalid JSON: key 'hidden_size' appears twice"),
    ('{"a": {"b": 1, "b": 2}}', True, "invalid JSON: key 'b' appears twice"),
])
def test_duplicate_keys_are_refused_naming_the_key(text, is_json, message):
    with pytest.raises(SpecError, match=message):
        parse_mapping(text, "f", is_json=is_json)


@pytest.mark.parametrize("is_json", [False, True])
def test_an_integer_of_5000_digits_is_refused_in_one_line(is_json):
    text = json.dumps({"hidden_size": 0}).replace("0", "9" * 5000)
    with pytest.raises(SpecError, match="an integer too long to be a number") as info:
        parse_mapping(text, "big", is_json=is_json)
    assert len(str(info.value)) < 200


def test_integers_past_the_bound_show_a_short_value():
    with pytest.raises(SpecError, match="hidden_size: must be <= 2147483648, got an integer of about 4000 digits"):
        get_int({"hidden_size": 10**4000}, "hidden_size", "m.yaml")
    with pytest.raises(SpecError, match="must be >= 1, got an integer of about 4000 digits"):
        get_int({"hidden_size": -10**4000}, "hidden_size", "m.yaml")


def test_deep_json_nesting_is_refused():
    with pytest.raises(SpecError, match="plans.json: invalid JSON: nesting too deep"):
        parse_json("[" * 5000 + "]" * 5000, "plans.json")


def test_nan_is_not_json():
    with pytest.raises(SpecError, match="NaN is not a number JSON allows"):
        parse_json('{"a": NaN}', "x.json")


def test_values_in_messages_are_cut_and_escaped():
    huge = "x" * 10**6
    with pytest.raises(SpecError) as info:
        check_keys({huge: 1}, "f.yaml", required=[])
    assert len(str(info.value)) < 120 and str(info.value).endswith("…")
    assert shown("a\x1b[2Jb") == "'a\\x1b[2Jb'"
    assert shown("\ud800") == "'\\ud800'"


@pytest.mark.parametrize("name, message", [
    ("n" * 256, "name: at most 255 characters, got 256"),
    ("llama\ud800", "name: control or invalid character '\\\\ud800'"),
    ("llama\n rm -rf", "name: control or invalid character '\\\\n'"),
    ("x\x1b[31m", "name: control or invalid character '\\\\x1b'"),
    ("  ", "name: expected a non-empty string"),
    (7, "name: expected a non-empty string, got 7"),
])
def test_names_are_short_printable_text(name, message):
    with pytest.raises(SpecError, match=message):
        check_name(name, "name", "m.yaml")
    assert check_name(" " + "n" * 255 + " ", "name", "m.yaml") == "n" * 255


def test_read_mapping_reads_json_with_a_byte_order_mark(tmp_path):
    path = tmp_path / "config.json"
    path.write_text('{"a": 1}', encoding="utf-8-sig")
    assert read_mapping(path) == {"a": 1}
