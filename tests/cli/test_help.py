"""Meta-tests of the command line: every command has help, --version works, --help is light."""

from __future__ import annotations

import subprocess
import sys

import click
import pytest
from click.testing import CliRunner

import autoplan
from autoplan.cli import main

REQUIRED_COMMANDS = {"models", "hardware", "trainers", "estimate", "explain", "compare", "search", "export",
                     "calibrate", "validate"}


def _commands() -> dict[str, click.Command]:
    ctx = click.Context(main)
    return {name: main.get_command(ctx, name) for name in main.list_commands(ctx)}


COMMANDS = sorted(_commands())


def test_the_required_commands_exist():
    assert REQUIRED_COMMANDS <= set(COMMANDS)


def test_version():
    result = CliRunner().invoke(main, ["--version"])
    assert result.exit_code == 0
    assert result.output.strip() == f"autoplan, version {autoplan.__version__}"


@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_top_level_help_lists_every_command(flag):
    result = CliRunner().invoke(main, [flag])
    assert result.exit_code == 0
    assert result.output.startswith("Usage: ")
    for name in COMMANDS:
        assert f"  {name} " in result.output, name
    assert "4M = 4·2^20" in result.output  # the token-count convention is stated


@pytest.mark.parametrize("name", COMMANDS)
def test_every_command_has_help(name):
    command = _commands()[name]
    assert command.help and command.help.strip(), f"'{name}' has no docstring/help"
    for flag in ("--help", "-h"):
        result = CliRunner().invoke(main, [name, flag])
        assert result.exit_code == 0, result.output + result.stderr
        assert result.output.startswith(f"Usage: main {name}") or result.output.startswith(
            f"Usage: autoplan {name}")
        assert command.help.strip().splitlines()[0][:40] in " ".join(result.output.split())
        assert result.stderr == ""


def test_every_option_has_help():
    undocumented = [f"{name} --{param.name}" for name, command in _commands().items()
                    for param in command.params
                    if isinstance(param, click.Option) and not param.hidden and not (param.help or "").strip()]
    assert undocumented == []


def test_unknown_command_is_one_usage_error():
    result = CliRunner().invoke(main, ["estimat"])
    assert result.exit_code == 2
    assert "Traceback" not in result.output + result.stderr


def test_help_does_not_import_heavy_modules():
    """STYLE.md §5: pandas, optuna and matplotlib are imported inside commands only."""
    code = ("import sys\nfrom autoplan.cli import main\n"
            "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in ('pandas', 'optuna', 'matplotlib') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         timeout=60).stdout
    assert out.strip().splitlines()[-1] == "[]"


def test_console_script_runs():
    """The installed entry point (pyproject [project.scripts]) prints the version."""
    out = subprocess.run([sys.executable, "-c", "from autoplan.cli import main; main(['--version'])"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and autoplan.__version__ in out.stdout


def test_hardware_listing_shows_the_power_limited_clock():
    import json

    result = CliRunner().invoke(main, ["hardware", "--format", "json"])
    assert result.exit_code == 0, result.output
    rows = {r["name"]: r for r in json.loads(result.output)}
    assert rows["h100-96gb-500w"]["power_limited_clock_fraction"] == pytest.approx(0.849)
    assert rows["h100-sxm"]["power_limited_clock_fraction"] == 1.0
