"""Pipeline schedules (autoplan.cost.schedule): in-flight activations and bubbles against the
papers' figures, and the Llama 3 split's effect on the first stage."""

from __future__ import annotations

import numpy as np
import pytest

from autoplan.cost.schedule import (
    CODE,
    bubble_micro_batches,
    in_flight_layers,
    parameter_copies,
    resolved_schedule,
)
from autoplan.cost.stages import rank_chunk_layers, virtual_stage_layers

THIRD = 1.0 / 3.0  # T_F = T_B = T_W: forward share of a stage micro-batch (F + B + W)


def one(value: float) -> np.ndarray:
    return np.array([float(value)])


def flying(layers_per_chunk, pp, micro, rank, schedule):
    chunks = np.array([[float(n)] for n in layers_per_chunk])
    return in_flight_layers(chunks, one(pp), one(len(layers_per_chunk)), one(micro), one(rank),
                            one(CODE[schedule]))[0]


@pytest.mark.parametrize("chunks, pp, micro, rank, schedule, expected", [
    ([8], 4, 16, 0, "1f1b", 8 * 4),     # first stage: min(pp, m) = 4 micro-batches × 8 layers
    ([8], 4, 16, 1, "1f1b", 8 * 3),     # rank r: min(pp - r, m)
    ([8], 4, 16, 3, "1f1b", 8 * 1),     # last stage: one
    ([8], 4, 2, 0, "1f1b", 8 * 2),      # fewer micro-batches than stages: min(4, 2) = 2
    # interleaved, v = 2: 2(p-1) + (v-1)p + 1 = 6 + 4 + 1 = 11 chunks of 4 layers = 44
    # = L(1 + (p-1)/(p·v)) with L = 32: 32·(1 + 3/8) = 44 (Korthikanti Sec. 4.2.3)
    ([4, 4], 4, 16, 0, "interleaved", 44),
    ([4, 4], 4, 16, 3, "interleaved", 4 * (4 + 1)),  # rank 3: 0 + (v-1)p + 1 = 5 chunks
    ([4, 4], 4, 2, 0, "interleaved", 4 * 4),        # capped at m·v = 4 chunks
    # chunk 0 holds 4 + 3 + ... : live 11 = chunk 0: 4 + 3 = 7, chunk 1: 4 → 7·0 + 4·4 = 16
    ([0, 4], 4, 16, 0, "interleaved", 16),
    ([8], 4, 16, 0, "afab", 8 * 16),    # all-forward-all-backward holds every micro-batch
    ([8], 4, 16, 0, "zb-h1", 8 * 4),    # ZB-H1: 1F1B's peak (Qi et al. 2023 Table 1: p·M_B)
    ([4, 4], 4, 16, 3, "zb-v", 8 * 4),  # ZB-V: p·M_B on every rank
    ([8], 4, 16, 0, "dualpipe", 8 * 5),     # DualPipe: PP + 1 (DeepSeek-V3 Table 2)
    ([4, 4], 4, 16, 0, "dualpipev", 8 * 4.5),  # 2p + 1 half-size chunks
])
def test_in_flight_layers(chunks, pp, micro, rank, schedule, expected):
    assert flying(chunks, pp, micro, rank, schedule) == expected


def test_llama3_split_empties_the_busiest_chunk():
    """Llama 3 405B: 126 layers + embedding + loss on pp 16 × vpp 8, one unit per chunk; rank 0's
    chunk 0 is the embedding alone. m = 32: warm-up 2·15 + 7·16 = 142, 143 live chunk-forwards,
    chunk 0 holding 16 + 15 = 31 of them and chunks 1..7 16 each: 7·16 = 112 layer-activations
    instead of 143 with a layer in every chunk."""
    pp, vpp = one(16), one(8)
    split = rank_chunk_layers(126, pp, vpp, np.array([True]), one(0))
    assert split[:, 0].tolist() == [0] + [1] * 7
    assert virtual_stage_layers(126, 16, 8, embed_loss=True) == [0] + [1] * 126 + [0]
    schedule = one(CODE["interleaved"])
    assert in_flight_layers(split, pp, vpp, one(32), one(0), schedule)[0] == 112
    uniform = np.ones((8, 1))
    assert in_flight_layers(uniform, pp, vpp, one(32), one(0), schedule)[0] == 143


def test_bubbles_match_the_papers():
    """p = 8, T_F = T_B = T_W = t/3. 1F1B (p-1)·t = 7t; ZB-H1 (p-1)(F + B - 2W) = 7·(1 - 2/3)t
    = 7t/3, a third of 1F1B (Qi et al. 2023 Sec. 3.1); ZB-V 0 (Qi et al. 2024); DualPipe
    (p/2 - 1)(F&B + B - 3W) = 3·(1 + 2/3 - 1)t = 2t (DeepSeek-V3 Table 2); DualPipeV 7·(2/3)/2 t."""
    names = ["1f1b", "afab", "zb-h1", "zb-v", "dualpipe", "dualpipev"]
    codes = np.array([CODE[n] for n in names])
    got = bubble_micro_batches(codes, np.full(6, 8.0), np.where(np.isin(names, ["zb-v", "dualpipev"]), 2.0, 1.0),
                               THIRD)
    assert got == pytest.approx([7.0, 7.0, 7.0 / 3.0, 0.0, 2.0, 7.0 / 3.0])


@pytest.mark.parametrize("pp", [2, 4, 8, 16, 32])
def test_zero_bubble_schedules_never_exceed_1f1b(pp):
    """Property (issue 16): at any pp the zero-bubble and DualPipe bubbles stay at or below 1F1B's."""
    names = ["zb-h1", "zb-v", "dualpipe", "dualpipev"]
    codes = np.array([CODE[n] for n in names])
    ones = np.ones(len(names))
    base = bubble_micro_batches(one(CODE["1f1b"]), one(pp), one(1), THIRD)[0]
    assert (bubble_micro_batches(codes, pp * ones, ones, THIRD) <= base).all()


def test_default_resolves_to_the_trainer_schedule_and_dualpipe_doubles_parameters():
    codes = np.array([CODE["default"], CODE["default"], CODE["zb-v"], CODE["default"]])
    vpp = np.array([1.0, 4.0, 2.0, 1.0])
    assert resolved_schedule(codes, vpp, "1f1b").tolist() == [CODE["1f1b"], CODE["interleaved"], CODE["zb-v"],
                                                              CODE["1f1b"]]
    assert resolved_schedule(codes[:1], vpp[:1], "afab").tolist() == [CODE["afab"]]
    assert parameter_copies(np.array([CODE["dualpipe"], CODE["dualpipev"]])).tolist() == [2.0, 1.0]
