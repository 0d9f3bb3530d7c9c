"""Memory terms against hand-computed values (arithmetic in the comments).

Sources: Korthikanti et al. 2022 (arXiv 2205.05198) eq. 1 and Table 2 for GPT layers (the paper
leaves out LayerNorm's fp32 mean/rstd: 8 bytes per token per layer, stated separately here);
../shared/actmem/README.md for the Hugging Face coefficients (the `hf` profile); the ZeRO paper
(Rajbhandari et al. 2020) Fig. 1; Megatron's schedules.py for the 1F1B in-flight counts.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from autoplan.api import build_context, build_training, plan_from_record
from autoplan.cost.context import CostContext
from autoplan.cost.evaluate import evaluate
from autoplan.cost.memory import MEMORY_TERMS, layer_activation_bytes
from autoplan.cost.model_states import model_state_bytes
from autoplan.cost.stages import stage_layers
from autoplan.layout import LayoutBatch, resolve_layout
from autoplan.profiles import load_profile
from autoplan.specs.hardware import load_gpu, make_cluster
from autoplan.specs.model import ModelSpec, MoESpec
from autoplan.specs.training import TrainingSpec

GPU = load_gpu("h100-sxm")


def ctx_for(model: ModelSpec, trainer: str = "megatron", **profile_changes) -> CostContext:
    profile = load_profile(trainer).with_overrides(profile_changes.items())
    return CostContext(model=model, training=TrainingSpec(make_cluster(GPU, 8), 2048, 8), profile=profile,
                       parameters=profile.parameters_for(GPU.name))


def at(ctx: CostContext, **values) -> tuple[CostContext, LayoutBatch]:
    """``ctx`` with the training setup of a record (gpus default tp·pp·cp) and its layout."""
    values.setdefault("gpus", values.get("tp", 1) * values.get("pp", 1) * values.get("cp", 1))
    layout, training = plan_from_record(values)
    return dataclasses.replace(ctx, training=training), LayoutBatch.from_layouts([layout])


def evaluate_one(ctx: CostContext, **values):
    return evaluate(*at(ctx, **values))


def gpt(hidden: int = 1024, heads: int = 16, layers: int = 4) -> ModelSpec:
    """GPT-2 style: GELU MLP of 4h, LayerNorm, learned positions, biases, MHA."""
    return ModelSpec(name="gpt", num_layers=layers, hidden_size=hidden, ffn_hidden_size=4 * hidden,
                     num_attention_heads=heads, num_kv_heads=heads, head_dim=hidden // heads,
                     vocab_size=1000, tied_embeddings=True, activation="gelu", norm="layernorm",
                     position_embedding="learned", max_position_embeddings=4096,
                     linear_bias=True, model_type="gpt2")


# --- Korthikanti et al. 2022, Table 2 (GPT layers) -----------------------------------------

S, B, H, A = 2048, 2, 1024, 16  # sb = 4096, sbh = 4,194,304, 5as/h = 5·16·2048/1024 = 160
SB, SBH = S * B, S * B * H


def gpt_layer_bytes(mode: str = "none", attention_kernel: str = "eager", **layout) -> float:
    """One GPT layer's activation bytes; Korthikanti's Table 2 is Megatron's eager (non-fused) softmax."""
    ctx, batch = at(ctx_for(gpt()), seq_len=S, gbs_seqs=B, mbs=B, **layout)
    ctx = dataclasses.replace(ctx, training=dataclasses.replace(ctx.training, attention_kernel=attention_kernel))
    dense, _moe = layer_activation_bytes(ctx, batch,
                                         mode)
    return float(dense[0])


def test_gpt_layer_no_parallelism():
    # sbh(34 + 5as/h) + 8sb = 4,194,304·194 + 32,768 = 813,694,976 + 32,768 = 813,727,744
    assert gpt_layer_bytes() == SBH * (34 + 5 * A * S / H) + 8 * SB == 813_727_744


