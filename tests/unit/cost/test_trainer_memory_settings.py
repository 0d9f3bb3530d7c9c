"""Memory settings read from the trainers' code: nanotron's multi-head attention copies and
torchtitan's reserve, zero by construction."""

from __future__ import annotations

import dataclasses

from autoplan.api import build_context, build_training
from autoplan.calibration.accuracy import FIT_PLAN
from autoplan.cost.memory import layer_activation_bytes
from autoplan.layout import LayoutBatch, resolve_layout
from autoplan.profiles import load_profile

SEQ = 4096


def _dense_layer_bytes(model: str, trainer: str, tp: int, **profile_changes) -> float:
    training = build_training(8, SEQ, 8)
    ctx = build_context(model, training, trainer=trainer)
    ctx = dataclasses.replace(ctx, profile=dataclasses.replace(ctx.profile, **profile_changes))
    batch = LayoutBatch.from_layouts([resolve_layout({"mbs": 1, "tp": tp}, training)])
    return float(layer_activation_bytes(ctx, batch, "none")[0][0])


def test_nanotron_mha_keeps_four_more_bytes_per_kv_element():
    # usp-1b is multi-head (32 KV heads of 64 = kv_size 2048): nanotron's non-GQA branch keeps
    # the whole permuted q|k|v copy and a k|v copy, 4 B per KV element per token beyond the
    # separate copies of the GQA branch, sharded over tp's heads.
    tp = 2
    with_copies = _dense_layer_bytes("usp-1b", "nanotron", tp)
    without = _dense_layer_bytes("usp-1b", "nanotron", tp, mha_kv_copy_bytes=0.0)
    assert with_copies - without == 4 * 2048 / tp * SEQ


def test_grouped_query_models_keep_no_extra_copy():
    # Llama 3 8B has 8 KV heads for 32 query heads: the GQA branch, no whole q|k|v copy.
    assert _dense_layer_bytes("llama3-8b", "nanotron", 1) == _dense_layer_bytes(
        "llama3-8b", "nanotron", 1, mha_kv_copy_bytes=0.0)


def test_torchtitan_reserve_is_zero_by_construction_and_never_fitted():
    # torchtitan logs the allocator's reserved_bytes.all.peak, which leaves out the CUDA context
    # and NCCL buffers: the reserve is a profile default of 0, outside the fit plan.
    profile = load_profile("torchtitan")
    for gpu, params in profile.parameters.items():
        assert params.corrections.memory_reserve_bytes == 0.0, gpu
        assert "memory_reserve_bytes" not in params.fitted, gpu
    assert all("memory_reserve_bytes" not in params for (trainer, _), params in FIT_PLAN.items()
               if trainer == "torchtitan")
