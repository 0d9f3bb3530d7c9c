"""Optimizer state bytes, Muon's work and offload against published figures and hand arithmetic."""

from __future__ import annotations

import dataclasses

import pytest

from autoplan.api import build_context, build_training, plan_from_record
from autoplan.cost.evaluate import evaluate
from autoplan.cost.optimizer_shapes import matrix_shapes, newton_schulz_flops, vector_params
from autoplan.cost.params import count_params
from autoplan.layout import LayoutBatch
from autoplan.specs.models import load_model

# Llama-3.2 1B cut to one layer: h 2048, q 2048 (32 heads × 64), kv 512 (8 × 64), ffn 8192,
# vocabulary 128,256, tied embeddings (one V×h matrix), RMSNorm.
ONE_LAYER = dataclasses.replace(load_model("llama3.2-1b"), num_layers=1)


def states(model, trainer: str, gpus: int = 1, **knobs) -> dict[str, float]:
    """The first stage's model-state bytes, host bytes and parameter count of one layout."""
    layout, training = plan_from_record({"gpus": gpus, "seq_len": 4096, "gbs_seqs": 8 * gpus, **knobs})
    ctx = build_context(model, build_training(gpus, 4096, 8 * gpus), trainer=trainer)
    table = evaluate(ctx, LayoutBatch.from_layouts([layout]))
    out = {name: float(table[f"mem_first_{name}_bytes"][0])
           for name in ("weights", "gradients", "master_weights", "optimizer_states")}
    out["host"] = float(table["host_memory_bytes"][0])
    out["params"] = float(count_params(model).total)
    out["reason"] = table.reasons()[0]
    return out


def test_matrices_and_vectors_add_up_to_the_parameter_count():
    pc, s, vec = count_params(ONE_LAYER), matrix_shapes(ONE_LAYER), vector_params(ONE_LAYER)
    matrices = sum(r * c * n for r, c, n in s.dense_layer)
    # attention 2048·2048 + 2·2048·512 + 2048·2048 = 10,485,760; MLP 3·2048·8192 = 50,331,648
    assert matrices == 10_485_760 + 50_331_648
    assert vec["dense"] == 2 * 2048  # the two RMSNorms of the layer
    assert matrices + vec["dense"] == pc.dense_layer


def test_8bit_adam_keeps_2_bytes_of_state_per_parameter():
    """Dettmers et al. 2022 (8-bit Optimizers via Block-wise Quantization, Sec. 1 and Table 1):
    8-bit Adam keeps 2 bytes of state per parameter against 32-bit Adam's 8. bitsandbytes adds one
    fp32 absmax per 2048-element block and state: 2·(1 + 4/2048) = 2.00390625 B."""
    eight_bit = states(ONE_LAYER, "hf", optimizer="adamw8bit")
    adam = states(ONE_LAYER, "hf")
    assert eight_bit["optimizer_states"] / eight_bit["params"] == pytest.approx(2.0, rel=0.002)
    assert adam["optimizer_states"] / adam["params"] == pytest.approx(8.0, rel=1e-12)
    assert eight_bit["master_weights"] == adam["master_weights"]  # the fp32 master weights stay


def test_adafactor_keeps_rows_and_columns_of_each_matrix():
    """Shazeer & Stern 2018 (Adafactor, Sec. 3, Alg. 4 with β1 = 0): an n×m matrix keeps n + m
    second-moment values instead of n·m, a vector all of its own. For the one-layer model, in
    fp32: q 2048 + 2048, k and v 2·(2048 + 512), o 2048 + 2048, gate and up 2·(2048 + 8192),
    down 8192 + 2048, the tied embedding 128256 + 2048, the two layer norms and the final norm
    3·2048: 180,480 values = 721,920 bytes (against 8 B per parameter, ~2 GB, under Adam)."""
    got = states(ONE_LAYER, "deepspeed", optimizer="adafactor", zero=1)
    assert got["optimizer_states"] == pytest.approx(721_920.0, rel=1e-9)


def test_muon_keeps_one_momentum_on_hidden_matrices_and_adam_elsewhere():
    """Jordan et al. 2024 / Moonlight (Liu et al. 2025) Sec. 2: Muon for the 2-D hidden matrices
    (4 B momentum), AdamW (8 B) for the embedding and the norms."""
    got = states(ONE_LAYER, "megatron", optimizer="muon")
    hidden = 10_485_760 + 50_331_648
    rest = got["params"] - hidden  # embedding 128256·2048 + 3·2048 norm weights
    assert rest == 128_256 * 2048 + 3 * 2048
    assert got["optimizer_states"] == pytest.approx(4.0 * hidden + 8.0 * rest, rel=1e-9)