def test_gpt_layer_tensor_parallel_without_sp():
    # t = 4: sbh(10 + 24/t + 5as/(ht)) + 8sb = sbh(10 + 6 + 40) + 8sb
    #      = 4,194,304·56 + 32,768 = 234,881,024 + 32,768 = 234,913,792
    t = 4
    expected = SBH * (10 + 24 / t + 5 * A * S / (H * t)) + 8 * SB
    assert gpt_layer_bytes(tp=t, sp=False) == expected == 234_913_792


def test_gpt_layer_tensor_and_sequence_parallel():
    # t = 4 with SP: sbh(34/t + 5as/(ht)) + 8sb/t = sbh(8.5 + 40) + 8,192
    #      = 203,423,744 + 8,192 = 203,431,936 (observed 203,456,512 = + 8sb·(1 - 1/t))
    t = 4
    expected = SBH * (34 / t + 5 * A * S / (H * t)) + 8 * SB / t
    assert gpt_layer_bytes(tp=t, sp=True) == expected == 203_431_936


def test_gpt_layer_flash_attention_stores_no_scores():
    """Fused/flash attention (the default kernel) never stores the 5as²b scores; it keeps the
    fp32 log-sum-exp per head instead: 34sbh + 8sb + 4·a·sb
    = 142,606,336 + 32,768 + 262,144 = 142,901,248."""
    assert gpt_layer_bytes(attention_kernel="flash") == 34 * SBH + 8 * SB + 4 * A * SB == 142_901_248
    # Selective recompute has nothing left to drop under flash attention.
    assert gpt_layer_bytes("selective", attention_kernel="flash") == 142_901_248


def test_eager_attention_adds_the_softmax_scores_to_swiglu_layers():
    """A Llama-style layer under eager attention saves the bf16 softmax output 2·a·s² per sequence
    (no dropout) and no log-sum-exp: Δ per token = 2·a·s − 4·a = 2·32·4096 − 4·32 = 262,144 − 128 = 262,016."""
    ctx = build_context("llama3-8b", build_training(8, 4096, 8))
    batch = LayoutBatch.from_layouts([resolve_layout({"mbs": 1}, ctx.training)])
    flash = layer_activation_bytes(ctx, batch, "none")[0][0]
    eager_ctx = dataclasses.replace(ctx, training=dataclasses.replace(ctx.training, attention_kernel="eager"))
    eager = layer_activation_bytes(eager_ctx, batch, "none")[0][0]
    assert eager - flash == 4096 * (2 * 32 * 4096 - 4 * 32) == 4096 * 262_016
    assert layer_activation_bytes(eager_ctx, batch, "selective")[0][0] == flash - 4096 * 4 * 32


def test_gpt_layer_sequence_parallel_width_terms_exact():
    """The h-proportional part of Table 2 under TP+SP, isolated by changing h at fixed a, s, b:
    Δbytes = sb·Δh·34/t (the 5as²b/t and per-token terms do not depend on h)."""
    t = 4
    narrow = layer_activation_bytes(*at(ctx_for(gpt(hidden=1024)), seq_len=S, gbs_seqs=B, mbs=B, tp=t, sp=True),
                                    "none")[0][0]
    wide = layer_activation_bytes(*at(ctx_for(gpt(hidden=2048)), seq_len=S, gbs_seqs=B, mbs=B, tp=t, sp=True),
                                  "none")[0][0]
    # 4096 · 1024 · 34 / 4 = 35,651,584
    assert wide - narrow == SB * 1024 * 34 / t == 35_651_584


def test_gpt_layer_selective_recompute_no_parallelism():
    # Eq. 6 per layer: 34sbh (+ 8sb stats) = 142,606,336 + 32,768 = 142,639,104
    assert gpt_layer_bytes("selective") == 34 * SBH + 8 * SB == 142_639_104


def test_gpt_layer_selective_recompute_tensor_and_sequence_parallel():
    # 34sbh/t + 8sb/t = 35,651,584 + 8,192 = 35,659,776
    assert gpt_layer_bytes("selective", tp=4, sp=True) == 34 * SBH / 4 + 8 * SB / 4 == 35_659_776


