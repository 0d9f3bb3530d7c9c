"""The derivation page ``docs/cost-model.md``, generated from the term definitions.

Every cost term with its formula, unit, source and the parameters it uses; the parameters are
listed by introspecting the dataclasses of the cost context (their fields and the docs written
beside them), so the page follows the code when a parameter is added, renamed or moved.

    python -m autoplan.report.derivation            # rewrite docs/cost-model.md
    python -m autoplan.report.derivation --check    # exit 1 when the committed page is stale
"""

from __future__ import annotations

import fnmatch
import inspect
import re
import sys
import typing
from dataclasses import MISSING, fields, is_dataclass
from pathlib import Path

from autoplan.cost import terms as terms_module
from autoplan.cost.context import CostContext
from autoplan.cost.terms import CONSTANTS, TERMS, Term
from autoplan.profiles import TrainerProfile
from autoplan.profiles.profile import FLAT_NAMES, GROUPS
from autoplan.report.substituted import formula_of
from autoplan.specs.hardware import Cluster, GPUSpec
from autoplan.specs.model import ModelSpec
from autoplan.specs.training import TrainingSpec

PAGE = Path(__file__).resolve().parents[2] / "docs" / "cost-model.md"
COMMAND = "python -m autoplan.report.derivation"
SECTIONS = (("memory", "Memory per GPU (bytes)"), ("time", "Step time (seconds per step)"),
            ("rate", "Rates"), ("ratio", "Ratios"), ("count", "Counts"), ("flag", "Flags and codes"),
            ("code", None))


def field_docs(cls: type) -> dict[str, str]:
    """What each field of dataclass ``cls`` means: field metadata ('doc'), else its bullet in the
    class docstring (``name``: text, wildcards allowed), else the comment beside it."""
    names = [f.name for f in fields(cls)]
    docs: dict[str, str] = {}
    bullets = re.split(r"\n\s*\*\s+", "\n" + (inspect.getdoc(cls) or ""))
    for bullet in bullets:
        match = re.match(r"((?:``[\w*]+``[\s,/]*(?:and\s+)?)+):\s*(.*)", bullet, re.S)
        if match:
            for pattern in re.findall(r"``([\w*]+)``", match.group(1)):
                for name in fnmatch.filter(names, pattern):
                    docs.setdefault(name, " ".join(match.group(2).split()))
    for name in names:  # a field explained inside another field's bullet
        mentioned = [b for b in bullets[1:] if f"``{name}``" in b]
        if name not in docs and mentioned:
            docs[name] = " ".join(mentioned[0].split())
    try:
        source = inspect.getsource(cls)
    except (OSError, TypeError):  # pragma: no cover - classes built at run time
        source = ""
    for match in re.finditer(r"^\s+(\w+):[^\n#]*#\s*(.+)$", source, re.M):
        docs.setdefault(match.group(1), match.group(2).strip())
    for f in fields(cls):
        for key in ("doc", "help", "description"):
            if key in f.metadata:
                docs[f.name] = str(f.metadata[key])
    return docs


def _dataclass_fields(cls: type) -> list[tuple[type, str]]:
    """(owning class, field name) of every field of ``cls``, nested dataclasses expanded."""
    try:
        hints = typing.get_type_hints(cls)
    except Exception:  # noqa: BLE001 - unresolved annotations: take fields as they are
        hints = {}
    out: list[tuple[type, str]] = []
    for f in fields(cls):
        kind = hints.get(f.name)
        if isinstance(kind, type) and is_dataclass(kind):
            out += _dataclass_fields(kind)
        else:
            out.append((cls, f.name))
    return out


def efficiency_classes() -> list[type]:
    """The calibrated parameter classes of the cost context (every dataclass field of
    ``CostContext`` that is not the model, the cluster or the trainer profile).

    A container of such classes (a dataclass whose fields are dataclasses, e.g. the calibrated
    parameters holding the physical efficiencies and the corrections) is replaced by them."""
    hints = typing.get_type_hints(CostContext)
    known = (ModelSpec, Cluster, TrainingSpec, TrainerProfile)
    out: list[type] = []
    for kind in hints.values():
        if not (isinstance(kind, type) and is_dataclass(kind)) or kind in known:
            continue
        nested = [k for k in typing.get_type_hints(kind).values() if isinstance(k, type) and is_dataclass(k)]
        out += nested or [kind]
    return out


def _used_by() -> dict[str, list[str]]:
    used: dict[str, list[str]] = {}
    for t in TERMS:
        for name in t.parameters:
            label = _label(t)
            if label not in used.setdefault(name, []):
                used[name].append(label)
    return used


def _label(t: Term) -> str:
    return t.column.replace(f"mem_{t.stage}_", "mem_<stage>_") if t.stage else t.column


def _default(cls: type, name: str) -> str:
    f = next(f for f in fields(cls) if f.name == name)
    if f.default is not MISSING:
        return f"{f.default:.4g}" if isinstance(f.default, float) else repr(f.default)
    return "—"


