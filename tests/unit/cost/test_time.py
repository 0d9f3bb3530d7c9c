"""Step-time terms against hand-computed values (arithmetic in the comments).

Every test pins the efficiency parameters (η_max = 0.5 with no GEMM-size penalty, attention at
0.5 of peak, link and HBM efficiencies 1, no overlap, no reserve) so the expected values are
plain arithmetic on the H100 SXM preset: 989 TFLOP/s BF16, 3.35 TB/s HBM, NVLink 450 GB/s per
direction in domains of 8, NIC 400 Gb/s = 50 GB/s, latencies 3 µs (NVLink) and 10 µs (NIC).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from autoplan.api import build_training, plan_from_record
from autoplan.cost.context import CostContext
from autoplan.cost.evaluate import evaluate
from autoplan.cost.optimizer import step_bytes_per_param
from autoplan.cost.time import gemm_efficiency
from autoplan.layout import LayoutBatch
from autoplan.profiles import CalibratedParameters, PhysicalEfficiency, load_profile
from autoplan.profiles.efficiency import neutral_corrections
from autoplan.specs.hardware import load_gpu, make_cluster
from autoplan.specs.model import ModelSpec
from autoplan.specs.models import load_model
from autoplan.specs.training import TrainingSpec

GPU = load_gpu("h100-sxm")
PEAK = 989e12
HBM = 3.35e12
NVLINK, NIC = 450e9, 50e9
ALPHA_UP, ALPHA_OUT = 3e-6, 10e-6

PLAIN = CalibratedParameters(
    PhysicalEfficiency(gemm_efficiency_max=0.5, gemm_half_flops=0.0, attention_efficiency=0.5, attention_half_seq_tokens=0.0,
                       attention_half_head_dim=0.0,
                       fp8_gemm_speedup=1.6, moe_layer_fixed_s=0.0, host_launch_s=0.0, elementwise_bytes_per_token_hidden=40.0,
                       hbm_efficiency=1.0, scale_up_efficiency=1.0, scale_out_efficiency=1.0,
                       tp_overlap=0.0, cp_overlap=0.0, ep_overlap=0.0, pp_overlap=0.0,
                       dp_overlap=0.0, fsdp_overlap=0.0),
    neutral_corrections())  # no step overhead, no reserve, no fragmentation

# One layer: h = 1024, f = 4096, 8 heads of 128 (MHA), V = 32,000, untied.
#   attention weights 4h² = 4,194,304; SwiGLU 3hf = 12,582,912; matmul weights 2^24.
MODEL = ModelSpec(name="one", num_layers=1, hidden_size=1024, ffn_hidden_size=4096,
                  num_attention_heads=8, num_kv_heads=8, head_dim=128, vocab_size=32000)
TOKENS = 1024  # mbs 1 × s 1024

# Forward of one layer for one micro-batch:
MM_FWD = 2 * TOKENS * 2**24 / (PEAK * 0.5)          # 2^35 FLOPs at half of peak
ATT_FWD = TOKENS * (2 * 1024 * 8 * 256) / 2 / (PEAK * 0.5)  # 2·s·a·(d+d) per token, causal half: 2^31
ELT_FWD = 40 * TOKENS * 1024 / HBM                    # 40 B per token per hidden unit
HEAD = 3 * 2 * TOKENS * 32000 * 1024 / (PEAK * 0.5)  # LM head, forward + 2× backward


def ctx_for(model: ModelSpec = MODEL, trainer: str = "megatron", eff: CalibratedParameters = PLAIN) -> CostContext:
    return CostContext(model=model, training=TrainingSpec(make_cluster(GPU, 8), 1024, 8),
                       profile=load_profile(trainer), parameters=eff)


def at(ctx: CostContext, record: dict) -> tuple[CostContext, LayoutBatch]:
    """``ctx`` with the training setup of ``record`` and the record's layout as a batch."""
    layout, training = plan_from_record(record, flops_convention=ctx.flops_convention)
    return dataclasses.replace(ctx, training=training), LayoutBatch.from_layouts([layout])


def evaluate_one(ctx: CostContext = None, **values):
    ctx = ctx or ctx_for()
    values.setdefault("gpus", values.get("tp", 1) * values.get("pp", 1) * values.get("cp", 1)
                      * values.pop("dp", 1))
    values.setdefault("seq_len", 1024)
    values.setdefault("gbs_seqs", values["gpus"] // (values.get("tp", 1) * values.get("pp", 1)
                                                      * values.get("cp", 1)) * values.pop("ga", 1))
    return evaluate(*at(ctx, values))