@pytest.mark.parametrize("tp, sp, per_layer", [
    (1, False, 2 * SBH),       # Table 2, full recompute: 2sbh = 8,388,608 per layer
    (4, False, 2 * SBH),       # without SP the layer input is replicated over TP
    (4, True, 2 * SBH / 4),    # with SP it is sharded: 2sbh/t = 2,097,152
])
def test_full_recompute_keeps_2sbh_per_layer(tp, sp, per_layer):
    """Difference between 6 and 2 layers at pp = 1 (4 more checkpointed layer inputs)."""
    layout = dict(seq_len=S, gbs_seqs=B, mbs=B, tp=tp, sp=sp, recompute="full")
    deep = evaluate_one(ctx_for(gpt(layers=6)), **layout)["mem_first_activations_bytes"][0]
    shallow = evaluate_one(ctx_for(gpt(layers=2)), **layout)["mem_first_activations_bytes"][0]
    assert deep - shallow == 4 * per_layer


# --- actmem: the Hugging Face coefficients, reproduced exactly by the `hf` profile --------

# A Llama shape whose head_dim is independent of h, so q = a·d differs from h.
s, b, h, a, kv_heads, d, f = 512, 3, 768, 12, 4, 96, 2048
q, kv = a * d, kv_heads * d  # 1152, 384
LLAMA = ModelSpec(name="llama-small", num_layers=2, hidden_size=h, ffn_hidden_size=f,
                  num_attention_heads=a, num_kv_heads=kv_heads, head_dim=d, vocab_size=1000)


def test_hf_llama_sdpa_layer_matches_actmem_exactly():
    # sb(16h + 4q + 4kv + 8f) + 8sb + 4a·sb with sb = 1536:
    # 1536·(12,288 + 4,608 + 1,536 + 16,384) + 8·1536 + 48·1536
    # = 53,477,376 + 12,288 + 73,728 = 53,563,392
    dense, _ = layer_activation_bytes(*at(ctx_for(LLAMA, "hf"), seq_len=s, gbs_seqs=b, mbs=b), "none")
    sb = s * b
    assert dense[0] == sb * (16 * h + 4 * q + 4 * kv + 8 * f) + 8 * sb + 4 * a * sb == 53_563_392


def test_hf_mixtral_grouped_mm_layer_matches_actmem_exactly():
    # E = 8, k = 2, f_e = 1536, sb = 1536. Attention block: sb(8h + 4q + 4kv) + 4sb + 4a·sb
    #   per token 6,144 + 4,608 + 1,536 + 4 + 48 = 12,340
    # MoE block: sb(8h + 4k·h + 8k·f_e + 4E) + 40k·sb + 8sb (the +4E per layer is ignored)
    #   per token 6,144 + 6,144 + 24,576 + 32 + 80 + 8 = 36,984
    # total 49,324 · 1536 = 75,761,664 (observed 75,755,520 = 4sb less)
    E, k, fe = 8, 2, 1536
    mixtral = dataclasses.replace(LLAMA, moe=MoESpec(num_experts=E, num_experts_per_token=k,
                                                     expert_ffn_hidden_size=fe))
    _, moe = layer_activation_bytes(*at(ctx_for(mixtral, "hf"), seq_len=s, gbs_seqs=b, mbs=b), "none")
    sb = s * b
    attention = sb * (8 * h + 4 * q + 4 * kv) + 4 * sb + 4 * a * sb
    block = sb * (8 * h + 4 * k * h + 8 * k * fe + 4 * E) + 40 * k * sb + 8 * sb
    assert moe[0] == attention + block == 75_761_664


def test_hf_full_recompute_keeps_the_bf16_layer_input():
    # actmem: 2·sb·h per layer; 2 extra layers: 2·2·1536·768 = 4,718,592
    layout = dict(seq_len=s, gbs_seqs=b, mbs=b, recompute="full")
    deep = evaluate_one(ctx_for(dataclasses.replace(LLAMA, num_layers=4), "hf"), **layout)
    shallow = evaluate_one(ctx_for(LLAMA, "hf"), **layout)
    diff = deep["mem_first_activations_bytes"][0] - shallow["mem_first_activations_bytes"][0]
    assert diff == 2 * 2 * s * b * h == 4_718_592


