"""What the probe times: the model's shapes on CUDA, the shipped tables' shapes without one."""

from __future__ import annotations

from autoplan.probe.plan import cpu_plan, cuda_plan
from autoplan.specs.models import load_model


def test_a_models_shapes_are_its_hidden_and_ffn_split_over_tp():
    # Llama 3 8B (model_db, its config.json): hidden 4096, intermediate 14336, 8192 tokens
    plan = cuda_plan(quick=False, has_fp8=True, model=load_model("llama3-8b"))
    ups = {(g.tp, g.n, g.k) for g in plan.gemms if g.note == "up"}
    downs = {(g.tp, g.n, g.k) for g in plan.gemms if g.note == "down"}
    assert ups == {(tp, 14336 // tp, 4096) for tp in (1, 2, 4, 8)}
    assert downs == {(tp, 4096, 14336 // tp) for tp in (1, 2, 4, 8)}
    assert plan.attention_seqs == (1024, 2048, 4096, 8192)
    assert plan.fp8


def test_without_a_model_the_shapes_are_the_shipped_tables():
    # benchmarks/gpu_kernels.py: h 1024-8192, ffn 3.5·h, tp 1-8, 1K/4K/16K tokens, 6 lengths
    plan = cuda_plan(quick=False, has_fp8=False)
    assert {g.h for g in plan.gemms} == {1024, 2048, 4096, 8192}
    assert {g.tokens for g in plan.gemms} == {1024, 4096, 16384}
    assert len(plan.gemms) == 4 * 4 * 3 * 2
    assert plan.attention_seqs == (1024, 2048, 4096, 8192, 16384, 32768)
    quick = cuda_plan(quick=True, has_fp8=False)
    assert set(quick.gemms) < set(plan.gemms) and set(quick.attention_seqs) < set(plan.attention_seqs)


def test_a_cpu_plan_is_tiny():
    plan = cpu_plan(quick=True)
    assert max(2.0 * g.tokens * g.n * g.k for g in plan.gemms) < 1e8  # FLOPs of the largest GEMM
    assert max(plan.collective_bytes) <= 4 * 2**20 and plan.attention_backends == ("sdpa",)