def test_gemm_efficiency_curve():
    # η(F) = η_max · F / (F + F_half): half of η_max at F = F_half, → η_max for huge F
    ctx = ctx_for(eff=PLAIN.with_values({"gemm_efficiency_max": 0.8, "gemm_half_flops": 2e9}))
    eff = gemm_efficiency(ctx, np.array([2e9, 6e9, 1e18]))
    assert eff[0] == pytest.approx(0.4) and eff[1] == pytest.approx(0.6)
    assert eff[2] == pytest.approx(0.8, rel=1e-8)


def test_compute_time_of_one_layer_and_the_head():
    # compute = fwd + 2× bwd matmuls + (1 + 2.5) attention + 3 passes of element-wise + head
    #   = 3·6.948e-5 + 3.5·4.343e-6 + 3·1.252e-5 + 1.357e-4 ≈ 6.683e-4 s
    table = evaluate_one(zero=0)
    expected = 3 * MM_FWD + 3.5 * ATT_FWD + 3 * ELT_FWD + HEAD
    assert table["time_compute_s"][0] == pytest.approx(expected, rel=1e-12)
    assert table["time_recompute_s"][0] == 0.0


@pytest.mark.parametrize("trainer, recompute, expected", [
    ("megatron", "full", MM_FWD + ATT_FWD + ELT_FWD),  # one more forward of the layer
    ("megatron", "selective", ATT_FWD),                # 'core_attn': only the attention scores
    ("torchtitan", "selective", 0.36 * MM_FWD),        # 36 % of the matmuls (its op list)
    ("hf", "selective", 0.0),                          # per-layer checkpointing only
])
def test_recompute_time(trainer, recompute, expected):
    table = evaluate_one(ctx_for(trainer=trainer), zero=0, recompute=recompute, ga=3)
    assert table["time_recompute_s"][0] == pytest.approx(3 * expected, rel=1e-12, abs=0)


def test_full_recompute_that_stops_early_skips_the_down_projection():
    # torch >= 2.1's non-reentrant checkpoint stops before the MLP's down projection (h·f of the
    # layer's 2^24 matmul weights: 1024·4096 / 2^24 = 1/4), so a full recompute reruns 3/4 of the
    # matmuls, the attention and the element-wise work; HFU's recompute FLOPs lose 2·h·f per token.
    profile = load_profile("megatron").with_overrides((("full_recompute_skips_last_linear", True),))
    early = dataclasses.replace(ctx_for(), profile=profile)
    table = evaluate_one(early, zero=0, recompute="full", ga=3)
    assert table["time_recompute_s"][0] == pytest.approx(3 * (0.75 * MM_FWD + ATT_FWD + ELT_FWD), rel=1e-12)
    whole = evaluate_one(zero=0, recompute="full", ga=3)
    rerun_flops = (table["hardware_tflops_per_gpu"][0] * table["step_time_s"][0]
                   - whole["hardware_tflops_per_gpu"][0] * whole["step_time_s"][0]) * 1e12
    assert rerun_flops == pytest.approx(-3 * TOKENS * 2 * 1024 * 4096, rel=1e-9)


def test_fp8_speeds_up_only_the_layer_matmuls_and_adds_its_casts():
    # Δ = 3 passes × MM_FWD × (1 − 1/S), S = 1 + (1.6 − 1)·(1979/989 − 1) (the gain scales with the
    # H100's FP8/BF16 peak ratio, ≈ 2; tensorwise keeps the whole gain), less the casts: linear inputs + output gradients per token = (h + q + 2kv) + (q + h)
    # + (h + 2f) + (f + h) = 4096 + 2048 + 9216 + 5120 = 20,480 elements, each 4 B cast + 2 B
    # amax pass (tensorwise) at 3.35 TB/s. The head and attention stay BF16.
    bf16 = evaluate_one(zero=0)["time_compute_s"][0]
    fp8 = evaluate_one(zero=0, precision="fp8")["time_compute_s"][0]
    casts = TOKENS * 20_480 * 6 / HBM
    speedup = 1 + 0.6 * (1979 / 989 - 1)
    assert bf16 - fp8 == pytest.approx(3 * MM_FWD * (1 - 1 / speedup) - casts, rel=1e-9)


def test_pipeline_bubble_is_p_minus_1_over_v_micro_batches():
    # 2 layers over pp = 2, 4 micro-batches: bubble = (p − 1)/v × t_micro, and
    # m × t_micro = compute + recompute + exposed TP/CP/EP/PP (zero 1: no per-micro ZeRO-3 term)
    model = dataclasses.replace(MODEL, num_layers=4)
    for vpp in (1, 2):
        table = evaluate_one(ctx_for(model), pp=2, vpp=vpp, ga=4)
        per_micro = sum(table[f"time_{t}_s"][0] for t in (
            "compute", "recompute", "tp_exposed", "cp_exposed", "ep_exposed", "pp_exposed")) / 4
        assert table["time_bubble_s"][0] == pytest.approx((2 - 1) / vpp * per_micro, rel=1e-12)
        assert table["bubble_fraction"][0] == pytest.approx(
            table["time_bubble_s"][0] / table["step_time_s"][0], rel=1e-12)
    assert evaluate_one(pp=1, ga=4)["time_bubble_s"][0] == 0.0