# --- model states: ZeRO paper Fig. 1 and Megatron's bytes per parameter -------------------

PSI = 7.5e9  # parameters; N_d = 64, K = 12 (fp32 master 4 + Adam 8), fp16 weights and grads


@pytest.mark.parametrize("zero, expected_gb", [
    (0, 120.0),        # (2 + 2 + 12)Ψ = 16·7.5e9 = 120e9
    (1, 31.40625),     # 2Ψ + 2Ψ + 12Ψ/64 = 30e9 + 1.40625e9        (paper: 31.4 GB)
    (2, 16.640625),    # 2Ψ + (2 + 12)Ψ/64 = 15e9 + 1.640625e9       (paper: 16.6 GB)
    (3, 1.875),        # 16Ψ/64                                      (paper: 1.9 GB)
])
def test_zero_paper_figure_1(zero, expected_gb):
    ctx = ctx_for(LLAMA, "deepspeed", weight_bytes=2.0, grad_bytes=2.0, master_bytes=4.0,
                  optimizer_bytes=8.0)
    b64 = LayoutBatch.from_layouts([dataclasses.replace(
        plan_from_record(dict(gpus=64, seq_len=1024, gbs_seqs=64))[0], zero=zero)])
    states = model_state_bytes(ctx, b64, np.array([PSI]), np.array([0.0]))
    assert sum(v[0] for v in states.values()) == pytest.approx(expected_gb * 1e9, rel=1e-15)


@pytest.mark.parametrize("zero, dp, cp, bytes_per_param", [
    (0, 8, 1, 18.0),              # theoretical_memory_usage.py: 18 B/param without dist. opt.
    (1, 8, 1, 6.0 + 12.0 / 8),    # with the distributed optimizer: 6 + 12/DP
    (1, 4, 2, 6.0 + 12.0 / 8),    # ... which shards over DP × CP (zero_shards_over_cp)
])
def test_megatron_bytes_per_parameter(zero, dp, cp, bytes_per_param):
    ctx = ctx_for(LLAMA, "megatron")
    lay = plan_from_record(dict(gpus=dp * cp, cp=cp, zero=zero, seq_len=1024, gbs_seqs=dp))[0]
    states = model_state_bytes(ctx, LayoutBatch.from_layouts([lay]), np.array([1e9]), np.array([0.0]))
    assert sum(v[0] for v in states.values()) == pytest.approx(bytes_per_param * 1e9, rel=1e-15)


def test_expert_states_shard_over_the_expert_data_parallel_group():
    # dp = 8, tp = 2, ep = 4, etp = 1: expert-dp = dp·cp·tp/(ep·etp) = 16/4 = 4.
    # 1e9 expert params held per GPU before ZeRO: zero 1 -> 2 + 4 + (4 + 8)/4 = 9 B/param.
    moe = dataclasses.replace(LLAMA, moe=MoESpec(num_experts=8, num_experts_per_token=2,
                                                 expert_ffn_hidden_size=256))
    lay = plan_from_record(dict(gpus=16, tp=2, ep=4, zero=1, seq_len=1024, gbs_seqs=8))[0]
    states = model_state_bytes(ctx_for(moe), LayoutBatch.from_layouts([lay]), np.array([0.0]),
                               np.array([1e9]))
    assert sum(v[0] for v in states.values()) == pytest.approx(9e9, rel=1e-15)


# --- parameters per stage ------------------------------------------------------------------

# L = 2, h = 64, f = 128, a = 4 (d = 16), kv_heads = 2, V = 100, untied:
#   attention h·q + 2h·kv + q·h = 4096 + 4096 + 4096 = 12,288; norms 2h = 128;
#   SwiGLU 3hf = 24,576; layer = 36,992; embedding = head = V·h = 6,400; final norm 64.
TINY = ModelSpec(name="tiny", num_layers=2, hidden_size=64, ffn_hidden_size=128, num_attention_heads=4,
                 num_kv_heads=2, head_dim=16, vocab_size=100)



