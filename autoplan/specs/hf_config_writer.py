"""Write a :class:`ModelSpec` as the Hugging Face ``config.json`` mapping that
:func:`autoplan.specs.hf_config.model_from_hf_config` reads back (the exporters' HF configs and
the round-trip tests); the field names are that module's, per ``model_type``."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from autoplan.errors import SpecError, shown
from autoplan.specs import hf_settings
from autoplan.specs.hf_config import HF_KEYS, model_from_hf_config
from autoplan.specs.model import MLASpec, ModelSpec, MoESpec

def model_to_hf_config(spec: ModelSpec) -> dict[str, Any]:
    """The HF ``config.json`` mapping (plain JSON/YAML values, autoplan keys included) that
    :func:`model_from_hf_config` reads back as ``spec``.

    Raises SpecError naming the fields when ``spec`` has one its ``model_type`` cannot express
    (e.g. a Llama with ``qk_norm``, a Mixtral whose experts differ in width from its MLP).
    """
    config = {"model_type": spec.model_type, **_WRITERS[spec.model_type](spec), **hf_settings.write_settings(spec),
              "name": spec.name, "aliases": list(spec.aliases), "sources": list(spec.sources),
              "seq_len": spec.seq_len}
    back = model_from_hf_config(config, f"model '{spec.name}'", strict=True)
    differ = [f.name for f in dataclasses.fields(ModelSpec) if getattr(back, f.name) != getattr(spec, f.name)]
    if differ:
        values = ", ".join(f"{k}={shown(getattr(spec, k))}" for k in differ)
        raise SpecError(f"model '{spec.name}'", f"a {spec.model_type} config.json cannot express {values}")
    return config


def _decoder_config(m: ModelSpec) -> dict[str, Any]:
    return {"num_hidden_layers": m.num_layers, "hidden_size": m.hidden_size,
            "intermediate_size": m.ffn_hidden_size, "num_attention_heads": m.num_attention_heads,
            "num_key_value_heads": m.num_kv_heads, "head_dim": m.head_dim, "vocab_size": m.vocab_size,
            "tie_word_embeddings": m.tied_embeddings, "max_position_embeddings": m.max_position_embeddings}


def _moe_config(m: ModelSpec, experts_key: str) -> dict[str, Any]:
    moe = m.moe or MoESpec(0, 0, 0)
    return {experts_key: moe.num_experts, "num_experts_per_tok": moe.num_experts_per_token,
            "moe_intermediate_size": moe.expert_ffn_hidden_size}


def _window_config(m: ModelSpec, key: str = "sliding_window") -> dict[str, Any]:
    return {key: m.attention_window or None}


def _gemma2_config(m: ModelSpec) -> dict[str, Any]:
    every = m.full_attention_every
    types = ["full_attention" if every and (i + 1) % every == 0 else "sliding_attention" for i in range(m.num_layers)]
    return {**_decoder_config(m), "attention_bias": m.qkv_bias, **_window_config(m), "layer_types": types,
            **dict(m.other_features)}


def _llama4_config(m: ModelSpec) -> dict[str, Any]:
    moe = m.moe or MoESpec(0, 0, 0)
    every = m.full_attention_every or 4
    return {**_decoder_config(m), "intermediate_size": moe.expert_ffn_hidden_size,
            "intermediate_size_mlp": m.ffn_hidden_size, "attention_bias": m.qkv_bias,
            "num_local_experts": moe.num_experts, "num_experts_per_tok": moe.num_experts_per_token,
            "moe_layers": list(range(moe.num_dense_layers, m.num_layers)), "no_rope_layer_interval": every,
            "attention_chunk_size": m.attention_window or None, **dict(m.other_features)}


def _deepseek_v3_config(m: ModelSpec) -> dict[str, Any]:
    mla, moe = m.mla or MLASpec(0, 0, 0, 0, 0), m.moe or MoESpec(0, 0, 0)
    # transformers' head_dim is the rope part; ModelSpec's is the q·k width (see _deepseek_v3).
    v2_method = "group_limited_greedy" if moe.num_expert_groups > 1 else "greedy"
    return {**_decoder_config(m), "head_dim": mla.qk_rope_head_dim, **_moe_config(m, "n_routed_experts"),
            "n_shared_experts": moe.num_shared_experts, "first_k_dense_replace": moe.num_dense_layers,
            "topk_method": v2_method if m.model_type == "deepseek_v2" else "noaux_tc" if moe.router_bias else "greedy",
            "q_lora_rank": mla.q_lora_rank or None, "kv_lora_rank": mla.kv_lora_rank,
            "qk_rope_head_dim": mla.qk_rope_head_dim, "qk_nope_head_dim": mla.qk_nope_head_dim,
            "v_head_dim": mla.v_head_dim}


_WRITERS: dict[str, Callable[[ModelSpec], dict[str, Any]]] = {
    "llama": lambda m: {**_decoder_config(m), "attention_bias": m.qkv_bias or m.linear_bias,
                        "mlp_bias": m.linear_bias},
    "mistral": lambda m: {**_decoder_config(m), **_window_config(m)},
    "mixtral": lambda m: {**_decoder_config(m), **_window_config(m), "num_local_experts": (m.moe or MoESpec(0, 0, 0)).num_experts,
                          "num_experts_per_tok": (m.moe or MoESpec(0, 0, 0)).num_experts_per_token},
    "qwen2": _decoder_config,
    "qwen3": lambda m: {**_decoder_config(m), "attention_bias": m.qkv_bias},
    "qwen3_moe": lambda m: {**_decoder_config(m), "attention_bias": m.qkv_bias, **_moe_config(m, "num_experts"),
                            "decoder_sparse_step": 1,
                            "mlp_only_layers": list(range(m.moe.num_dense_layers if m.moe else 0))},
    "deepseek_v2": _deepseek_v3_config,
    "deepseek_v3": _deepseek_v3_config,
    "gemma2": _gemma2_config,
    "phi3": lambda m: {**_decoder_config(m), **_window_config(m), "partial_rotary_factor": m.rotary_percent},
    "olmo2": lambda m: {**_decoder_config(m), "attention_bias": m.qkv_bias},
    "llama4_text": _llama4_config,
    "nemotron": lambda m: {**_decoder_config(m), "attention_bias": m.qkv_bias or m.linear_bias,
                           "mlp_bias": m.linear_bias, "hidden_act": "relu2", "partial_rotary_factor": m.rotary_percent},
    "gpt2": lambda m: {"n_layer": m.num_layers, "n_embd": m.hidden_size, "n_head": m.num_attention_heads,
                       "n_inner": m.ffn_hidden_size, "n_positions": m.max_position_embeddings,
                       "vocab_size": m.vocab_size, "tie_word_embeddings": m.tied_embeddings},
}
assert set(_WRITERS) == set(HF_KEYS)
