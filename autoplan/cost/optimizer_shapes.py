"""The weight matrices of a model by shape, for the optimizers whose state or work depends on it.

Adafactor factors the second moment of each matrix into a row and a column vector, and Muon
orthogonalises each 2-D hidden matrix with Newton–Schulz iterations: both need the shapes, not
only the parameter counts of ``autoplan.cost.params``. The shapes are those of the Hugging Face
modeling files that ``params`` counts (q/k/v/o or MLA's low-rank projections, gate/up/down or
fc1/fc2, the router, each expert); vectors (norms, biases) are left out here and counted as the
difference to ``params``. Checked in tests/unit/cost/test_optimizer.py: the matrices of a layer
add up to ``params``' count of it less its vectors.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from autoplan.cost.params import count_params
from autoplan.specs.model import ModelSpec

Shape = tuple[int, int, int]  # (rows, columns, how many)


@dataclass(frozen=True)
class MatrixShapes:
    """The 2-D weights of one dense layer, the non-expert part of one MoE layer, the routed
    experts of one MoE layer, and the embedding/head (``ends``: V x h each)."""

    dense_layer: tuple[Shape, ...]
    moe_layer_shared: tuple[Shape, ...]
    experts: tuple[Shape, ...]
    ends: tuple[Shape, ...]


def _mlp(model: ModelSpec, ffn: int, count: int) -> tuple[Shape, ...]:
    h = model.hidden_size
    if model.gated_mlp:
        return ((h, ffn, 2 * count), (ffn, h, count))
    return ((h, ffn, count), (ffn, h, count))


def _attention(model: ModelSpec) -> tuple[Shape, ...]:
    h, a = model.hidden_size, model.num_attention_heads
    if model.mla is not None:
        m = model.mla
        qk_head = m.qk_nope_head_dim + m.qk_rope_head_dim
        q = (((h, m.q_lora_rank, 1), (m.q_lora_rank, a * qk_head, 1)) if m.q_lora_rank
             else ((h, a * qk_head, 1),))
        return q + ((h, m.kv_lora_rank + m.qk_rope_head_dim, 1),
                    (m.kv_lora_rank, a * (m.qk_nope_head_dim + m.v_head_dim), 1), (a * m.v_head_dim, h, 1))
    return ((h, model.q_size, 1), (h, model.kv_size, 2), (model.q_size, h, 1))


@lru_cache(maxsize=256)
def matrix_shapes(model: ModelSpec) -> MatrixShapes:
    """Every weight matrix of ``model`` by layer kind (see ``MatrixShapes``)."""
    attention, moe = _attention(model), model.moe
    shared: tuple[Shape, ...] = attention
    experts: tuple[Shape, ...] = ()
    if moe is not None:
        shared = attention + ((model.hidden_size, moe.num_experts, 1),)
        if moe.num_shared_experts:
            shared = shared + _mlp(model, moe.shared_expert_ffn_hidden_size, moe.num_shared_experts)
        experts = _mlp(model, moe.expert_ffn_hidden_size, moe.num_experts)
    heads = 1 if model.tied_embeddings else 2
    return MatrixShapes(dense_layer=attention + _mlp(model, model.ffn_hidden_size, 1),
                        moe_layer_shared=shared, experts=experts,
                        ends=((model.vocab_size, model.hidden_size, heads),))


def elements(shapes: tuple[Shape, ...]) -> float:
    """Σ rows·columns·count: the parameters of the matrices."""
    return float(sum(r * c * n for r, c, n in shapes))


def factored_elements(shapes: tuple[Shape, ...]) -> float:
    """Σ (rows + columns)·count: Adafactor's row and column statistics of the matrices."""
    return float(sum((r + c) * n for r, c, n in shapes))


def newton_schulz_flops(shapes: tuple[Shape, ...], iterations: int) -> float:
    """FLOPs of ``iterations`` quintic Newton–Schulz steps on each matrix.

    One step on X (m x n, m = min(rows, cols), transposed so that m <= n; Jordan et al. 2024,
    "Muon: An optimizer for hidden layers in neural networks", ``zeropower_via_newtonschulz5``;
    Liu et al. 2025, Moonlight, arXiv:2502.16982 Algorithm 1): A = X·Xᵀ (2·m²·n), B = b·A + c·A·A
    (2·m³), X = a·X + B·X (2·m²·n): 4·m²·n + 2·m³ FLOPs (the scalar terms are negligible).
    """
    total = 0.0
    for r, c, n in shapes:
        m, k = min(r, c), max(r, c)
        total += n * (4.0 * m * m * k + 2.0 * m ** 3)
    return iterations * total


@lru_cache(maxsize=256)
def vector_params(model: ModelSpec) -> dict[str, float]:
    """Parameters of one dense / MoE layer that are not in a matrix (norms, biases)."""
    pc, s = count_params(model), matrix_shapes(model)
    dense = pc.attention_per_layer + pc.norm_per_layer + pc.dense_mlp_per_layer - elements(s.dense_layer)
    moe = (pc.attention_per_layer + pc.norm_per_layer + pc.router_per_layer + pc.shared_expert_per_layer
           - elements(s.moe_layer_shared))
    experts = pc.expert_per_layer - elements(s.experts)
    return {"dense": float(dense), "moe": float(moe), "experts": float(experts)}
