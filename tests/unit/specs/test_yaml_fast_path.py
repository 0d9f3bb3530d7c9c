"""The libyaml-composed fast path of autoplan.specs.yaml_parse reads every text exactly as the strict
loader does: the same data, or the same error message."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from autoplan.errors import SpecError
from autoplan.specs import yaml_parse

ROOT = Path(yaml_parse.__file__).resolve().parents[2]
SHIPPED = sorted([*ROOT.glob("model_db/*.yaml"), *ROOT.glob("hardware_db/gpus/*.yaml"),
                  *ROOT.glob("autoplan/profiles/*.yaml"), *ROOT.glob("autoplan/calibration/*.yaml"),
                  *ROOT.glob("search_spaces/*.yaml")])

pytestmark = pytest.mark.skipif(yaml_parse._CComposedLoader is None, reason="PyYAML without libyaml")


def outcome(load, text):
    try:
        return "data", load(text)
    except Exception as exc:  # noqa: BLE001 - PyYAML also raises IndexError, TypeError ...
        return type(exc).__name__, str(exc)


def strict(text):
    return yaml.load(text, Loader=yaml_parse._StrictLoader)  # noqa: S506 - a SafeLoader subclass


def test_the_shipped_files_take_the_fast_path_and_read_the_same():
    assert len(SHIPPED) > 30
    for path in SHIPPED:
        text = path.read_text(encoding="utf-8")
        assert yaml_parse._c_composed(text) is not yaml_parse._NOT_COMPOSED, path
        assert outcome(yaml_parse._parsed, text) == outcome(strict, text), path


# YAML's indicators, anchors and aliases, a duplicate key, tags, nesting by indentation
_TOKENS = st.sampled_from(["a", "b", "1", "0x1", "yes", "~", ": ", ":", "- ", "\n", "\n  ", "[", "]",
                           "{", "}", ", ", "&x ", "*x", "&y ", "*y", "!!str ", "!!int ", "<<: ", "? ",
                           "'q'", '"d"', "#c", "---\n", "1e3", "-1", ".nan"])


@settings(max_examples=200, deadline=None)
@given(st.lists(_TOKENS, max_size=30).map("".join))
def test_any_text_reads_as_the_strict_loader_reads_it(text):
    assert outcome(yaml_parse._parsed, text) == outcome(strict, text)


def test_deep_nesting_skips_libyaml_s_composer():
    """libyaml composes recursively in C (a process crash ~30,000 levels deep): a text with
    that many indicators goes to the Python composer, which stops with RecursionError, unless
    libyaml's scanner refuses the depth first (PyYAML >= 6.0.4: a ScannerError at 1,000 levels);
    either way the process lives and the user reads one message."""
    text = "[" * 50_000 + "]" * 50_000
    with pytest.raises((RecursionError, yaml.YAMLError)):
        yaml_parse._parsed(text)
    with pytest.raises(SpecError, match="nesting too deep"):
        yaml_parse.parse_yaml(text, "deep.yaml")
