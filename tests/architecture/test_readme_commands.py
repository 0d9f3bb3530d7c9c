"""Every command the README shows runs (issue 47): the quick start's and the example's command
lines run and print what the README says they print (the recipe line and the first plans), and
every `autoplan ...` it names in the text is a real command whose options parse."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from autoplan.cli import main

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")
# `autoplan sub ...` in the text; a word in capitals, '...' or a path with '...' is a placeholder
INLINE = sorted(set(re.findall(r"`autoplan ([a-z]+)([^`]*)`", README)))
EXAMPLE = re.search(r"^    \$ autoplan (.+)$", README, re.M)


def _run(args: list[str], tmp_path: Path):
    return CliRunner().invoke(main, args, catch_exceptions=False)


def test_the_readme_names_only_real_commands():
    assert INLINE, "no `autoplan ...` in README.md"
    commands = set(main.list_commands(click.Context(main)))
    missing = sorted({sub for sub, _ in INLINE} - commands)
    assert not missing, f"README names commands autoplan lacks: {missing}"


@pytest.mark.parametrize("sub, rest", INLINE, ids=[f"{s}{r}" for s, r in INLINE])
def test_every_named_command_parses(sub, rest, tmp_path):
    """Complete commands run; those with placeholders (PLAN, '...', 'results/.../') show their help."""
    words = shlex.split(rest.replace("\\|", "|").split("|")[0]) if rest.strip() else []
    placeholder = any(re.search(r"[A-Z]{2,}", w) or "..." in w or "/" in w for w in words) or sub in ("validate", "probe")
    if placeholder or not words and sub not in ("models", "trainers"):
        result = _run([sub, "--help"], tmp_path)
    else:
        result = _run([sub, *words], tmp_path)
    assert result.exit_code == 0, (sub, rest, result.output)


def test_the_example_prints_what_the_readme_shows(tmp_path):
    assert EXAMPLE is not None
    args = shlex.split(EXAMPLE.group(1))
    result = CliRunner().invoke(main, [*args, "--out", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    shown = README[EXAMPLE.end():].splitlines()[1:]
    recipe = next(line.strip() for line in shown if line.strip().startswith("Recipe:"))
    printed = next(line for line in result.output.splitlines() if line.startswith("Recipe:"))
    # the same funnel; only the seconds differ
    assert re.sub(r"\(exhaustive, [0-9.]+ s\)", "", printed) == re.sub(r"\(exhaustive, [0-9.]+ s\)", "", recipe)
    for rank in ("1*", "2*"):
        row = next(line for line in shown if line.strip().startswith(f"│   {rank}"))
        layout, tokens = row.split("│")[2].strip(), row.split("│")[7].strip()
        out = next(line for line in result.output.splitlines() if line.strip().startswith(f"│   {rank}"))
        assert layout in out and tokens in out, (row, out)


def test_the_quick_start_commands_are_the_ones_ci_runs():
    """The two fresh-machine lines: install + the example, install + the tests (.ci/run runs the
    second's `pip install -e '.[test]' && pytest`)."""
    lines = [line.strip() for line in README.splitlines() if line.startswith("    python3 -m venv")]
    assert len(lines) == 2, lines
    assert lines[0].endswith("pip install . && autoplan search --model 70b --gpus 512 --gbs-tokens 4M")
    assert lines[1].endswith("pip install -e '.[test]' && pytest")
    assert "pip install -e '.[test]' && pytest" in (ROOT / ".ci" / "run").read_text()