# megatron: bf16 weights, 2 bytes per parameter; zero 1 leaves weights unsharded.
@pytest.mark.parametrize("model, tp, pp, first, last", [
    # pp = 1, untied: the one stage holds everything: 2·36,992 + 6,400 + 64 + 6,400 = 86,848
    pytest.param(TINY, 1, 1, 86_848, 86_848),
    (TINY, 1, 2, 36_992 + 6_400, 36_992 + 64 + 6_400),                        # 43,392 / 43,456
    # tp = 2: attention and MLP halve, norms stay: 6,144 + 128 + 12,288 = 18,560 per layer;
    # embedding and head halve (vocab-parallel): 3,200
    (TINY, 2, 2, 18_560 + 3_200, 18_560 + 64 + 3_200),
    # tied embeddings: pp = 1 holds the matrix once (80,448 = 2·36,992 + 6,400 + 64);
    # pp > 1 keeps a copy on the last stage (Megatron's shared embedding)
    pytest.param(dataclasses.replace(TINY, tied_embeddings=True), 1, 1, 80_448, 80_448,),
    (dataclasses.replace(TINY, tied_embeddings=True), 1, 2, 36_992 + 6_400, 36_992 + 64 + 6_400),
])
def test_weights_per_stage(model, tp, pp, first, last):
    table = evaluate_one(ctx_for(model), tp=tp, pp=pp, seq_len=128, gbs_seqs=pp)
    assert table["mem_first_weights_bytes"][0] == 2 * first
    assert table["mem_last_weights_bytes"][0] == 2 * last


def test_llama3_8b_pp1_holds_every_parameter():
    # tp = pp = 1, zero 0: bf16 weights of all 8,030,261,248 parameters = 16,060,522,496 bytes
    # (observed 15,009,841,152: the 525,336,576-param LM head and 4,096-param final norm missing)
    from autoplan.specs.models import load_model

    table = evaluate_one(ctx_for(load_model("llama3-8b")), zero=0, seq_len=8192, gbs_seqs=1)
    stage = "first" if table["peak_stage"][0] == 0 else "last"
    assert table[f"mem_{stage}_weights_bytes"][0] == 2 * 8_030_261_248


# --- pipeline stages and in-flight micro-batches -------------------------------------------

@pytest.mark.parametrize("layers, pp, first, last", [
    (32, 1, 32, 32),
    (32, 4, 8, 8),
    (10, 4, 3, 2),   # uneven: ceil(10/4) on the first stage, floor(10/4) on the last
    (10, 5, 2, 2),
])
def test_stage_layers(layers, pp, first, last):
    split = stage_layers(dataclasses.replace(TINY, num_layers=layers), np.array([float(pp)]))
    assert (split.first[0], split.last[0]) == (first, last)


def test_stage_layers_dense_first_moe():
    # DeepSeek-V3 style: 3 dense layers first, then 7 MoE layers, pp = 4 (3, 3, 2, 2):
    # the first stage is all dense, the last all MoE.
    model = dataclasses.replace(TINY, num_layers=10, moe=MoESpec(
        num_experts=4, num_experts_per_token=2, expert_ffn_hidden_size=64, num_dense_layers=3))
    split = stage_layers(model, np.array([4.0, 1.0]))
    assert split.first_dense.tolist() == [3, 3] and split.first_moe.tolist() == [0, 7]
    assert split.last_dense.tolist() == [0, 3] and split.last_moe.tolist() == [2, 7]


def test_first_stage_activations_follow_1f1b():
    """pp = 4, 16 micro-batches, 8 layers per stage: the first stage holds 4 micro-batches of
    8 layers (32 layer-activations), the last one (8)."""
    model = dataclasses.replace(LLAMA, num_layers=32)
    ctx = ctx_for(model)
    table = evaluate_one(ctx, pp=4, seq_len=512, gbs_seqs=16)
    one_layer, _ = layer_activation_bytes(*at(ctx, pp=4, seq_len=512, gbs_seqs=16), "none")
    assert table["mem_first_activations_bytes"][0] == 32 * one_layer[0]
    assert table["mem_last_activations_bytes"][0] == 8 * one_layer[0]