def test_pipeline_sends():
    # pp = 2, stride tp·cp·dp = 1 < 8: NVLink. Per micro-batch 2 sends (activation forward,
    # gradient backward) of mbs·s·h·2 B = 2,097,152 B: 2·(2,097,152/450e9 + 3 µs) = 1.532e-5 s
    model = dataclasses.replace(MODEL, num_layers=2)
    table = evaluate_one(ctx_for(model), pp=2, ga=4)
    send = 2 * (TOKENS * 1024 * 2 / NVLINK + ALPHA_UP)
    assert table["time_pp_exposed_s"][0] == pytest.approx(4 * send, rel=1e-12)


def test_pipeline_send_crossing_a_node_boundary_uses_the_nic():
    # tp = 4 (SP), pp = 4, 4 layers, 1 micro-batch: each TP rank sends its 1/4 shard,
    # 1024·1024·2/4 = 524,288 B, over its own NIC: 2·(524,288/50e9 + 10 µs) = 4.097e-5 s
    # (observed 2·(524,288/450e9 + 3 µs) = 8.33e-6 s)
    model = dataclasses.replace(MODEL, num_layers=4)
    table = evaluate_one(ctx_for(model), tp=4, pp=4)
    send = 2 * (TOKENS * 1024 * 2 / 4 / NIC + ALPHA_OUT)
    assert table["time_pp_exposed_s"][0] == pytest.approx(send, rel=1e-9)


def test_tensor_parallel_inside_the_node():
    # tp = 8 (8 heads) on NVLink, SP: per layer per micro-batch 2 passes × 2 × (AG + RS) of
    # S = tokens·h·2 = 2,097,152 B; ring AG = RS = 7/8·S/450e9 + 7 steps·3 µs = 4.078e-6 + 2.1e-5
    table = evaluate_one(tp=8, zero=0)
    gather = 7 / 8 * TOKENS * 1024 * 2 / NVLINK + 7 * ALPHA_UP
    assert table["time_tp_exposed_s"][0] == pytest.approx(2 * 2 * 2 * gather, rel=1e-12)


def test_tensor_parallel_across_nodes():
    # tp = 16 over two 8-GPU domains: 8 ranks per domain each drive their NIC:
    # busbw = min(450e9, 8 × 50e9) = 400e9; ring AG = 15/16·S/400e9 + 15 steps·10 µs (every
    # step waits for its NIC hop)
    model = dataclasses.replace(MODEL, num_attention_heads=16, num_kv_heads=16, head_dim=64)
    table = evaluate_one(ctx_for(model), tp=16, zero=0)
    gather = 15 / 16 * TOKENS * 1024 * 2 / (8 * NIC) + 15 * ALPHA_OUT
    assert table["time_tp_exposed_s"][0] == pytest.approx(8 * gather, rel=1e-12)


# Two layers over pp = 2: the heavier stage is the last (layer + final norm + head):
#   layer 4h² + 2h (norms) + 3hf = 16,779,264; + 1,024 + 32,768,000 = 49,548,288 params.
P_LAST = 16_779_264 + 1_024 + 32_768_000




# Megatron's gradient buckets of 4e7 elements: P_LAST = 49,548,288 params -> 2 buckets, each an
# NCCL collective with its own latency. Inside one 8-GPU domain (N = 1) the ring all-reduce's
# 2·(8 − 1) = 14 steps cost more than the tree's 2·log2(8) = 6 levels: 6·α_up.
BUCKETS = 2
AR_LATENCY = 6 * ALPHA_UP
AG_LATENCY = 7 * ALPHA_UP  # ring all-gather / reduce-scatter: n − 1 steps


def test_data_parallel_all_reduce_without_zero():
    # dp = 8 on NVLink (stride 1), fp32 gradients (4 B), no overlap:
    # ring all-reduce 2·7/8·4P/450e9 + 2 buckets × tree latency 6·3 µs = 7.708e-4 + 3.6e-5 s
    model = dataclasses.replace(MODEL, num_layers=2)
    table = evaluate_one(ctx_for(model), pp=2, dp=8, zero=0)
    expected = 2 * 7 / 8 * 4 * P_LAST / NVLINK + BUCKETS * AR_LATENCY
    assert table["time_dp_exposed_s"][0] == pytest.approx(expected, rel=1e-12)


