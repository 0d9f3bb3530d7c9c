"""The tied-embedding gradient all-reduce between the first and last pipeline stage, the
exposed time of a pipeline send (blocking sends against asynchronous ones) and the gradient
accumulation after each micro-batch.

H100 SXM preset with link efficiencies 1: NVLink 450 GB/s in domains of 8, NIC 50 GB/s per GPU,
latencies 3 µs (NVLink) and 10 µs (NIC). The model has V = 100, h = 256.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from autoplan.cost.context import CostContext
from autoplan.cost.tied_embedding import tied_embedding_allreduce_s
from autoplan.cost.comm import pipeline_transfer_s
from autoplan.cost.time import grad_accumulation_s
from autoplan.layout import CODE_FIELDS, INT_FIELDS, LayoutBatch
from autoplan.profiles import load_profile
from autoplan.profiles.parameter_files import load_defaults
from autoplan.specs.hardware import load_gpu, make_cluster
from autoplan.specs.model import ModelSpec
from autoplan.specs.training import TrainingSpec

NVLINK, NIC = 450e9, 50e9
ALPHA_UP, ALPHA_OUT = 3e-6, 10e-6
MODEL = ModelSpec(name="m", num_layers=4, hidden_size=256, ffn_hidden_size=512, num_attention_heads=4,
                  num_kv_heads=4, head_dim=64, vocab_size=100, tied_embeddings=True)


def ctx_for(trainer: str = "megatron", tied: bool = True, pp_overlap: float = 0.5) -> CostContext:
    model = dataclasses.replace(MODEL, tied_embeddings=tied)
    return CostContext(model=model, training=TrainingSpec(make_cluster(load_gpu("h100-sxm"), 64), 1024, 64),
                       profile=load_profile(trainer),
                       parameters=load_defaults().with_values(
                           {"scale_up_efficiency": 1.0, "scale_out_efficiency": 1.0, "pp_overlap": pp_overlap}))


def batch(pp: list[float], tp: list[float] | None = None) -> LayoutBatch:
    n = len(pp)
    arrays = {name: np.ones(n) for name in INT_FIELDS}
    arrays.update({name: np.zeros(n) for name in (*CODE_FIELDS, "sp")})
    arrays["pp"], arrays["tp"] = np.array(pp, float), np.array(tp or [1.0] * n, float)
    return LayoutBatch(arrays)


def test_hand_computed_across_nodes_and_inside_one():
    ctx = ctx_for()  # megatron: fp32 main_grad, grad_reduce_bytes 4
    b = batch([2.0, 2.0], [1.0, 2.0])
    # stride 8 (pipeline neighbours on different nodes): V·h/tp·4 B over one NIC + 2 NIC latencies
    t = tied_embedding_allreduce_s(ctx, b, np.array([8.0, 8.0]))
    assert t[0] == pytest.approx(100 * 256 * 4 / NIC + 2 * ALPHA_OUT)
    assert t[1] == pytest.approx(100 * 256 / 2 * 4 / NIC + 2 * ALPHA_OUT)  # vocab-parallel over tp 2
    inside = tied_embedding_allreduce_s(ctx, b, np.array([1.0, 1.0]))  # pp 2 at stride 1: one node
    assert inside[0] == pytest.approx(100 * 256 * 4 / NVLINK + 2 * ALPHA_UP)


def test_only_with_a_pipeline_and_tied_weights():
    b = batch([1.0, 2.0, 4.0])
    stride = np.full(3, 8.0)
    tied = tied_embedding_allreduce_s(ctx_for(), b, stride)
    untied = tied_embedding_allreduce_s(ctx_for(tied=False), b, stride)
    assert tied[0] == 0.0 and np.all(tied[1:] > 0.0)
    assert np.all(untied == 0.0)


def test_never_negative_and_across_nodes_never_faster():
    rng = np.random.default_rng(1)
    pp = rng.choice([1.0, 2.0, 4.0, 8.0], size=50)
    tp = rng.choice([1.0, 2.0, 4.0, 8.0], size=50)
    b = batch(list(pp), list(tp))
    ctx = ctx_for()
    near = tied_embedding_allreduce_s(ctx, b, np.ones(50))
    far = tied_embedding_allreduce_s(ctx, b, np.full(50, 16.0))
    assert np.all(near >= 0.0) and np.all(far >= near)


def test_blocking_pipeline_send_hides_nothing_and_waits_for_its_metadata():
    num_bytes = np.array([1e6])
    stride, size = np.array([8.0]), np.array([2.0])
    megatron = pipeline_transfer_s(ctx_for("megatron", pp_overlap=0.5), stride, size, num_bytes)
    nanotron = pipeline_transfer_s(ctx_for("nanotron", pp_overlap=0.5), stride, size, num_bytes)
    # Megatron: half of (1 MB / 50 GB/s + 10 µs) hidden; nanotron: all of it exposed + 2 metadata latencies
    assert megatron[0] == pytest.approx(0.5 * (1e6 / NIC + ALPHA_OUT))
    assert nanotron[0] == pytest.approx(1e6 / NIC + ALPHA_OUT + 2 * ALPHA_OUT)


def test_gradient_accumulation_is_memory_bound_and_only_where_the_trainer_states_it():
    params = np.array([1e9, 2e9])
    # nanotron: 10 B per parameter (read bf16 2, read and write fp32 4 + 4) at HBM 3.35 TB/s × 0.8
    ctx = ctx_for("nanotron")
    b = batch([1.0, 4.0])
    hbm = 3.35e12 * ctx.efficiency.hbm_efficiency
    assert grad_accumulation_s(ctx, b, params) == pytest.approx(params * 10.0 / hbm)
    # Megatron accumulates inside the weight-gradient GEMM: nothing extra
    assert np.all(grad_accumulation_s(ctx_for("megatron"), b, params) == 0.0)


def test_deepspeed_accumulates_in_fp32_only_on_its_bf16_pipeline_path():
    """BF16_Optimizer's update_hp_grads after each backward: pp > 1 and ZeRO <= 1 only."""
    ctx = ctx_for("deepspeed")
    b = batch([1.0, 4.0, 4.0])
    b.zero = np.array([1.0, 1.0, 3.0])
    hbm = 3.35e12 * ctx.efficiency.hbm_efficiency
    t = grad_accumulation_s(ctx, b, np.full(3, 1e9))
    assert t[0] == 0.0 and t[2] == 0.0
    # 18 B per parameter: the .to(fp32) copy (read 2 + write 4), then add_ (read 4 + 4, write 4)
    assert t[1] == pytest.approx(1e9 * 18.0 / hbm)
