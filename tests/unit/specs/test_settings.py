"""The setup settings (autoplan.specs.training.SETTINGS) are declared once: the TrainingSpec
fields, the options of every command that takes them, the capability lists."""

from __future__ import annotations

import dataclasses

import pytest
from click.testing import CliRunner

from autoplan.cli import main
from autoplan.profiles import list_trainers, load_profile
from autoplan.specs.training import SETTINGS, TRAINER_SETTINGS, TrainingSpec

SETUP = {"cluster", "seq_len", "gbs_seqs", "gbs_tolerance", "flops_convention"}


def test_every_setting_is_a_training_spec_field_with_its_default():
    fields = {f.name: f.default for f in dataclasses.fields(TrainingSpec) if f.name not in SETUP}
    assert fields == {s.name: s.default for s in SETTINGS}


@pytest.mark.parametrize("command", ["search", "estimate", "explain", "compare", "export", "capacity"])
def test_every_command_with_a_setup_takes_every_setting(command):
    text = CliRunner().invoke(main, [command, "--help"], terminal_width=400).output
    for setting in SETTINGS:
        assert setting.flag in text, (command, setting.name)


def test_a_capability_may_only_list_a_trainer_setting():
    for trainer in list_trainers():
        assert set(load_profile(trainer).capabilities.settings) <= set(TRAINER_SETTINGS), trainer