def test_data_parallel_reduction_uses_the_trainers_gradient_dtype():
    # DeepSpeed reduces in the communication dtype (bf16, 2 B): with the same layout the ring
    # all-reduce moves 2·7/8·2P/450e9 + 2 buckets × 6·3 µs (Megatron: 4P).
    model = dataclasses.replace(MODEL, num_layers=2)
    bf16 = load_profile("megatron").with_overrides([("grad_reduce_bytes", 2.0)])
    ctx = dataclasses.replace(ctx_for(model), profile=bf16)
    table = evaluate_one(ctx, pp=2, dp=8, zero=0)
    expected = 2 * 7 / 8 * 2 * P_LAST / NVLINK + BUCKETS * AR_LATENCY
    assert table["time_dp_exposed_s"][0] == pytest.approx(expected, rel=1e-12)


def test_data_parallel_reduce_scatter_and_gather_with_zero_1():
    # reduce-scatter of fp32 grads (4P) + all-gather of bf16 weights (2P), each
    # (n-1)/n·S/bw + 2 buckets × 7 ring steps × α_up
    model = dataclasses.replace(MODEL, num_layers=2)
    table = evaluate_one(ctx_for(model), pp=2, dp=8, zero=1)
    expected = 7 / 8 * (4 + 2) * P_LAST / NVLINK + 2 * BUCKETS * AG_LATENCY
    assert table["time_dp_exposed_s"][0] == pytest.approx(expected, rel=1e-12)


def test_deepspeed_pipeline_all_reduces_fp32_gradients_under_zero_1():
    # DeepSpeed's pipeline engine under bf16 (_bf16_reduce_grads): a full all-reduce of the
    # BF16_Optimizer's fp32 gradients, 2·7/8·4P, then the bf16 partitions' all-gather, 7/8·2P,
    # in one bucket of reduce_bucket_size 5e8 each (tree 6·α_up, ring 7·α_up); neither hidden.
    model = dataclasses.replace(MODEL, num_layers=2)
    table = evaluate_one(ctx_for(model, trainer="deepspeed"), pp=2, dp=8, zero=1)
    expected = 2 * 7 / 8 * 4 * P_LAST / NVLINK + AR_LATENCY + 7 / 8 * 2 * P_LAST / NVLINK + AG_LATENCY
    assert table["time_dp_exposed_s"][0] == pytest.approx(expected, rel=1e-12)


def test_flash_attention_slows_at_short_sequences_by_its_half_length():
    # eff(k) = attention_efficiency·k/(k + s_half), k = seq_len/cp keys per call: with s_half =
    # 1024 at seq 1024 the attention (1 + 2.5)·ATT_FWD takes twice as long; under cp = 2 the ring
    # blocks hold 512 keys, (512 + 1024)/512 = 3× the constant-efficiency time.
    half = ctx_for(eff=PLAIN.with_values({"attention_half_seq_tokens": 1024.0}))
    delta = evaluate_one(half, zero=0)["time_compute_s"][0] - evaluate_one(zero=0)["time_compute_s"][0]
    assert delta == pytest.approx(3.5 * ATT_FWD, rel=1e-9)
    ctx, batch = at(half, {"gpus": 2, "cp": 2, "seq_len": 1024, "gbs_seqs": 1})
    base = evaluate(dataclasses.replace(ctx, parameters=PLAIN), batch)
    slowed = evaluate(ctx, batch)
    per_rank = 3.5 * ATT_FWD / 2  # half the queries per rank
    assert slowed["time_compute_s"][0] - base["time_compute_s"][0] == pytest.approx(2 * per_rank, rel=1e-9)


def test_flash_attention_at_a_smaller_head_dim_runs_below_its_head_dim_128_figure():
    # d_0 = 64: at head dim 128 the factor is 1 (the one-layer MODEL); at head dim 64 (16 heads of
    # 64, the same h) it is [64/128]/[128/192] = 0.75, so the attention takes 4/3 as long, while
    # its FLOPs (2·s·a·(d + d)) are those of the 128-dim model.
    d0 = ctx_for(eff=PLAIN.with_values({"attention_half_head_dim": 64.0}))
    same = evaluate_one(d0, zero=0)["time_compute_s"][0] - evaluate_one(zero=0)["time_compute_s"][0]
    assert same == pytest.approx(0.0, abs=1e-15)
    small = dataclasses.replace(MODEL, num_attention_heads=16, num_kv_heads=16, head_dim=64)
    base = evaluate_one(ctx_for(model=small), zero=0)["time_compute_s"][0]
    slowed = evaluate_one(ctx_for(model=small, eff=d0.parameters), zero=0)["time_compute_s"][0]
    assert slowed - base == pytest.approx(3.5 * ATT_FWD / 3.0, rel=1e-9)


