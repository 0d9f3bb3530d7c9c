"""docs/cost-model.md is generated from the term definitions and must not go stale."""

from __future__ import annotations

from dataclasses import dataclass, field, fields

from autoplan.api import build_context, build_training
from autoplan.cost.terms import CONSTANTS
from autoplan.report.explain import _field
from autoplan.cost.terms import TERMS
from autoplan.profiles.profile import FLAT_NAMES
from autoplan.report.derivation import COMMAND, PAGE, efficiency_classes, field_docs, render_page


def test_committed_page_is_current():
    assert PAGE.read_text(encoding="utf-8") == render_page(), f"docs/cost-model.md is stale: run `{COMMAND}`"


def test_page_shows_every_term_and_every_calibrated_parameter():
    page = render_page()
    for t in TERMS:
        assert t.column.replace(f"mem_{t.stage}_", "mem_<stage>_") in page, t.column
    for cls in efficiency_classes():
        for f in fields(cls):
            assert f"| `{f.name}` |" in page, f.name


def test_every_numeric_efficiency_parameter_is_used_by_a_term():
    """A calibrated parameter that no formula names is either dead or missing from terms.py."""
    named = {p for t in TERMS for p in t.parameters}
    ctx = build_context("llama3-8b", build_training(8, 8192, 64))
    for cls in efficiency_classes():
        for f in fields(cls):
            found, value = _field(ctx, f.name)
            if found and isinstance(value, float):
                assert f.name in named, f"{cls.__name__}.{f.name} is used by no term in cost/terms.py"


def test_code_constants_do_not_shadow_context_fields():
    """Once a constant becomes a profile parameter, its CONSTANTS entry must go."""
    ctx = build_context("llama3-8b", build_training(8, 8192, 64))
    for name in CONSTANTS:
        assert not _field(ctx, name)[0], f"{name} is now a field of the cost context: drop it from CONSTANTS"
        assert name not in FLAT_NAMES, f"{name} is now a trainer profile field ({FLAT_NAMES.get(name)}): drop it from CONSTANTS"


def test_field_docs_reads_metadata_docstring_bullets_and_comments():
    @dataclass
    class Example:
        """Parameters.

        * ``alpha``: first one.
        * ``*_overlap``: fraction hidden.
        * ``gamma``: scaled by ``delta`` when it rains.
        """

        alpha: float = 1.0
        tp_overlap: float = 0.0
        gamma: float = 0.0
        delta: float = 0.0
        epsilon: float = 0.0  # the comment
        zeta: float = field(default=0.0, metadata={"doc": "from metadata"})

    docs = field_docs(Example)
    assert docs["alpha"] == "first one." and docs["tp_overlap"] == "fraction hidden."
    assert "``delta``" in docs["delta"] and docs["epsilon"] == "the comment"
    assert docs["zeta"] == "from metadata"
