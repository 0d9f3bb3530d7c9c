"""Exact parameter counts of a ModelSpec, split the way parallelism shards them.

Sources: the Hugging Face ``transformers`` modeling files (``LlamaDecoderLayer``,
``MixtralSparseMoeBlock``, ``Qwen3MoeSparseMoeBlock``, ``DeepseekV2``/``DeepseekV3MLA`` and ``MoE``,
``Gemma2DecoderLayer``, ``Olmo2Attention``, ``Llama4TextMoe``, ``GPT2Block``) define which weights exist; counts are products of their shapes. Checked against
the published totals (Llama-3-8B 8,030,261,248; Mixtral-8x7B 46,702,792,704 total and
12,879,925,248 active) in ``tests/golden/param_counts.yaml``, and real gemma2, phi3, olmo2, llama4 and
deepseek_v2 config.json files against their published totals in ``tests/golden/hf_family_counts.yaml``.

Convention: the MoE router counts as active. DeepSeek-V3's multi-token-prediction (MTP) modules
are not part of ``total`` / ``active`` (the published 671B / 37B leave them out); their
parameters are ``mtp_per_depth`` per depth (DeepSeek-V3 report Sec. 2.2: one transformer block of
the model's last-layer kind, the projection M ∈ R^{h×2h} and the RMSNorms of the hidden state and
the embedding, plus the HF checkpoint's ``shared_head.norm``; embedding and output head shared
with the main model, so not counted again).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from autoplan.specs.model import BIASED_NORMS, NORMS_PER_LAYER, ModelSpec


@dataclass(frozen=True)
class ParamCounts:
    """Parameters by how they are sharded. ``*_per_layer`` are for one layer of that kind."""

    attention_per_layer: int  # q/k/v/o (or MLA projections) with biases: sharded by TP
    norm_per_layer: int  # layer norms (incl. QK-norm, MLA latent norms): replicated over TP
    dense_mlp_per_layer: int  # MLP of a dense layer: sharded by TP
    expert_per_layer: int  # all routed experts of one MoE layer: sharded by EP x ETP
    shared_expert_per_layer: int  # always-on experts of one MoE layer: sharded by TP
    router_per_layer: int  # gate weight (+ bias): replicated
    num_dense_layers: int
    num_moe_layers: int
    num_experts: int
    num_experts_per_token: int
    embedding: int  # token (+ learned position) embedding, first pipeline stage
    final_norm: int  # last stage
    lm_head: int  # last stage; 0 when tied to the embedding
    lm_head_matmul: int  # V x h: the head's matmul weights, counted for FLOPs even when tied
    num_mtp_layers: int = 0  # multi-token-prediction depths (ModelSpec.num_mtp_layers)
    mtp_projection_per_depth: int = 0  # 2h x h projection + 3 norms of h of one MTP depth

    @property
    def dense_layer(self) -> int:
        return self.attention_per_layer + self.norm_per_layer + self.dense_mlp_per_layer

    @property
    def moe_layer(self) -> int:
        return (self.attention_per_layer + self.norm_per_layer + self.expert_per_layer
                + self.shared_expert_per_layer + self.router_per_layer)

    @property
    def moe_layer_active(self) -> int:
        routed_active = self.expert_per_layer * self.num_experts_per_token // max(self.num_experts, 1)
        return (self.attention_per_layer + self.norm_per_layer + routed_active
                + self.shared_expert_per_layer + self.router_per_layer)

    @property
    def mtp_block_is_moe(self) -> bool:
        """DeepSeek-V3's MTP block is a MoE layer like the model's last layers (HF checkpoint
        ``model.layers.61.mlp.experts``); a dense model's is dense."""
        return self.num_moe_layers > 0

    @property
    def mtp_per_depth(self) -> int:
        """Parameters of one MTP depth: its transformer block and its projection and norms."""
        block = self.moe_layer if self.mtp_block_is_moe else self.dense_layer
        return block + self.mtp_projection_per_depth

    @property
    def mtp_active_per_depth(self) -> int:
        """Active parameters of one MTP depth (top-k of the routed experts)."""
        block = self.moe_layer_active if self.mtp_block_is_moe else self.dense_layer
        return block + self.mtp_projection_per_depth

    @property
    def total(self) -> int:
        return (self.num_dense_layers * self.dense_layer + self.num_moe_layers * self.moe_layer
                + self.embedding + self.final_norm + self.lm_head)

    @property
    def active(self) -> int:
        return (self.num_dense_layers * self.dense_layer
                + self.num_moe_layers * self.moe_layer_active
                + self.embedding + self.final_norm + self.lm_head)