def test_eager_attention_moves_its_scores_through_hbm():
    # attention_kernel eager: two batched GEMMs over the full s×s square (no causal half) at the
    # GEMM efficiency 0.5 = 2·ATT_FWD forward, 2× that backward: 6·ATT_FWD against flash's
    # (1 + 2.5)·ATT_FWD; plus tokens·s·a/tp = 1024·1024·8 score elements × (8 B forward + 14 B
    # backward + the megatron profile's attention dropout, 5 B each way) at HBM 3.35 TB/s.
    flash = evaluate_one(pp=1, dp=1)
    ctx, batch = at(ctx_for(), {"gpus": 1, "seq_len": 1024, "gbs_seqs": 1})
    eager = evaluate(dataclasses.replace(ctx, training=dataclasses.replace(ctx.training, attention_kernel="eager")),
                     batch)
    delta = eager["time_compute_s"][0] - flash["time_compute_s"][0]
    assert delta == pytest.approx((6 - 3.5) * ATT_FWD + 1024 * 1024 * 8 * (8 + 14 + 2 * 5) / HBM, rel=1e-9)


def test_eager_attention_dropout_moves_its_bytes_each_way():
    # A profile with eager_attention_dropout_bytes 5 adds 1024·1024·8 score elements × 5 B in the
    # forward and 5 B in the backward at HBM 3.35 TB/s; flash attention has no score dropout pass.
    ctx, batch = at(ctx_for(), {"gpus": 1, "seq_len": 1024, "gbs_seqs": 1})
    ctx = dataclasses.replace(ctx, profile=ctx.profile.with_overrides([("eager_attention_dropout_bytes", 0.0)]))
    eager = dataclasses.replace(ctx, training=dataclasses.replace(ctx.training, attention_kernel="eager"))
    dropout = dataclasses.replace(eager, profile=eager.profile.with_overrides([("eager_attention_dropout_bytes", 5.0)]))
    delta = evaluate(dropout, batch)["time_compute_s"][0] - evaluate(eager, batch)["time_compute_s"][0]
    assert delta == pytest.approx(1024 * 1024 * 8 * (5 + 5) / HBM, rel=1e-9)
    flash = dataclasses.replace(ctx, profile=dropout.profile)
    assert evaluate(flash, batch)["time_compute_s"][0] == evaluate(ctx, batch)["time_compute_s"][0]


def test_data_parallel_all_reduce_bandwidth_term():
    # Latency cancels in the difference of 4 vs 2 layers over pp = 2 (one more layer on the
    # last stage, 16,779,264 params): Δ = 2·7/8 · 4 B · 16,779,264 / 450e9 = 1.3051e-4 s
    two = evaluate_one(ctx_for(dataclasses.replace(MODEL, num_layers=2)), pp=2, dp=8, zero=0)
    four = evaluate_one(ctx_for(dataclasses.replace(MODEL, num_layers=4)), pp=2, dp=8, zero=0)
    delta = four["time_dp_exposed_s"][0] - two["time_dp_exposed_s"][0]
    assert delta == pytest.approx(2 * 7 / 8 * 4 * 16_779_264 / NVLINK, rel=1e-9)


def test_dp_overlap_hides_up_to_the_last_backward():
    # dp_exposed = per_step − overlap · min(per_step, backward of the last micro-batch)
    model = dataclasses.replace(MODEL, num_layers=2)
    plain = evaluate_one(ctx_for(model), pp=2, dp=8, zero=0)
    hidden = evaluate_one(ctx_for(model, eff=PLAIN.with_values({"dp_overlap": 1.0})), pp=2, dp=8, zero=0)
    per_step = plain["time_dp_exposed_s"][0]
    backward_last = 2 / 3 * plain["time_compute_s"][0]  # one micro-batch, 2 of 3 passes
    assert hidden["time_dp_exposed_s"][0] == pytest.approx(per_step - min(per_step, backward_last),
                                                           rel=1e-9, abs=1e-15)


@pytest.mark.parametrize("dp, across", [(8, True), (4, False)])
def test_dp_overlap_window_holds_the_backwards_tp_collectives_on_another_tier(dp, across):
    # tp 2 inside a node; dp 8 (16 GPUs) reduces over the NICs while the backward's TP
    # collectives (1 of their 2 passes) run on NVLink: the window is 2/3 compute + tp/2. With
    # dp 4 (8 GPUs) both share NVLink and the window is the backward's compute alone.
    plain = evaluate_one(ctx_for(), tp=2, dp=dp, zero=0)
    hidden = evaluate_one(ctx_for(eff=PLAIN.with_values({"dp_overlap": 1.0})), tp=2, dp=dp, zero=0)
    per_step, tp = plain["time_dp_exposed_s"][0], plain["time_tp_exposed_s"][0]
    window = 2 / 3 * plain["time_compute_s"][0] + (tp / 2 if across else 0.0)
    assert tp > 0 and per_step > window  # the reduction outlasts the window: min() does not clip
    assert hidden["time_dp_exposed_s"][0] == pytest.approx(per_step - window, rel=1e-9)


