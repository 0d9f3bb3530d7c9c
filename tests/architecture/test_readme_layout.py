"""The README's "Layout of the repository" block matches the tree: every package and module it
names exists, and every module of every package is named (``__init__`` may be left out)."""

from __future__ import annotations

import re
from pathlib import Path

import autoplan

ROOT = Path(autoplan.__file__).resolve().parent.parent
PACKAGE = ROOT / "autoplan"


def _layout_block() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## Layout of the repository", 1)[1]
    return section.split("```", 2)[1].strip("\n").splitlines()


def listed_modules() -> dict[Path, set[str]]:
    """Package folder -> module names on its line ('autoplan/' and its indented subpackages)."""
    out: dict[Path, set[str]] = {}
    for line in _layout_block():
        match = re.match(r"^(\s*)(\w+)/\s+(\S.*)$", line)
        if not match or "·" not in match.group(3):
            continue
        indent, name, rest = match.groups()
        folder = PACKAGE if (not indent and name == "autoplan") else PACKAGE / name
        names = rest.split("(")[0].split("·")
        out[folder] = {n.strip() for n in names if n.strip()}
    return out


def test_every_named_module_exists_and_every_module_is_named():
    listed = listed_modules()
    packages = {PACKAGE} | {p.parent for p in PACKAGE.glob("*/__init__.py")}
    assert set(listed) == packages, f"README packages {sorted(map(str, listed))} != tree {sorted(map(str, packages))}"
    for folder, names in listed.items():
        actual = {p.stem for p in folder.glob("*.py")} - {"__init__"}  # a package's own file
        names = names - {"__init__"}
        assert names == actual, f"{folder.relative_to(ROOT)}: README names {sorted(names - actual)} missing " \
                                f"from the tree, tree has {sorted(actual - names)} not in the README"


def test_every_folder_named_exists():
    """Top-level lines name root folders; later folders on a line are beside or inside the first."""
    for line in _layout_block():
        if line.startswith(" "):
            continue
        folders = re.findall(r"(?:^|\s)([a-z_]+)/(?=\s|$)", line)
        for folder in folders:
            assert (ROOT / folder).is_dir() or (ROOT / folders[0] / folder).is_dir(), (folder, line)
