"""Pruning before costing is exact: the model-state bound never exceeds the peak, and a pruned
search ranks exactly the rows an unpruned one does (autoplan.search.prune)."""

from __future__ import annotations

import numpy as np
import pytest

from autoplan.api import build_context, build_training
from autoplan.cost.evaluate import evaluate
from autoplan.search import recipe
from autoplan.search.exhaustive import assess_chunks, finish
from autoplan.search.prune import model_states_exceed_memory
from autoplan.space import enumerate_space, load_space

CASES = {  # name: (model, gpus, gbs_seqs, space, trainer)
    "70b-64-megatron": ("70b", 64, 512, "default", "megatron"),
    "8b-16-torchtitan": ("8b", 16, 256, "default", "torchtitan"),
    "mixtral-32-moe": ("mixtral-8x7b", 32, 256, "moe", "megatron"),
    # Offload moves model states to the host: the bound counts only what stays on the GPU (the
    # states before offload put 86 layouts that fit out of memory here).
    "70b-8-deepspeed-offload": ("70b", 8, 256, "production", "deepspeed"),
}


def case(name):
    model, gpus, gbs, space_name, trainer = CASES[name]
    ctx = build_context(model, build_training(gpus, 4096, gbs), trainer=trainer)
    space = load_space(space_name).with_overrides(zero=(0, 1, 3), precision=("bf16", "fp8"))
    if space_name == "moe":  # about 7,000 layouts, as the dense cases
        space = space.with_overrides(ep=(1, 8), mbs=(1, 2))
    if space_name == "production":
        space = space.with_overrides(offload=("none", "optimizer", "params"), mbs=(1, 2), recompute_layers=(0,),
                                     offload_layers=(0,), recompute_modules=("",))
    return ctx, space


@pytest.mark.parametrize("name", sorted(CASES))
def test_layouts_pruned_for_their_model_states_are_out_of_memory(name):
    ctx, space = case(name)
    batch, _ = enumerate_space(space, ctx.training)
    rows = np.random.default_rng(0).choice(len(batch), size=min(len(batch), 20_000), replace=False)
    batch = batch.take(rows)
    over = model_states_exceed_memory(ctx, batch)
    peak = evaluate(ctx, batch)["peak_memory_bytes"]
    assert 0 < over.sum() < len(batch)  # the bound prunes some layouts, not all
    assert np.all(peak[over] > ctx.cluster.gpu.usable_memory_bytes)


def ranked(ctx, space, keep: int, prune: bool, chunk_size: int = 997):
    top, counts = assess_chunks(ctx, space, range(-(-space.size // chunk_size)), chunk_size=chunk_size,
                                keep=keep, prune=prune)
    best, misses, counts = finish(ctx, space, [(top, counts)])
    return best, misses, counts


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("keep", [20, 300, 5_000])
def test_pruned_and_unpruned_searches_rank_the_same_plans(name, keep, monkeypatch):
    """keep=20 and 300: the best rows fill with fitting layouts, so layouts out of memory by their
    model states go uncosted; keep=5,000 exceeds the legal layouts of the space, so the illegal
    ones are costed in the second walk."""
    ctx, space = case(name)
    want, want_misses, want_counts = ranked(ctx, space, keep, prune=False)
    costed = []
    real_assess = recipe.assess
    monkeypatch.setattr(recipe, "assess", lambda *a, **k: costed.append(len(a[1])) or real_assess(*a, **k))
    got, got_misses, got_counts = ranked(ctx, space, keep, prune=True)
    assert len(got) == len(want)
    for name_ in want.columns:
        np.testing.assert_array_equal(got[name_], want[name_], err_msg=name_)
    for knob in ("tp", "pp", "vpp", "cp", "dp", "mbs", "zero", "recompute", "precision", "placement"):
        np.testing.assert_array_equal(getattr(got.batch, knob), getattr(want.batch, knob), err_msg=knob)
    assert got_counts.to_dict() == want_counts.to_dict()
    for knob, tally in want_counts.tallies.items():
        np.testing.assert_array_equal(got_counts.tallies[knob], tally)
    if keep < want_counts.legal:  # pruning skipped costing some layouts
        assert sum(costed) < want_counts.assessed
    if not want["feasible"].any():
        assert recipe.infeasible_message(ctx, got_misses, got_counts, space.values) == \
            recipe.infeasible_message(ctx, want_misses, want_counts, space.values)


def test_the_streamed_path_predicts_what_plain_evaluation_does():
    """Every column the pruned, chunked search keeps equals a plain ``evaluate`` of the same
    layouts, to the bit (the search passes its legality codes on and costs sub-batches)."""
    ctx, space = case("mixtral-32-moe")
    best, _, _ = ranked(ctx, space, keep=300, prune=True)
    rows = np.random.default_rng(1).choice(len(best), size=100, replace=False)
    plain = evaluate(ctx, best.batch.take(rows))
    for name, values in plain.columns.items():
        if name in best.columns:
            np.testing.assert_array_equal(best[name][rows], values, err_msg=name)