# Megatron's Adam step per parameter: read grad 4 + master 4 + m, v 8; write master 4 + m, v 8
# and the bf16 weight 2 = 30 B (nanotron with its bf16 + fp32 grads: 6 + 8 + 16 + 2 = 32 B).
ADAM_BYTES = {"megatron": 30, "nanotron": 32, "torchtitan": 28, "deepspeed": 28, "hf": 30}


def test_optimizer_step_bytes_follow_the_profile():
    for trainer, expected in ADAM_BYTES.items():
        ctx = ctx_for(trainer=trainer)
        assert step_bytes_per_param(ctx, ctx.adam_state_bytes, False) == expected, trainer


@pytest.mark.parametrize("state, master, expected", [
    ("bf16", "fp32", 4 + 2 * (4 + 4) + 2), ("fp32", "remainders", 4 + 2 * (2 + 8) + 2),
    ("bf16", "none", 4 + 2 * (0 + 4) + 2), ("fp8", "fp16", 4 + 2 * (2 + 2) + 2)])
def test_optimizer_step_moves_the_stored_dtypes(state, master, expected):
    """Megatron (fp32 main grad 4, weight 2): the step reads and writes the master copy and both moments in
    the dtypes the setup stores them in (TrainingSpec.optimizer_state_dtype, master_weights)."""
    ctx = ctx_for()
    ctx = dataclasses.replace(ctx, training=dataclasses.replace(ctx.training, optimizer_state_dtype=state,
                                                                master_weights=master))
    assert step_bytes_per_param(ctx, ctx.adam_state_bytes, False) == expected


def test_optimizer_step_reads_and_writes_30_bytes_per_owned_parameter():
    # zero 1 over dp = 4: P/4 params × 30 B / 3.35e12 B/s
    model = dataclasses.replace(MODEL, num_layers=2)
    table = evaluate_one(ctx_for(model), pp=2, dp=4, zero=1)
    assert table["time_optimizer_s"][0] == pytest.approx(P_LAST / 4 * 30 / HBM, rel=1e-12)


def test_optimizer_step_with_pp1_counts_every_parameter():
    # 1 layer + embedding + final norm + head = 16,779,264 + 32,768,000 + 1,024 + 32,768,000
    #   = 82,316,288 params × 30 B / 3.35e12 B/s = 7.372e-4 s
    table = evaluate_one(zero=0)
    assert table["time_optimizer_s"][0] == pytest.approx(82_316_288 * 30 / HBM, rel=1e-12)


def test_step_time_is_the_sum_of_its_terms():
    table = evaluate_one(ctx_for(eff=PLAIN.with_values({"step_overhead_s": 0.01, "dp_overlap": 0.5})),
                         tp=2, dp=4, zero=1, ga=2)
    terms = ("compute", "recompute", "tp_exposed", "cp_exposed", "ep_exposed", "pp_exposed",
             "dp_exposed", "bubble", "optimizer", "overhead")
    assert table["time_overhead_s"][0] == 0.01
    assert table["step_time_s"][0] == pytest.approx(sum(table[f"time_{t}_s"][0] for t in terms), rel=1e-12)


# --- throughput and MFU -----------------------------------------------------------------------

LLAMA3_8B_PARAMS = 8_030_261_248


@pytest.mark.parametrize("convention, flops_per_token", [
    # 6N + 12·L·(a·d)·s = 48,181,567,488 + 12·32·4096·8192 (= 12,884,901,888) = 61,066,469,376
    ("playbook", 6 * LLAMA3_8B_PARAMS + 12 * 32 * 4096 * 8192),
    # Megatron's num_floating_point_operations: N without the embedding lookup (V·h = 525,336,576)
    ("megatron", 6 * (LLAMA3_8B_PARAMS - 128256 * 4096) + 12 * 32 * 4096 * 8192),
    # the default: Megatron's N, attention halved (causal)
    ("causal", 6 * (LLAMA3_8B_PARAMS - 128256 * 4096) + 6 * 32 * 4096 * 8192),
])
def test_model_flops_conventions(convention, flops_per_token):
    ctx = CostContext(model=load_model("llama3-8b"),
                      training=build_training(64, 8192, 512, flops_convention=convention),
                      profile=load_profile("megatron"), parameters=PLAIN)
    table = evaluate(*at(ctx, dict(gpus=64, tp=2, seq_len=8192, gbs_seqs=512)))
    tokens = 512 * 8192  # 4M = 4,194,304
    assert table["model_flops_per_step"][0] == pytest.approx(flops_per_token * tokens, rel=1e-15)


