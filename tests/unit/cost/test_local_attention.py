"""Sliding-window and chunked attention in the cost: the keys per query against a brute-force
count over the positions, and the attention time of the one-layer model of test_time."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from autoplan.cost.evaluate import evaluate
from autoplan.cost.flops import attention_keys
from tests.unit.cost.test_time import ATT_FWD, MODEL, at, ctx_for, evaluate_one


def _brute_force_keys(seq_len: int, window: int, kind: str) -> float:
    """2 × mean over queries of the keys a causal query attends (query i: i + 1 keys in full)."""
    i = np.arange(seq_len)
    keys = np.minimum(i + 1, window) if kind == "sliding" else np.mod(i, window) + 1
    return min(seq_len, 2.0 * keys.sum() / seq_len)


@pytest.mark.parametrize("kind", ["sliding", "chunked"])
@pytest.mark.parametrize("seq_len, window", [(8, 4), (10, 4), (4096, 4096), (32768, 4096), (1000, 4096),
                                             (8192, 2047), (9000, 8192)])
def test_keys_per_query_match_a_count_over_the_positions(kind, seq_len, window):
    model = dataclasses.replace(MODEL, attention_window=window, local_attention=kind)
    assert attention_keys(model, np.array([float(seq_len)]))[0] == pytest.approx(
        _brute_force_keys(seq_len, window, kind), rel=1e-12)


def test_hand_computed_keys_and_the_layer_mix():
    # sliding w = 4, s = 8: 1 + 2 + 3 + 4·5 = 26 keys, k̄ = 2·26/8 = 6.5; chunked w = 4, s = 10:
    # (1+2+3+4)·2 + 1 + 2 = 23, k̄ = 4.6; Gemma 2's pattern (every 2nd layer full) on 2 layers:
    # (8 + 6.5)/2 = 7.25; a window >= s changes nothing.
    sliding = dataclasses.replace(MODEL, attention_window=4)
    assert attention_keys(sliding, np.array([8.0]))[0] == 6.5
    chunked = dataclasses.replace(MODEL, attention_window=4, local_attention="chunked")
    assert attention_keys(chunked, np.array([10.0]))[0] == pytest.approx(4.6)
    mixed = dataclasses.replace(sliding, num_layers=2, full_attention_every=2)
    assert attention_keys(mixed, np.array([8.0]))[0] == 7.25
    assert attention_keys(dataclasses.replace(MODEL, attention_window=8), np.array([8.0]))[0] == 8.0


def test_a_window_shortens_flash_attention_only():
    # seq 1024 with a 256-token window: keys sum 256·1024 − 256·255/2 = 229,504, k̄ = 448.25 of
    # 1024, so the flash attention (1 + 2.5)·ATT_FWD shrinks by that ratio; eager attention
    # multiplies the full square before it masks, so its time does not change.
    windowed = dataclasses.replace(MODEL, attention_window=256)
    full = evaluate_one(zero=0)["time_compute_s"][0]
    local = evaluate_one(ctx_for(model=windowed), zero=0)["time_compute_s"][0]
    assert full - local == pytest.approx(3.5 * ATT_FWD * (1 - 448.25 / 1024), rel=1e-9)
    eager = {}
    for model in (MODEL, windowed):
        ctx, batch = at(ctx_for(model=model), {"gpus": 1, "seq_len": 1024, "gbs_seqs": 1})
        ctx = dataclasses.replace(ctx, training=dataclasses.replace(ctx.training, attention_kernel="eager"))
        eager[model.attention_window] = evaluate(ctx, batch)["time_compute_s"][0]
    assert eager[256] == eager[0]


def test_model_flops_count_the_window():
    # causal convention: 6·N + 3·L·(2·k̄·a·(d + d))/2 per token; the window changes only the k̄ term
    def causal(model):
        ctx = ctx_for(model=model)
        return dataclasses.replace(ctx, training=dataclasses.replace(ctx.training, flops_convention="causal"))

    full, local = (evaluate_one(causal(m), zero=0) for m in (MODEL, dataclasses.replace(MODEL, attention_window=256)))
    per_token = 3 * 2 * (1024 - 448.25) * 8 * 256 / 2
    assert full["model_flops_per_step"][0] - local["model_flops_per_step"][0] == pytest.approx(per_token * 1024)