def _mlp_params(model: ModelSpec, hidden: int, ffn: int) -> int:
    """SwiGLU, GeGLU: gate, up, down = 3·h·f; GELU, squared ReLU: 2·h·f (+ biases f + h when linear_bias)."""
    if model.gated_mlp:
        return 3 * hidden * ffn + (2 * ffn + hidden if model.linear_bias else 0)
    return 2 * hidden * ffn + (ffn + hidden if model.linear_bias else 0)


def _attention_params(model: ModelSpec) -> int:
    """q, k, v, o projections; MLA: q_a/q_b (or q), kv_a (latent + rope key), kv_b, o."""
    h, a = model.hidden_size, model.num_attention_heads
    if model.mla is not None:
        m = model.mla
        qk_head = m.qk_nope_head_dim + m.qk_rope_head_dim
        q = (h * m.q_lora_rank + m.q_lora_rank * a * qk_head) if m.q_lora_rank else h * a * qk_head
        kv = h * (m.kv_lora_rank + m.qk_rope_head_dim) + m.kv_lora_rank * a * (m.qk_nope_head_dim + m.v_head_dim)
        return q + kv + a * m.v_head_dim * h
    q, kv = model.q_size, model.kv_size
    weights = h * q + 2 * h * kv + q * h
    if model.linear_bias:
        return weights + q + 2 * kv + h
    if model.qkv_bias:
        return weights + q + 2 * kv
    return weights


def _norm_params(model: ModelSpec) -> int:
    """The layer's norms (h each; LayerNorm and LayerNorm1p have a bias too): 2, or 4 for Gemma 2's
    sandwich (``NORMS_PER_LAYER``); + QK-norm: one head_dim each (Qwen3's per-head q_norm/k_norm) or
    the whole projections q_size + kv_size (OLMo 2's ``Olmo2Attention``); + MLA latent norms."""
    per_norm = 2 * model.hidden_size if model.norm in BIASED_NORMS else model.hidden_size
    extra = 0
    if model.qk_norm:
        extra = 2 * model.head_dim if model.qk_norm_per_head else model.q_size + model.kv_size
    if model.mla is not None:
        extra += model.mla.q_lora_rank + model.mla.kv_lora_rank
    return NORMS_PER_LAYER[model.norm_placement] * per_norm + extra


@lru_cache(maxsize=256)
def count_params(model: ModelSpec) -> ParamCounts:
    """Count every weight of ``model`` by component (element counts)."""
    h, v = model.hidden_size, model.vocab_size
    moe = model.moe
    embedding = v * h + (model.max_position_embeddings * h if model.position_embedding == "learned" else 0)
    final_norm = 2 * h if model.norm in BIASED_NORMS else h
    return ParamCounts(
        attention_per_layer=_attention_params(model),
        norm_per_layer=_norm_params(model),
        dense_mlp_per_layer=_mlp_params(model, h, model.ffn_hidden_size),
        expert_per_layer=0 if moe is None else moe.num_experts * _mlp_params(model, h, moe.expert_ffn_hidden_size),
        shared_expert_per_layer=0 if moe is None else moe.num_shared_experts * _mlp_params(
            model, h, moe.shared_expert_ffn_hidden_size),
        router_per_layer=0 if moe is None else h * moe.num_experts + (moe.num_experts if moe.router_bias else 0),
        num_dense_layers=model.num_layers - model.num_moe_layers,
        num_moe_layers=model.num_moe_layers,
        num_experts=0 if moe is None else moe.num_experts,
        num_experts_per_token=0 if moe is None else moe.num_experts_per_token,
        embedding=embedding,
        final_norm=final_norm,
        lm_head=0 if model.tied_embeddings else v * h,
        lm_head_matmul=v * h,
        num_mtp_layers=model.num_mtp_layers,
        mtp_projection_per_depth=2 * h * h + 3 * final_norm if model.num_mtp_layers else 0,
    )
