"""Search and export agree: every layout the search keeps for a trainer exports for it (hypothesis).

Random model presets (dense and MoE: Llama, Qwen3, Mixtral, DeepSeek-V3, GPT-3), random GPU
counts, random small spaces, each trainer with an exporter, with uneven stages (the default)
and under --even-stages-only. The property covers every *legal* layout the search evaluates (a superset of
the feasible ones: memory and batch do not enter the trainers' rules), so large models on few
GPUs still test something. A model whose architecture an exporter cannot write at all is
refused for every layout (an ``ExportError``, not a rule) and is left out for that trainer.
"""

from __future__ import annotations

import functools
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autoplan.api import build_context, build_training
from autoplan.export import TRAINERS, ExportError, plan_training, render
from autoplan.layout import PLACEMENTS, RECOMPUTE, resolve_layout
from autoplan.profiles import load_profile
from autoplan.search import SearchOptions, search
from autoplan.search.recipe import ILLEGAL
from autoplan.space import EmptySpaceError, SearchSpace
from autoplan.specs.models import load_model

MODELS = ("llama3-8b", "llama3.2-1b", "qwen3-8b", "qwen3-30b-a3b", "mixtral-8x7b", "deepseek-v3", "gpt3-175b")
GPU_COUNTS = (1, 2, 4, 6, 8, 16, 24, 32, 48, 64, 128)
MAX_RENDERS = 40  # legal layouts exported per example in the default run (all of them when slow)

FAST = settings(max_examples=int(os.environ.get("AUTOPLAN_PROPERTY_EXAMPLES", "25")), deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
SLOW = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@functools.cache
def exportable(trainer: str, model_name: str) -> bool:
    """Whether ``trainer``'s exporter can write this architecture at all (one GPU, plain DP)."""
    model = load_model(model_name)
    try:
        training = build_training(1, model.seq_len, 1)
        render(trainer, model, resolve_layout({"zero": 0}, training), training)
    except ExportError:
        return False
    return True


def subset(values):
    return st.lists(st.sampled_from(values), min_size=1, max_size=len(values), unique=True)


def degrees(values):
    """A random subset that keeps 1, so some layouts of the space stay legal."""
    return subset(values).map(lambda chosen: tuple({1, *chosen}))


@st.composite
def cases(draw):
    trainer = draw(st.sampled_from(TRAINERS))
    model = draw(st.sampled_from([m for m in MODELS if exportable(trainer, m)]))
    moe = load_model(model).moe is not None
    space = SearchSpace("random", {
        "tp": draw(degrees((2, 4, 8))), "pp": draw(degrees((2, 3, 4, 8))),
        "vpp": draw(degrees((2, 3, 4))), "cp": draw(degrees((2,))),
        "ep": draw(degrees((2, 4, 8))) if moe else (1,), "etp": draw(degrees((2,))) if moe else (1,),
        "zero": draw(st.one_of(subset((0, 1, 2, 3)), subset(load_profile(trainer).capabilities.zero_stages))),
        "mbs": draw(subset((1, 2))),
        "recompute": draw(subset(RECOMPUTE)), "precision": draw(subset(("bf16", "fp8"))),
        "placement": draw(subset(PLACEMENTS))})
    gpus = draw(st.sampled_from(GPU_COUNTS))
    gbs_seqs = gpus * draw(st.sampled_from((1, 2, 4, 8, 16)))
    seq_len = draw(st.sampled_from((2048, 4096)))
    return trainer, model, space, build_training(gpus, seq_len, gbs_seqs), draw(st.booleans())


def legal_layouts_export(trainer, model_name, space, training, allow_uneven, limit):
    ctx = build_context(model_name, training, trainer=trainer)
    try:
        result = search(ctx, space, SearchOptions(sampler="exhaustive", allow_uneven_pp=allow_uneven))
    except EmptySpaceError:  # no tp·pp·cp of the space divides the GPUs: nothing searched
        return 0
    rows = np.flatnonzero(result.table["stage"] < ILLEGAL)
    if limit is not None and len(rows) > limit:  # spread over the ranking, best first
        rows = rows[np.linspace(0, len(rows) - 1, limit).astype(int)]
    for row in rows:
        layout = result.table.batch.layout(int(row))
        render(trainer, ctx.model, layout, plan_training(layout, training),
               allow_uneven_pp=allow_uneven)  # raises if refused
    return len(rows)


@FAST
@given(cases())
def test_every_legal_searched_layout_exports(case):
    trainer, model, space, training, allow_uneven = case
    legal_layouts_export(trainer, model, space, training, allow_uneven, MAX_RENDERS)


@pytest.mark.slow
@SLOW
@given(cases())
def test_every_legal_searched_layout_exports_all_of_them(case):
    trainer, model, space, training, allow_uneven = case
    legal_layouts_export(trainer, model, space, training, allow_uneven, None)


@pytest.mark.parametrize("trainer", TRAINERS)
def test_uneven_layouts_that_search_allows_export(trainer):
    """32 layers on pp = 3: legal (by default) only where the trainer can run it."""
    space = SearchSpace("uneven", {"pp": (3,), "vpp": (1, 2), "zero": (0, 1, 3)})
    n = legal_layouts_export(trainer, "llama3-8b", space, build_training(24, 4096, 96), True, None)
    assert (n > 0) == (load_profile(trainer).capabilities.uneven_stages_max_vpp > 0)
