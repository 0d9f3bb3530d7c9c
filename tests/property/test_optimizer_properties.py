"""Invariants of the optimizer and offload knobs over whole search spaces of preset models
(dense GQA, GPT-style, MoE, MLA + MoE) and every trainer profile: offloading never raises GPU
memory, every optimizer's state is >= 0 and shrinks as ZeRO shards it over more ranks, and a
batch mixing optimizers and offloads equals its layouts evaluated one by one."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from autoplan.api import build_context, build_training
from autoplan.cost.evaluate import evaluate
from autoplan.layout import OFFLOADS, OPTIMIZERS, LayoutBatch
from autoplan.space import enumerate_space, load_space

MODELS = ("llama3-8b", "gpt3-175b", "mixtral-8x7b", "deepseek-v3")
TRAINERS = ("megatron", "deepspeed", "torchtitan")
STAGES = ("first", "last")


def space_batch(model: str, trainer: str, gpus: int, **knobs):
    """The default (or moe) space's layouts for ``gpus`` with some knobs fixed, and its context."""
    training = build_training(gpus, 4096, 8 * gpus)
    ctx = build_context(model, training, trainer=trainer)
    space = load_space("moe" if ctx.model.moe is not None else "default")
    space = space.with_overrides(**{"pp": (1, 2, 4), "vpp": (1,), **{k: (v,) for k, v in knobs.items()}})
    batch, _ = enumerate_space(space, training)
    return ctx, batch


def with_codes(batch: LayoutBatch, **codes: float) -> LayoutBatch:
    arrays = batch.arrays()
    arrays.update({k: np.full(len(batch), v) for k, v in codes.items()})
    return LayoutBatch(arrays)


@pytest.mark.parametrize("trainer", TRAINERS)
@pytest.mark.parametrize("model", MODELS)
def test_offloading_never_raises_gpu_memory(model, trainer):
    ctx, batch = space_batch(model, trainer, 64)
    plain = evaluate(ctx, batch)
    for code in range(1, len(OFFLOADS)):
        off = evaluate(ctx, with_codes(batch, offload=float(code)))
        for stage in STAGES:
            column = f"mem_{stage}_total_bytes"
            assert np.all(off[column] <= plain[column] * (1 + 1e-12)), (OFFLOADS[code], stage)
        assert np.all(off["host_memory_bytes"] > 0) and np.all(plain["host_memory_bytes"] == 0)


@pytest.mark.parametrize("model", MODELS)
def test_every_optimizer_state_is_non_negative_and_shrinks_with_dp(model):
    """zero = 1 at tp = pp = 1: dp = gpus; more ranks never hold more optimizer state."""
    for code, name in enumerate(OPTIMIZERS):
        states = []
        for gpus in (8, 16, 32, 64):
            ctx, batch = space_batch(model, "deepspeed", gpus, tp=1, pp=1, cp=1, zero=1, mbs=1,
                                     recompute="full", ep=1)
            table = evaluate(ctx, with_codes(batch, optimizer=float(code)))
            first = table["mem_first_optimizer_states_bytes"]
            assert np.all(first >= 0), name
            states.append(float(first[0]))
        assert all(a >= b for a, b in zip(states, states[1:])), (name, states)
        assert states[-1] < states[0], (name, states)


@pytest.mark.parametrize("model", ("llama3-8b", "mixtral-8x7b"))
def test_a_mixed_batch_equals_its_layouts_one_by_one(model):
    """Batches take shortcuts when no layout uses a knob (``.any()``); a batch mixing every
    optimizer and offload must agree with each layout evaluated alone."""
    ctx, batch = space_batch(model, "deepspeed", 16, tp=1, pp=1, cp=1, zero=3, mbs=1, recompute="full")
    one = batch.take(np.zeros(len(OPTIMIZERS) * len(OFFLOADS), dtype=int))
    grid = np.array([(o, f) for o in range(len(OPTIMIZERS)) for f in range(len(OFFLOADS))], dtype=float)
    mixed = LayoutBatch({**one.arrays(), "optimizer": grid[:, 0], "offload": grid[:, 1]})
    together = evaluate(ctx, mixed)
    for i in range(len(mixed)):
        alone = evaluate(ctx, mixed.take(np.array([i])))
        for name, values in together.columns.items():
            np.testing.assert_allclose(alone[name][0], values[i], rtol=1e-12, atol=0, err_msg=name)


def test_adamw_without_offload_equals_the_knobs_left_out():
    """A batch built without the optimizer and offload arrays (older records) is adamw, none."""
    ctx, batch = space_batch("llama3-8b", "megatron", 64)
    arrays = {k: v for k, v in batch.arrays().items() if k not in ("optimizer", "offload")}
    left_out, explicit = evaluate(ctx, LayoutBatch(arrays)), evaluate(ctx, batch)
    for name, values in explicit.columns.items():
        np.testing.assert_array_equal(left_out[name], values, err_msg=name)
    assert dataclasses.asdict(batch.layout(0))["optimizer"] == "adamw"