def test_throughput_mfu_and_hfu():
    ctx = CostContext(model=load_model("llama3-8b"), training=build_training(64, 8192, 512, flops_convention="playbook"),
                      profile=load_profile("megatron"), parameters=PLAIN)
    table = evaluate(*at(ctx, dict(gpus=64, tp=2, seq_len=8192, gbs_seqs=512, recompute="full")))
    step, tokens = table["step_time_s"][0], 512 * 8192
    tokens_per_s_per_gpu = tokens / (step * 64)
    assert table["tokens_per_s_per_gpu"][0] == pytest.approx(tokens_per_s_per_gpu, rel=1e-12)
    # refdata README: MFU = tokens/s/GPU × (6N + 12·L·h·s) / 989e12
    mfu = tokens_per_s_per_gpu * (6 * LLAMA3_8B_PARAMS + 12 * 32 * 4096 * 8192) / PEAK
    assert table["mfu"][0] == pytest.approx(mfu, rel=1e-12)
    assert table["model_tflops_per_gpu"][0] == pytest.approx(mfu * PEAK / 1e12, rel=1e-12)
    # Hardware FLOPs per token, as the kernels run them (whatever the MFU convention):
    #   one forward: matmuls 2 × 32 × (attention 41,943,040 + SwiGLU 176,160,768) = 13,958,643,712
    #                + LM head 2 × 128,256 × 4,096 = 1,050,673,152
    #                + attention scores 32 × 2·s·a·(d + d)/2 (causal) = 2,147,483,648
    #              = 17,156,800,512; forward + backward = 3 × that = 51,470,401,536
    #   full recompute adds one forward of every layer (not of the LM head):
    #              13,958,643,712 + 2,147,483,648 = 16,106,127,360
    # HFU/MFU = (51,470,401,536 + 16,106,127,360) / 61,066,469,376
    ratio = (51_470_401_536 + 16_106_127_360) / 61_066_469_376
    assert table["hfu"][0] / table["mfu"][0] == pytest.approx(ratio, rel=1e-12)
    assert table["hardware_tflops_per_gpu"][0] == pytest.approx(table["hfu"][0] * PEAK / 1e12, rel=1e-12)


def test_the_default_mfu_counts_the_work_the_kernels_run_without_recompute():
    """The default convention (causal) is HFU without recompute, up to the norm weights: issue 47
    found MFU 60.9% above HFU 45.0% under the playbook count it replaces."""
    ctx = CostContext(model=load_model("llama3-8b"), training=build_training(64, 8192, 512),
                      profile=load_profile("megatron"), parameters=PLAIN)
    table = evaluate(*at(ctx, dict(gpus=64, tp=2, seq_len=8192, gbs_seqs=512)))
    # model: 6·(N − V·h) + 6·L·a·d·s = 6 × 7,504,924,672 + 6,442,450,944 = 51,471,998,976
    # hardware (above): 51,470,401,536; the difference is 6 × the 266,240 norm weights (65 × 4,096)
    assert 6 * (LLAMA3_8B_PARAMS - 128256 * 4096) + 6 * 32 * 4096 * 8192 - 51_470_401_536 == 6 * 65 * 4096
    assert table["mfu"][0] / table["hfu"][0] == pytest.approx(51_471_998_976 / 51_470_401_536, rel=1e-12)


def test_a_power_limited_part_computes_at_its_clock_fraction_and_reports_mfu_at_nominal_peak():
    # GEMMs, attention and the head at peak × 0.5: each compute part doubles (attention backward
    # ATTENTION_BACKWARD_FACTOR = 2.5× forward); MFU keeps the nominal 989 TFLOP/s denominator.
    ctx, batch = at(ctx_for(), {"gpus": 1, "tp": 1, "seq_len": 1024, "gbs_seqs": 1})
    full = evaluate(ctx, batch)
    capped = dataclasses.replace(ctx.training.cluster, gpu=dataclasses.replace(GPU, power_limited_clock_fraction=0.5))
    half = evaluate(dataclasses.replace(ctx, training=dataclasses.replace(ctx.training, cluster=capped)), batch)
    doubled = 3 * MM_FWD + 3.5 * ATT_FWD + HEAD
    assert half["time_compute_s"][0] - full["time_compute_s"][0] == pytest.approx(doubled, rel=1e-6)
    assert half["mfu"][0] == pytest.approx(full["mfu"][0] * full["step_time_s"][0] / half["step_time_s"][0])