def _term_section(t: Term) -> list[str]:
    adds = f" · adds to `{_label(terms_module.BY_COLUMN[t.adds_to])}`" if t.adds_to else ""
    lines = [f"### `{_label(t)}`", "", f"* meaning: {t.meaning}", f"* unit: {t.unit} · kind: {t.kind}{adds}",
             f"* formula: `{t.formula}`" if formula_of(t) else f"* formula: {t.formula}"]
    if (formula := formula_of(t)) is not None:
        lines += [f"  * `{q.name}` ({q.unit}): {q.meaning} (`{q.code}`)" for q in formula.quantities]
    lines.append(f"* source: {t.source}")
    if t.parameters:
        lines.append("* parameters: " + ", ".join(f"`{p}`" for p in t.parameters))
    return lines + [""]


def _parameter_tables() -> list[str]:
    used = _used_by()
    lines = ["## Parameters", "",
             "Calibrated parameters (per trainer and GPU in `autoplan/profiles/*.yaml`, fitted by "
             "`autoplan calibrate`), listed from their dataclasses:", ""]
    for cls in efficiency_classes():
        docs = field_docs(cls)
        lines += [f"### `{cls.__name__}`", "", "| parameter | default | meaning | used by |", "| --- | --- | --- | --- |"]
        for owner, name in _dataclass_fields(cls):
            owner_docs = docs if owner is cls else field_docs(owner)
            users = ", ".join(f"`{u}`" for u in used.get(name, [])) or "—"
            lines.append(f"| `{name}` | {_default(owner, name)} | {owner_docs.get(name, '')} | {users} |")
        lines.append("")
    lines += _profile_table(used)
    for cls, title in ((GPUSpec, "GPU fields"), (Cluster, "Cluster fields")):
        docs = field_docs(cls)
        rows = [f"| `{f.name}` | {docs.get(f.name, '—')} | {', '.join(f'`{u}`' for u in used[f.name])} |"
                for f in fields(cls) if f.name in used]
        lines += [f"### {title} (`{cls.__name__}`)", "", "| field | meaning | used by |", "| --- | --- | --- |", *rows, ""]
    lines += ["### Constants in the code", "", "| name | value | where | meaning | used by |", "| --- | --- | --- | --- | --- |"]
    for name, constant in CONSTANTS.items():
        users = ", ".join(f"`{u}`" for u in used.get(name, [])) or "—"
        lines.append(f"| `{name}` | {constant.value:.4g} | `autoplan.cost.{constant.module}.{name}` | "
                     f"{constant.meaning} | {users} |")
    return lines + [""]


def _profile_table(used: dict[str, list[str]]) -> list[str]:
    """The trainer profile fields the terms name (by their flat names, ``profile.FLAT_NAMES``)
    with the YAML key of each (``group.field``, the groups of ``profiles/groups.py``)."""
    rows = []
    for flat, (group, name) in FLAT_NAMES.items():
        if flat in used:
            meaning = field_docs(GROUPS[group]).get(name, "—")
            rows.append(f"| `{flat}` | `{group}.{name}` | {meaning} | {', '.join(f'`{u}`' for u in used[flat])} |")
    return ["### Trainer profile fields (`TrainerProfile`)", "", "| field | YAML key | meaning | used by |",
            "| --- | --- | --- | --- |", *rows, ""]


def render_page() -> str:
    """The text of ``docs/cost-model.md``."""
    notation = terms_module.__doc__.split("Notation", 1)[1].split(":", 1)[1]
    lines = ["# The cost model, term by term", "",
             f"<!-- Generated by `{COMMAND}` from autoplan/cost/terms.py; do not edit by hand. "
             "tests/unit/report/test_derivation.py fails when this page is stale. -->", "",
             "Every column that `autoplan estimate` and `autoplan search` report, with its unit, formula "
             "and source. A memory or time term's formula is an expression over named intermediates that "
             "the cost model computes (listed below it, with the code that computes each); `autoplan "
             "explain` prints the same expressions with one layout's values substituted. Memory terms of a "
             "stage add up to its total; time terms add up to `step_time_s`.", "",
             "Notation (per GPU, for one micro-batch unless said): " + " ".join(notation.split()), ""]
    seen: set[str] = set()
    for kind, title in SECTIONS:
        if title:
            lines += [f"## {title}", ""]
        for t in TERMS:
            if t.kind == kind and _label(t) not in seen:
                seen.add(_label(t))
                lines += _term_section(t)
    return "\n".join(lines + _parameter_tables()).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    text = render_page()
    if "--check" in args:
        if not PAGE.exists() or PAGE.read_text(encoding="utf-8") != text:
            print(f"{PAGE} is stale: run `{COMMAND}`", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(text, encoding="utf-8")
    print(f"wrote {PAGE}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