def test_newton_schulz_flops_of_one_matrix():
    """One quintic step on X (m×n, m <= n): X·Xᵀ costs 2·m·n·m, A·A 2·m³, B·X 2·m·m·n; five
    steps on a 8192×28672 matrix (Llama-3 70B's gate projection): 5·(4·8192²·28672 + 2·8192³)
    = 5·(7.6965e12 + 1.0995e12) = 4.398e13 FLOPs; the transposed shape costs the same."""
    flops = newton_schulz_flops(((8192, 28672, 1),), 5)
    assert flops == pytest.approx(4.398e13, rel=1e-3)
    assert newton_schulz_flops(((28672, 8192, 1),), 5) == flops


def test_zero_offload_keeps_2_of_16_bytes_per_parameter_on_the_gpu():
    """Ren et al. 2021 (ZeRO-Offload, Sec. 4.1, Fig. 2): mixed-precision Adam needs 16 bytes per
    parameter (fp16 weights 2, fp16 gradients 2, fp32 weights, momentum, variance 12); with the
    optimizer offloaded the GPU keeps its fp16 weights only (2 bytes, 8× less) and the CPU the
    fp32 weights, momentum and variance (12) plus the gradient. DeepSpeed keeps that gradient in
    fp32 on the host (4, where the paper's figure counts the fp16 copy, 2): 16 bytes."""
    on_gpu = ("weights", "gradients", "master_weights", "optimizer_states")
    plain = states(ONE_LAYER, "deepspeed", zero=2)
    offloaded = states(ONE_LAYER, "deepspeed", zero=2, offload="optimizer")
    assert sum(plain[k] for k in on_gpu) / plain["params"] == pytest.approx(16.0, rel=1e-12)
    assert sum(offloaded[k] for k in on_gpu) / offloaded["params"] == pytest.approx(2.0, rel=1e-12)
    assert offloaded["host"] / offloaded["params"] == pytest.approx(12.0 + 4.0, rel=1e-12)
    assert plain["host"] == 0.0


def test_offloaded_states_that_exceed_host_memory_do_not_fit():
    """Llama-3.1 405B on 8 H100s under ZeRO-3 with optimizer and parameter offload: per GPU
    405.9e9/8 parameters × (2 weights + 4 master + 8 Adam + 4 fp32 gradient) ≈ 913 GB of host
    memory against the 256 GB per GPU of a DGX H100 (2 TB / 8)."""
    got = states(load_model("405b"), "deepspeed", gpus=8, zero=3, offload="params", recompute="full")
    assert got["host"] == pytest.approx(got["params"] / 8 * 18.0, rel=1e-9)
    assert got["reason"] == "host_out_of_memory"


def _setup_states(gpus: int, zero: int, **setup) -> dict[str, float]:
    """``states`` of llama3.2-1b (one layer) under Megatron with TrainingSpec settings ``setup``."""
    layout, _ = plan_from_record({"gpus": gpus, "seq_len": 4096, "gbs_seqs": 8 * gpus, "zero": zero})
    training = dataclasses.replace(build_training(gpus, 4096, 8 * gpus), **setup)
    table = evaluate(build_context(ONE_LAYER, training, trainer="megatron"), LayoutBatch.from_layouts([layout]))
    return {name: float(table[f"mem_first_{name}_bytes"][0]) for name in ("master_weights", "optimizer_states")}


@pytest.mark.parametrize("setup, master, moments", [
    ({}, 4, 8), ({"optimizer_state_dtype": "bf16"}, 4, 4), ({"master_weights": "remainders"}, 2, 8),
    ({"optimizer_state_dtype": "bf16", "master_weights": "none"}, 0, 4),
    ({"optimizer_state_dtype": "fp8", "master_weights": "fp16"}, 2, 2)])
def test_stored_dtypes_set_master_and_moment_bytes_per_sharded_parameter(setup, master, moments):
    """Apex DistributedFusedAdam with dtype bf16 (Nemotron-4 340B's NeMo 1 recipe) keeps the
    moments in bf16 and no master copy; Megatron's precision-aware optimizer keeps int16
    remainders and the moments in --exp-avg-dtype. Per parameter over the ZeRO-1 group of 4."""
    got = _setup_states(4, 1, **setup)
    params = count_params(ONE_LAYER).total
    assert got["master_weights"] == pytest.approx(master * params / 4, rel=1e-12)
    assert got["optimizer_states"] == pytest.approx(moments * params / 4, rel=1e-12)
