"""Why a knob is capped: the values no layout can use, and the reason, from every layout."""

from __future__ import annotations

import numpy as np
import pytest

from autoplan.api import build_context, build_training
from autoplan.layout import Layout
from autoplan.report import results
from autoplan.rules import REASON_CODES, REASON_MESSAGES
from autoplan.search import SearchOptions, search
from autoplan.search.caps import _with_value, cap_notes, probe_reason
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


def test_the_reason_is_the_rule_every_legal_layout_breaks_at_the_capped_value():
    """nanotron has no context parallelism, but most cp 2 layouts of its space break 'no virtual
    stages' first (vpp 2, 4), as cp 1 layouts do: the probe of legal layouts names cp's own rule."""
    ctx = build_context("70b", build_training(512, 8192, 512), trainer="nanotron")
    result = search(ctx, load_space("default"), SearchOptions(sampler="exhaustive"))
    notes = results.cap_notes(result)
    assert f"cp <= 1 on 512 GPUs: cp 2 is never legal ({REASON_MESSAGES['trainer_cp']})" in notes
    assert f"vpp <= 1 on 512 GPUs: vpp 2, 4 are never legal ({REASON_MESSAGES['trainer_vpp']})" in notes
    counts = result.counts.tallies["cp"][1]  # what the first-broken tallies alone would say
    assert REASON_CODES[int(np.argmax(counts[1:])) + 1] != "trainer_cp"


def test_a_probed_layout_keeps_the_gpus_and_the_batch():
    layout = Layout(dp=16, tp=4, pp=4, vpp=1, cp=1, ep=1, etp=1, zero=1, mbs=1, grad_acc=32, sp=True)
    cp2 = _with_value(layout, "cp", 2)
    assert (cp2.cp, cp2.dp, cp2.grad_acc) == (2, 8, 64)
    tp1 = _with_value(layout, "tp", 1)
    assert (tp1.tp, tp1.dp, tp1.grad_acc, tp1.sp) == (1, 64, 8, False)
    assert _with_value(layout, "tp", 3) is None  # 16·4 GPUs per pipeline have no third
    assert _with_value(layout, "mbs", 3) is None  # 32 micro-batches of 1 are no whole number of 3
    assert _with_value(layout, "mbs", 4).grad_acc == 8
    assert _with_value(layout, "vpp", 2).dp == 16


def test_no_layout_to_probe_falls_back_to_the_tallies():
    ctx = build_context("70b", build_training(512, 8192, 512))
    assert probe_reason(ctx, [], "cp", 2, 512) is None