@pytest.mark.parametrize("zero, rounds", [(0, 2.0), (1, 1.0), (3, 1.0)])
def test_grad_reduce_in_bf16_halves_the_gradient_reduction_traffic(zero, rounds):
    """Megatron --grad-reduce-in-bf16 reduces the bf16 gradient buffer (CostContext.grad_reduce_bytes):
    the reduction moves 2 bytes per gradient instead of the profile's 4, so its time falls by the
    bandwidth term of 2 bytes per gradient (ring: rounds·(n−1)/n·P·2/busbw); its latency stays."""
    from autoplan.api import build_context
    from autoplan.cost import comm
    from autoplan.cost.data_parallel import dp_comm_s
    from autoplan.layout import resolve_layout

    seconds = {}
    for bf16 in (False, True):
        training = dataclasses.replace(build_training(512, 4096, 512), grad_reduce_in_bf16=bf16)
        ctx = build_context("70b", training)
        b = LayoutBatch.from_layouts([resolve_layout({"tp": 8, "pp": 1, "zero": zero, "mbs": 1}, training)])
        st = comm.strides(b.placement, b.tp, b.cp, b.dp, b.pp)
        params = np.array([ctx.params.total / 8.0])
        out = dp_comm_s(ctx, b, st, params, np.zeros(1), np.array([80.0]))
        seconds[bf16] = out["per_micro"][0] if zero == 3 else out["grads"][0]
        assert ctx.grad_reduce_bytes == (2.0 if bf16 else ctx.profile.model_states.grad_reduce_bytes)
    link = comm.group_link(ctx, b.dp, np.minimum(st["dp"], st["cp"]))
    n = float(b.dp[0])
    saved = rounds * (n - 1) / n * params[0] * (ctx.profile.model_states.grad_reduce_bytes - 2.0) / link.bus_bytes_per_s[0]
    assert seconds[False] - seconds[True] == pytest.approx(saved, rel=1e-9)


def test_interleaved_chunks_reduce_their_gradients_as_each_finishes():
    # Megatron's interleaved schedule launches each model chunk's gradient reduction after its
    # last backward (schedules.py grad_sync_func): with vpp 2 the first chunk's reduction hides
    # behind the other chunk's backwards, so less of the same traffic is exposed than with vpp 1.
    ctx = ctx_for(model=dataclasses.replace(MODEL, num_layers=8),
                  eff=PLAIN.with_values({"dp_overlap": 1.0, "scale_out_efficiency": 0.05}))
    one, two = (evaluate_one(ctx, tp=8, pp=4, vpp=v, dp=4, zero=0, ga=8) for v in (1, 2))
    assert 0.0 < two["time_dp_exposed_s"][0] < one["time_dp_exposed_s"][0]


def test_a_coalesced_parameter_gather_pays_one_collective_latency():
    """nanotron's ZeRO-1 gathers every updated shard in one all_gather_coalesced
    (param_gather_bucket_params = inf): the gather's latency is one ring's, not one per gradient
    bucket; its bandwidth term and the bucketed gradient reduction are unchanged."""
    from autoplan.api import build_context
    from autoplan.cost import comm
    from autoplan.cost.data_parallel import dp_comm_s
    from autoplan.layout import resolve_layout

    training = build_training(512, 4096, 512)
    out = {}
    for gather_params in (0.0, float("inf")):
        ctx = build_context("70b", training)
        ctx = dataclasses.replace(ctx, profile=ctx.profile.with_overrides([("param_gather_bucket_params", gather_params)]))
        b = LayoutBatch.from_layouts([resolve_layout({"tp": 8, "pp": 1, "zero": 1, "mbs": 1}, training)])
        st = comm.strides(b.placement, b.tp, b.cp, b.dp, b.pp)
        params = np.array([ctx.params.total / 8.0])
        out[gather_params] = dp_comm_s(ctx, b, st, params, np.zeros(1), np.array([80.0]))
    link = comm.group_link(ctx, b.dp, np.minimum(st["dp"], st["cp"]))
    buckets = np.ceil(params[0] / max(ctx.profile.data_parallel.dp_bucket_params, ctx.profile.data_parallel.dp_bucket_params_per_rank * 64))  # dp 64
    ring = comm.dp_latency(ctx, link).ring_round_s[0]
    assert buckets > 1
    assert out[0.0]["gathers"][0] - out[float("inf")]["gathers"][0] == pytest.approx((buckets - 1) * ring, rel=1e-9)
    assert out[0.0]["grads"][0] == out[float("inf")]["grads"][0]
