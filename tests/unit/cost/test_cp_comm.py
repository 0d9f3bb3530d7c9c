"""Context-parallel K/V exchange (cost.cp_comm) and torchtitan's op-SAC TP recompute, against
hand-computed values (arithmetic in the comments).

H100 SXM preset: NVLink 450 GB/s per direction, 3 µs per hop, domains of 8; link efficiency 1.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autoplan.api import build_context, build_training, plan_from_record
from autoplan.cost import comm, cp_comm
from autoplan.cost.context import CostContext
from autoplan.cost.step_time import micro_batch_parts_s
from autoplan.cost.tp_comm import tp_collective_s
from autoplan.layout import LayoutBatch
from autoplan.profiles import load_profile
from autoplan.specs.hardware import load_gpu, make_cluster
from autoplan.specs.model import ModelSpec
from autoplan.specs.training import TrainingSpec
from tests.unit.cost.test_time import PLAIN

NVLINK, ALPHA_UP = 450e9, 3e-6
# 8 query heads of 128 sharing 2 K/V heads: h = 1024, kv_size = 256 (GQA, 4 query heads per K/V head).
GQA = ModelSpec(name="gqa", num_layers=1, hidden_size=1024, ffn_hidden_size=4096,
                num_attention_heads=8, num_kv_heads=2, head_dim=128, vocab_size=32000)


def _ctx(trainer: str, record: dict) -> tuple[CostContext, LayoutBatch]:
    ctx = CostContext(model=GQA, training=TrainingSpec(make_cluster(load_gpu("h100-sxm"), 8), 2048, 8),
                      profile=load_profile(trainer), parameters=PLAIN)
    layout, training = plan_from_record(record, flops_convention=ctx.flops_convention)
    return dataclasses.replace(ctx, training=training), LayoutBatch.from_layouts([layout])


CP2 = {"gpus": 2, "cp": 2, "seq_len": 2048, "gbs_seqs": 1}  # tokens per rank: 2048/2 = 1024


def test_torchtitan_exchanges_the_repeated_kv_heads_megatron_the_kv_heads():
    # repeat_kv expands K/V to the 8 query heads: 8·128 = 1024; Megatron's exchange keeps 2·128 = 256
    assert cp_comm.exchanged_kv_width(_ctx("torchtitan", CP2)[0]) == 1024.0
    assert cp_comm.exchanged_kv_width(_ctx("megatron", CP2)[0]) == 256.0


def test_allgather_exposed_layer_by_hand():
    ctx, b = _ctx("torchtitan", CP2)
    link = comm.group_link(ctx, b.cp, np.ones(1))
    tokens = np.array([1024.0])
    # S_kv = 2·1024 tokens·1024 width·2 B = 4,194,304 B per rank; the gathered buffer 2·S_kv:
    # AG = (2 − 1)/2 · 8,388,608 / 450e9 + 1·3e-6 = 9.3206e-6 + 3e-6 = 1.23206e-5 s
    gather = 0.5 * 8_388_608 / NVLINK + ALPHA_UP
    # dK/dV permute in float32: 2·1024·1024·4 = 8,388,608 B: P = 1.86414e-5 + 3e-6 = 2.16414e-5 s
    permute = 8_388_608 / NVLINK + ALPHA_UP
    fwd, bwd = np.array([1e-5]), np.array([2.5e-5])  # first SDPA call: 5e-6 s forward, 1.25e-5 s backward
    expected = ((gather - 5e-6) + 0.0  # forward gather partly hidden; the backward's whole under 1.25e-5
                + (permute - 1.25e-5) + permute)  # one permute behind step 2's backward, the last exposed
    got = cp_comm.allgather_exposed_layer_s(ctx, b, link, tokens, fwd, bwd, np.zeros(1))
    assert got[0] == pytest.approx(expected, rel=1e-9)
    assert expected == pytest.approx(3.81034e-5, rel=1e-5)
    # a fully recomputed forward gathers once more: + (AG − 5e-6) = + 7.3206e-6
    full = cp_comm.allgather_exposed_layer_s(ctx, b, link, tokens, fwd, bwd, np.ones(1))
    assert full[0] == pytest.approx(expected + gather - 5e-6, rel=1e-9)


def test_each_rotate_method_costs_only_its_own_exchange():
    for trainer, ring_zero, allgather_zero in (("torchtitan", True, False), ("megatron", False, True)):
        ctx, b = _ctx(trainer, CP2)
        link, tokens, zero = comm.group_link(ctx, b.cp, np.ones(1)), np.array([1024.0]), np.zeros(1)
        ring = cp_comm.ring_layer_s(ctx, b, link, tokens, zero)
        gathered = cp_comm.allgather_exposed_layer_s(ctx, b, link, tokens, np.ones(1), np.ones(1), zero)
        assert (ring[0] == 0.0) == ring_zero and (gathered[0] == 0.0) == allgather_zero, trainer
    # Megatron's ring by hand: 3·(2 − 1)·(2·1024·256·2 B / 450e9 + 3e-6) = 3·(2.33e-6 + 3e-6)
    ctx, b = _ctx("megatron", CP2)
    ring = cp_comm.ring_layer_s(ctx, b, comm.group_link(ctx, b.cp, np.ones(1)), np.array([1024.0]), np.zeros(1))
    assert ring[0] == pytest.approx(3 * (1_048_576 / NVLINK + ALPHA_UP), rel=1e-9)


@pytest.mark.parametrize("trainer, passes", [("torchtitan", 2.5), ("megatron", 2.0)])
def test_op_sac_runs_the_two_all_gathers_again(trainer, passes):
    # forward + backward = 2 passes of 4 TP collectives; torchtitan's op-SAC saves the two
    # reduce-scatters and recomputes the two all-gathers: + 2/4 of a pass. Megatron's selective
    # (core_attn) recomputes no TP collective.
    ctx, b = _ctx(trainer, {"gpus": 2, "tp": 2, "seq_len": 2048, "gbs_seqs": 1, "recompute": "selective"})
    assert micro_batch_parts_s(ctx, b)["tp_passes"][0] == passes


SETTINGS = settings(max_examples=25, deadline=None)


@SETTINGS
@given(cp=st.sampled_from([2, 4, 8]), tp=st.sampled_from([1, 2, 8]), scale=st.floats(1.0, 10.0),
       full=st.sampled_from([0.0, 1.0]))
def test_longer_attention_never_exposes_more_of_the_allgather_exchange(cp, tp, scale, full):
    # The attention is what hides the exchange: scaling it up never exposes more, and what is
    # exposed never exceeds the exchange itself ((2 + full) gathers and cp permutes,
    # cp_comm.allgather_layer_s).
    training = build_training(cp * tp * 2, 131072, 2, hardware="h100-sxm")
    ctx = build_context("llama3.1-405b", training, trainer="torchtitan")
    b = LayoutBatch.from_layouts([plan_from_record({"gpus": cp * tp * 2, "tp": tp, "cp": cp, "seq_len": 131072,
                                                    "gbs_seqs": 2}, flops_convention=ctx.flops_convention)[0]])
    link = comm.group_link(ctx, b.cp, np.array([float(tp)]))
    tokens, f = np.array([131072.0 / cp]), np.full(1, full)
    fwd, bwd = np.array([0.01]), np.array([0.025])
    short = cp_comm.allgather_exposed_layer_s(ctx, b, link, tokens, fwd, bwd, f)
    long = cp_comm.allgather_exposed_layer_s(ctx, b, link, tokens, scale * fwd, scale * bwd, f)
    none = cp_comm.allgather_exposed_layer_s(ctx, b, link, tokens, 0 * fwd, 0 * bwd, f)
    assert long[0] <= short[0] <= none[0]
    width = cp_comm.exchanged_kv_width(ctx) / tp
    total = ((2.0 + full) * tp_collective_s(link, cp * 2.0 * tokens * width * 2.0)
             + cp * (2.0 * tokens * width * 4.0 / link.bus_bytes_per_s + link.latency_s))
    assert none[0] == pytest.approx(total[0], rel=1e-9)
    # the whole exchange, hidden or not, is what no attention leaves exposed
    assert cp_comm.allgather_layer_s(ctx, b, link, tokens, f)[0] == pytest.approx(total[0], rel=1e-9)


def test_ring_merge_bytes_by_hand_for_the_last_of_two_ranks():
    # cp = 2, rank 1 (step 1 has i = 1 <= rank: whole query, first half of the K/V chunk), E
    # elements of query and of (repeated) K/V. Forward, _templated_ring_attention + _SDPAMerger:
    #   step 0: out.to(f32) 6E, torch.cat(K, V) for the rotater 8E
    #   step 1: out.to(f32) 6E, merge (out − out_b) 12E, sigmoid·diff 8E, out − … 12E
    #   results: out.to(bf16) 6E                                     -> 58E
    # Backward, _templated_ring_attention_backward:
    #   zeros_like dQ, dK, dV in f32 4E + 8E; step 0: torch.cat(K, V) 8E, dK += dK_b and dV += dV_b
    #   20E, torch.cat(dK, dV) f32 16E, dQ += dQ_b 10E; step 1: _partial_update(add) on dK, dV
    #   (10 B on half, cat 8 B: 13E each) 26E, torch.cat(dK, dV) 16E, dQ += 10E; the end: dQ to
    #   bf16 6E, received dK, dV to bf16 12E                          -> 30E + 106E = 136E
    forward, backward = cp_comm.ring_merge_bytes(np.array([2.0]), np.array([1.0]), np.array([1.0]))
    assert forward[0] == 58.0 and backward[0] == 136.0


def test_ring_merge_is_torchtitans_alone_and_lengthens_its_attention():
    ctx, b = _ctx("torchtitan", CP2)
    tokens = np.array([1024.0])
    forward, backward = cp_comm.ring_merge_s(ctx, b, tokens)
    # E = 1024 tokens · 8 heads · 128 = 1,048,576 elements, K/V repeated to the query heads: same E
    assert forward[0] == pytest.approx(58 * 1_048_576 / ctx.effective_hbm_bytes_per_s, rel=1e-12)
    assert backward[0] == pytest.approx(136 * 1_048_576 / ctx.effective_hbm_bytes_per_s, rel=1e-12)
    from autoplan.cost.time import attention_s
    plain = dataclasses.replace(ctx, profile=ctx.profile.with_overrides([("cp_rotate_method", "ring")]))
    with_merge, without = attention_s(ctx, b, tokens), attention_s(plain, b, tokens)
    assert with_merge[0][0] - without[0][0] == pytest.approx(forward[0], rel=1e-9)
    assert with_merge[1][0] - without[1][0] == pytest.approx(backward[0], rel=1e-9)
    # Megatron's Transformer Engine ring, and any trainer without CP, pays none of it
    assert cp_comm.ring_merge_s(*_ctx("megatron", CP2), tokens)[0][0] == 0.0
    one = _ctx("torchtitan", {"gpus": 1, "seq_len": 2048, "gbs_seqs": 1})
    assert cp_comm.ring_merge_s(*one, np.array([2048.0]))[1][0] == 0.0


@SETTINGS
@given(cp=st.sampled_from([2, 4, 8, 16]), q=st.floats(1.0, 1e9), kv=st.floats(1.0, 1e9))
def test_ring_merge_grows_with_each_ring_step(cp, q, kv):
    # every ring step adds its merge and accumulation: cp + 1 steps never cost fewer bytes than cp,
    # and the bytes scale with the elements
    f, bw = cp_comm.ring_merge_bytes(np.array([float(cp)]), np.array([q]), np.array([kv]))
    f2, bw2 = cp_comm.ring_merge_bytes(np.array([cp + 1.0]), np.array([q]), np.array([kv]))
    f3, bw3 = cp_comm.ring_merge_bytes(np.array([float(cp)]), np.array([2 * q]), np.array([2 * kv]))
    assert f2[0] > f[0] > 0 and bw2[0] > bw[0] > 0
    assert f3[0] == pytest.approx(2 * f[0]) and bw3[0] == pytest.approx(2 * bw[0])
