"""The knob registry (autoplan.knobs) is the one declaration of the layout knobs: the Layout, the
search space, every command's options and the column dictionary agree with it."""

from __future__ import annotations

import dataclasses

import pytest
from click.testing import CliRunner

from autoplan.cli import main
from autoplan.knobs import BY_NAME, KNOBS, SEARCHED
from autoplan.layout import CODE_FIELDS, RECORD_FIELDS, Layout, resolve_layout
from autoplan.layout_records import COLUMN_ALIASES
from autoplan.report.columns import describe_column
from autoplan.space import KNOB_DEFAULTS, KNOBS as SPACE_KNOBS, load_space


def test_every_layout_field_is_one_knob():
    assert [f.name for f in dataclasses.fields(Layout)] and {f.name for f in dataclasses.fields(Layout)} == set(BY_NAME)
    assert len(BY_NAME) == len(KNOBS)


def test_a_resolved_layout_takes_each_knobs_default():
    from autoplan.api import build_training

    layout = resolve_layout({}, build_training(8, 4096, 64))
    for knob in KNOBS:
        if knob.default is not None:  # (dp, grad_acc and sp are derived)
            assert getattr(layout, knob.name) == knob.default, knob.name


def test_the_space_and_the_codes_come_from_the_registry():
    assert SPACE_KNOBS == tuple(k.name for k in SEARCHED)
    assert KNOB_DEFAULTS == {k.name: (k.default,) for k in SEARCHED}
    assert CODE_FIELDS == {k.name: k.choices for k in KNOBS if k.kind == "choice"}
    assert set(load_space("default").values) == set(SPACE_KNOBS)


@pytest.mark.parametrize("command, knobs", [("estimate", KNOBS), ("export", KNOBS), ("explain", KNOBS),
                                            ("search", SEARCHED)])
def test_every_command_has_an_option_per_knob_with_its_help(command, knobs):
    text = " ".join(CliRunner().invoke(main, [command, "--help"], terminal_width=400).output.split())
    for knob in knobs:
        assert knob.flag in text, (command, knob.name)
        help_text = knob.list_help if command == "search" else knob.help
        assert " ".join(help_text.split())[:40] in text, (command, knob.name)


def test_every_knob_column_is_described_and_its_aliases_point_at_it():
    for knob in KNOBS:
        assert describe_column(knob.name)["meaning"] == knob.meaning
        for alias in knob.aliases:
            assert COLUMN_ALIASES[alias] == knob.name and alias not in RECORD_FIELDS
