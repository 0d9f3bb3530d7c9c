"""Why a knob is capped: the values no layout can use, and the reason, from every layout."""

from __future__ import annotations

import numpy as np
import pytest

from autoplan.api import build_context, build_training
from autoplan.search.caps import cap_notes
from autoplan.search.exhaustive import run_exhaustive
from autoplan.space import load_space

SPACE = load_space("moe").with_overrides(pp=(1, 2, 4, 8, 16), recompute=("selective",), zero=(1,))


@pytest.fixture(scope="module")
def rack():
    """Mixtral 8x7B (8 experts) on one 72-GPU GB200 NVL72 rack."""
    ctx = build_context("mixtral-8x7b", build_training(72, 4096, 1024, hardware="gb200-nvl72"))
    return ctx, run_exhaustive(ctx, SPACE)[2]


def test_every_layout_is_tallied(rack):
    _, counts = rack
    for knob, tally in counts.tallies.items():
        assert tally.sum() == counts.candidates, knob
        assert tally[:, 0].sum() == counts.legal, knob


def test_caps_on_a_rack_of_72(rack):
    _, counts = rack
    notes = cap_notes(SPACE, counts.tallies, 72)
    # 72 = 2^3·3^2: pp 16 and ep 16 and beyond divide no dp·cp·tp of 72 GPUs
    assert "pp <= 8 on 72 GPUs: pp 16 is never legal (72 has no factor 16)" in notes
    assert "ep <= 8 on 72 GPUs: ep 16, 32, 64, 128 are never legal (72 has no factor 16)" in notes


def test_a_cap_from_the_model_names_its_rule():
    """On 64 GPUs ep 16 divides the GPUs, but 8 experts do not split 16 ways."""
    ctx = build_context("mixtral-8x7b", build_training(64, 4096, 1024))
    counts = run_exhaustive(ctx, SPACE)[2]
    notes = cap_notes(SPACE, counts.tallies, 64)
    ep = next(n for n in notes if n.startswith("ep <= 8"))
    assert ep.endswith("(routed experts must be divisible by ep)")


def test_pruning_keeps_the_tallies_exact(rack):
    ctx, counts = rack
    pruned = run_exhaustive(ctx, SPACE, keep=3, chunk_size=500)[2]
    assert pruned.tallies.keys() == counts.tallies.keys()
    for knob in counts.tallies:
        np.testing.assert_array_equal(pruned.tallies[knob], counts.tallies[knob])