# --- logits, embedding output, buffers, reserve ------------------------------------------

def test_logits_on_the_last_stage_vocab_parallel():
    # megatron: 6 bytes per token per vocab entry (bf16 logits + fp32 softmax);
    # mbs·s/cp × V/tp × 6 = 2·1024 × 100/2 × 6 = 614,400
    table = evaluate_one(ctx_for(TINY), tp=2, pp=2, mbs=2, seq_len=1024, gbs_seqs=2)
    assert table["mem_last_logits_and_loss_bytes"][0] == 2 * 1024 * 100 / 2 * 6 == 614_400
    assert table["mem_first_logits_and_loss_bytes"][0] == 0  # pp > 1: not on the first stage
    one = evaluate_one(ctx_for(TINY), tp=2, pp=1, mbs=2, seq_len=1024, gbs_seqs=2)
    assert one["mem_first_logits_and_loss_bytes"][0] == 614_400  # pp = 1: the one stage


def test_embedding_output_on_the_first_stage():
    # mbs·s/cp × h × 2 bytes / (tp under SP) = 2·1024 × 64 × 2 / 2 = 131,072
    table = evaluate_one(ctx_for(TINY), tp=2, pp=2, mbs=2, seq_len=1024, gbs_seqs=2)
    assert table["mem_first_embedding_output_bytes"][0] == 131_072
    assert table["mem_last_embedding_output_bytes"][0] == 0


def test_reserve_and_totals():
    table = evaluate_one(ctx_for(TINY), tp=2, pp=2, seq_len=1024, gbs_seqs=2)
    eff = ctx_for(TINY).corrections
    for stage in ("first", "last"):
        tracked = sum(table[f"mem_{stage}_{t}_bytes"][0] for t in MEMORY_TERMS if t != "reserve")
        # Fragmentation scales with what is allocated and freed every step, not the model states.
        transient = sum(table[f"mem_{stage}_{t}_bytes"][0] for t in ("activations", "embedding_output",
                                                                      "logits_and_loss", "communication_buffers"))
        assert 0 < transient < tracked
        reserve = eff.allocator_overhead * transient + eff.memory_reserve_bytes
        assert table[f"mem_{stage}_reserve_bytes"][0] == pytest.approx(reserve, rel=1e-12)
        assert table[f"mem_{stage}_total_bytes"][0] == pytest.approx(tracked + reserve, rel=1e-12)
    first, last = table["mem_first_total_bytes"][0], table["mem_last_total_bytes"][0]
    assert table["peak_memory_bytes"][0] == max(first, last)
    assert table["peak_stage"][0] == (0 if first >= last else 1)  # stage index pp - 1 = 1


def test_the_reserve_does_not_grow_with_the_model_states():
    # ZeRO-1 shards the optimizer states over dp = 4 (gpus 8 / tp 2): fewer state bytes, the same
    # activations, so the same reserve (the allocator's fragmentation follows the per-step churn).
    ctx = ctx_for(TINY)
    z0, z1 = (evaluate_one(ctx, gpus=8, tp=2, zero=z, seq_len=1024, gbs_seqs=8) for z in (0, 1))
    assert z1["mem_first_optimizer_states_bytes"][0] < z0["mem_first_optimizer_states_bytes"][0]
    assert z1["mem_first_reserve_bytes"][0] == z0["mem_first_reserve_bytes"][0]
    assert ctx.corrections.allocator_overhead > 0  # else the check above could not fail


def test_fits_compares_the_peak_with_usable_memory():
    table = evaluate_one(ctx_for(TINY), seq_len=1024, gbs_seqs=1)
    assert table["fits"][0] == (table["peak_memory_bytes"][0] <= GPU.usable_memory_bytes)
    assert table["peak_memory_gib"][0] == table["peak_memory_bytes"][0] / 2**30
