"""Convert a Hugging Face ``config.json`` mapping into a :class:`ModelSpec`.

Field names and defaults follow the ``transformers`` configuration classes
(``src/transformers/models/<type>/configuration_<type>.py``) and the modeling files that decide
which weights exist (``modeling_<type>.py``):

============  =================================================================================
model_type    what differs from a Llama decoder
============  =================================================================================
llama         ``attention_bias`` (q/k/v/o biases), ``mlp_bias``
mistral       same weights as Llama without biases; ``sliding_window`` (null: none) on every
              layer (ModelSpec.attention_window, costed in autoplan.cost.flops)
mixtral       every MLP is ``num_local_experts`` experts of ``intermediate_size``, top
              ``num_experts_per_tok``, router without bias (``MixtralSparseMoeBlock``);
              ``sliding_window`` as mistral
phi3          Llama's weights, q/k/v fused in ``qkv_proj`` and gate/up in ``gate_up_proj``
              (same counts, ``Phi3Attention``/``Phi3MLP``), ``sliding_window`` on every layer
gemma2        GeGLU MLP (``hidden_activation: gelu_pytorch_tanh``), 4 RMSNorms per layer
              (``Gemma2DecoderLayer``), ``head_dim`` default 256 independent of hidden/heads, tied
              embeddings by default, ``sliding_window`` (4096) on layers 0, 2, 4... (``layer_types``);
              soft-capping and ``query_pre_attn_scalar`` kept as ModelSpec.other_features
olmo2         norms after attention and MLP only, q/k RMSNorms over the whole projections
              (``Olmo2DecoderLayer``, ``Olmo2Attention``)
llama4_text   (or ``llama4`` with ``text_config``) see :mod:`autoplan.specs.hf_llama4`: MoE with a
              shared expert, dense layers of ``intermediate_size_mlp``, chunked attention
deepseek_v2   as deepseek_v3 with a softmax router and no expert score bias; ``q_lora_rank: null``
              (V2-Lite) is a plain q_proj
qwen2         q/k/v projections always have a bias (``Qwen2Attention``); ``use_sliding_window:
              true`` (qwen2, qwen3, qwen3_moe) is refused
qwen3         per-head RMSNorm on q and k (``q_norm``/``k_norm``); ``head_dim`` defaults to 128
qwen3_moe     as qwen3, experts of ``moe_intermediate_size``; layers in ``mlp_only_layers`` or
              with ``(i + 1) % decoder_sparse_step != 0`` are dense (``Qwen3MoeDecoderLayer``)
deepseek_v3   MLA attention (``q_lora_rank``, ``kv_lora_rank``, ``qk_*_head_dim``,
              ``v_head_dim``), ``first_k_dense_replace`` dense layers then MoE layers with
              ``n_routed_experts`` + ``n_shared_experts`` experts of ``moe_intermediate_size``;
              the router's ``e_score_correction_bias`` exists when ``topk_method`` is
              ``noaux_tc`` (or absent, as in transformers' ``DeepseekV3TopkRouter``)
nemotron      squared-ReLU MLP of two matrices (``hidden_act: relu2``, ``NemotronMLP``), LayerNorm with
              a zero-centred gain and a bias (``NemotronLayerNorm1P``), RoPE on
              ``partial_rotary_factor`` of each head (default 0.5), ``attention_bias``/``mlp_bias``
gpt2          ``n_layer``, ``n_embd``, ``n_head``, ``n_inner`` (default 4·n_embd),
              ``n_positions``: GELU MLP, LayerNorm, learned positions, biases on every linear
              layer, embeddings tied by default (``GPT2Block``)
============  =================================================================================

Required fields are the ones that size the model (layers, widths, heads, vocabulary, expert
counts and widths, MLA ranks); a missing one is an error naming the field and the file.
Optional fields take the transformers default, except ``num_key_value_heads``, which defaults
to ``num_attention_heads`` for every type (transformers' class defaults are fixed numbers for
mistral/mixtral (8), qwen2/qwen3 (32), qwen3_moe (4) and deepseek_v3 (128); configs saved by
transformers always write the key). A ``null`` value counts as absent.

RoPE, norm epsilon, token ids, MTP and MoE routing fields are read by :mod:`autoplan.specs.hf_settings`.
Autoplan keys allowed next to the HF fields: ``name``, ``aliases``, ``sources``, ``seq_len``
(default training sequence length; default ``min(4096, max_position_embeddings)``) and
``description``. With ``strict=True`` (presets in ``model_db/``) any other key is an error; a
user's ``config.json`` may hold any keys (``torch_dtype``, ``rope_scaling`` ... are ignored).

Known approximation: ModelSpec has no flag for "q/k/v/o biases without MLP biases", so a Llama
or Qwen3 config with ``attention_bias: true`` and no ``mlp_bias`` is read as ``qkv_bias``; the
o_proj bias (``hidden_size`` per layer) is not counted.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping
from typing import Any

from autoplan.errors import SpecError, shown
from autoplan.specs import hf_llama4, hf_settings
from autoplan.specs.model import MLASpec, ModelSpec, MoESpec
from autoplan.specs.yaml_io import check_keys, check_name, get_int

AUTOPLAN_KEYS = ("name", "aliases", "sources", "seq_len", "description")
DEFAULT_SEQ_LEN = 4096

_DECODER_KEYS = ("num_hidden_layers", "hidden_size", "intermediate_size", "num_attention_heads",
                 "num_key_value_heads", "head_dim", "vocab_size", "tie_word_embeddings",
                 "max_position_embeddings")
_MOE_KEYS = ("num_experts_per_tok", "moe_intermediate_size")

# The HF keys each model_type reads (and that a strict preset may contain).
_GEMMA2_EXTRAS = ("query_pre_attn_scalar", "attn_logit_softcapping", "final_logit_softcapping")
_LLAMA4_EXTRAS = ("use_qk_norm", "attn_temperature_tuning", "floor_scale", "attn_scale")
HF_KEYS: dict[str, tuple[str, ...]] = {
    "llama": _DECODER_KEYS + ("attention_bias", "mlp_bias"),
    "mistral": _DECODER_KEYS + ("sliding_window",),
    "mixtral": _DECODER_KEYS + ("sliding_window", "num_local_experts", "num_experts_per_tok"),
    "qwen2": _DECODER_KEYS + ("use_sliding_window",),
    "qwen3": _DECODER_KEYS + ("attention_bias", "use_sliding_window"),
    "qwen3_moe": _DECODER_KEYS + _MOE_KEYS + ("attention_bias", "num_experts", "use_sliding_window",
                                              "decoder_sparse_step", "mlp_only_layers"),
    "deepseek_v2": _DECODER_KEYS + _MOE_KEYS + (
        "n_routed_experts", "n_shared_experts", "first_k_dense_replace", "moe_layer_freq",
        "topk_method", "attention_bias", "q_lora_rank", "kv_lora_rank", "qk_rope_head_dim",
        "qk_nope_head_dim", "v_head_dim"),
    "deepseek_v3": _DECODER_KEYS + _MOE_KEYS + (
        "n_routed_experts", "n_shared_experts", "first_k_dense_replace", "moe_layer_freq",
        "topk_method", "attention_bias", "q_lora_rank", "kv_lora_rank", "qk_rope_head_dim",
        "qk_nope_head_dim", "v_head_dim"),
    "gemma2": _DECODER_KEYS + ("sliding_window", "layer_types", "hidden_activation", "attention_bias")
              + _GEMMA2_EXTRAS,
    "phi3": _DECODER_KEYS + ("sliding_window", "hidden_act", "partial_rotary_factor"),
    "olmo2": _DECODER_KEYS + ("attention_bias", "hidden_act"),
    "llama4_text": _DECODER_KEYS + ("intermediate_size_mlp", "num_local_experts", "num_experts_per_tok",
                                    "interleave_moe_layer_step", "moe_layers", "attention_chunk_size",
                                    "no_rope_layers", "no_rope_layer_interval", "attention_bias", "hidden_act")
                   + _LLAMA4_EXTRAS,
    "nemotron": _DECODER_KEYS + ("attention_bias", "mlp_bias", "hidden_act", "partial_rotary_factor"),
    "gpt2": ("n_layer", "n_embd", "n_head", "n_inner", "n_positions", "vocab_size",
             "tie_word_embeddings"),
}
SUPPORTED_MODEL_TYPES = tuple(HF_KEYS)
# A multimodal Llama 4 config.json (model_type llama4) holds the language model in text_config.
WRAPPED_TYPES = {"llama4": "llama4_text"}

# transformers' defaults for optional fields (configuration_<type>.py).
_MAX_POSITIONS_DEFAULT = {"llama": 2048, "mistral": 4096 * 32, "mixtral": 4096 * 32,
                          "qwen2": 32768, "qwen3": 32768, "qwen3_moe": 32768, "deepseek_v2": 2048,
                          "deepseek_v3": 4096, "gemma2": 8192, "phi3": 4096, "olmo2": 2048,
                          "llama4_text": 4096 * 32, "nemotron": 4096, "gpt2": 1024}
_HEAD_DIM_DEFAULT = {"qwen3": 128, "gemma2": 256, "llama4_text": 128}  # the others: hidden_size // num_attention_heads


def model_from_hf_config(config: Mapping[str, Any], where: str, *, name: str | None = None,
                         strict: bool = False) -> ModelSpec:
    """Build a ModelSpec from an HF ``config.json`` mapping read from ``where``.

    ``name`` overrides the config's own ``name`` (then ``_name_or_path``, then ``model_type``).
    ``strict`` refuses keys that are neither read for this model_type nor autoplan keys.
    """
    config = _unwrapped(config, where)
    model_type = _model_type(config, where)
    if strict:
        check_keys(config, where, required=("model_type",),
                   optional=HF_KEYS[model_type] + hf_settings.SETTING_KEYS[model_type] + AUTOPLAN_KEYS)
    fields = _READERS[model_type](config, where) | hf_settings.read_settings(config, where, model_type)
    fields.update(_autoplan_fields(config, where, name, model_type, fields))
    try:
        return ModelSpec(model_type=model_type, **fields)
    except SpecError as exc:
        raise SpecError(where, str(exc)) from None


def _unwrapped(config: Mapping[str, Any], where: str) -> Mapping[str, Any]:
    """A multimodal config's language model (Llama 4: ``text_config``, with the outer
    ``tie_word_embeddings`` and autoplan keys); the vision encoder is not read (nor counted)."""
    outer_type = config.get("model_type")
    inner_type = WRAPPED_TYPES.get(outer_type) if isinstance(outer_type, str) else None
    if inner_type is None:
        return config
    text = config.get("text_config")
    if not isinstance(text, Mapping):
        raise SpecError(where, f"text_config: a {config['model_type']} config.json holds its language model in "
                               f"a text_config mapping, got {shown(text)}")
    outer = {k: config[k] for k in (*AUTOPLAN_KEYS, "tie_word_embeddings", "_name_or_path") if k in config}
    return {**text, **outer, "model_type": inner_type}


def _model_type(config: Mapping[str, Any], where: str) -> str:
    model_type = config.get("model_type")
    supported = ", ".join(SUPPORTED_MODEL_TYPES + tuple(WRAPPED_TYPES))
    if model_type is None:
        raise SpecError(where, f"missing required key 'model_type' (one of: {supported})")
    if not isinstance(model_type, str):
        raise SpecError(where, f"model_type must be a string (one of: {supported}), got {shown(model_type)}")
    if model_type not in HF_KEYS:
        close = difflib.get_close_matches(str(model_type), SUPPORTED_MODEL_TYPES + tuple(WRAPPED_TYPES), n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        raise SpecError(where, f"model_type {shown(model_type)} is not supported{hint}; "
                               f"supported: {supported}")
    return model_type


# --- typed field access --------------------------------------------------------------------

def _int(config: Mapping[str, Any], key: str, where: str, *, default: int | None = None,
         minimum: int = 1) -> int:
    """An integer field; ``null`` or absent takes ``default`` (``None``: the key is required)."""
    value = config.get(key)
    return get_int({key: default if value is None else value}, key, where, minimum=minimum)


_bool = hf_settings.flag  # true/false, or the default when absent or null


def _str_list(config: Mapping[str, Any], key: str, where: str) -> tuple[str, ...]:
    value = config.get(key) or []
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise SpecError(where, f"{key}: expected a list of non-empty strings, got {shown(value)}")
    return tuple(value)


# --- readers, one per model_type -----------------------------------------------------------

DECODER_REQUIRED = ("num_hidden_layers", "hidden_size", "intermediate_size", "num_attention_heads", "vocab_size")


def _decoder_fields(config: Mapping[str, Any], where: str, model_type: str, *,
                    head_dim: int | None = None) -> dict[str, Any]:
    """The Llama-shaped fields shared by every decoder type except gpt2."""
    missing = [key for key in DECODER_REQUIRED if config.get(key) is None]
    if missing:  # all of them at once, not one per run
        raise SpecError(where, f"missing required key(s) {', '.join(missing)} (a Hugging Face config.json of "
                               f"model_type {model_type} has them)")
    hidden = _int(config, "hidden_size", where)
    heads = _int(config, "num_attention_heads", where)
    if head_dim is None:
        head_dim = _head_dim(config, where, model_type, hidden, heads)
    return dict(
        num_layers=_int(config, "num_hidden_layers", where),
        hidden_size=hidden,
        ffn_hidden_size=_int(config, "intermediate_size", where),
        num_attention_heads=heads,
        num_kv_heads=_int(config, "num_key_value_heads", where, default=heads),
        head_dim=head_dim,
        vocab_size=_int(config, "vocab_size", where),
        tied_embeddings=_bool(config, "tie_word_embeddings", where, False),
        max_position_embeddings=_int(config, "max_position_embeddings", where,
                                     default=_MAX_POSITIONS_DEFAULT[model_type]),
    )


def _head_dim(config: Mapping[str, Any], where: str, model_type: str, hidden: int,
              heads: int) -> int:
    if config.get("head_dim") is not None:
        return _int(config, "head_dim", where)
    if model_type in _HEAD_DIM_DEFAULT:
        return _HEAD_DIM_DEFAULT[model_type]
    if hidden % heads:
        raise SpecError(where, "hidden_size must be a multiple of num_attention_heads when "
                               f"head_dim is not given, got ({hidden}, {heads}); "
                               "did you mean to set head_dim?")
    return hidden // heads


def _bias_fields(config: Mapping[str, Any], where: str) -> dict[str, bool]:
    """Llama's ``attention_bias``/``mlp_bias`` (Qwen3 has only ``attention_bias``)."""
    attention = _bool(config, "attention_bias", where, False)
    mlp = _bool(config, "mlp_bias", where, False)
    if mlp and not attention:
        raise SpecError(where, "mlp_bias: true without attention_bias: true is not supported "
                               "(ModelSpec has biases on every linear layer or on q/k/v only); "
                               "did you mean to set both?")
    return dict(linear_bias=attention and mlp, qkv_bias=attention and not mlp)


def _llama(config: Mapping[str, Any], where: str) -> dict[str, Any]:
    return _decoder_fields(config, where, "llama") | _bias_fields(config, where)


def _mistral(config: Mapping[str, Any], where: str) -> dict[str, Any]:
    return _decoder_fields(config, where, "mistral") | _sliding_window(config, where, default=None)


def _sliding_window(config: Mapping[str, Any], where: str, *, default: int | None,
                    full_every: int = 0) -> dict[str, Any]:
    """``sliding_window`` (null: none) on every layer, or on all but every ``full_every``-th."""
    window = config.get("sliding_window", default)
    if window is None:
        return {}
    return {"attention_window": _int({"sliding_window": window}, "sliding_window", where),
            "local_attention": "sliding", "full_attention_every": full_every}


def _no_sliding_window(config: Mapping[str, Any], where: str) -> None:
    """Qwen2/Qwen3 apply ``sliding_window`` only with ``use_sliding_window: true`` (on the layers
    from ``max_window_layers`` on), which is not modelled."""
    if _bool(config, "use_sliding_window", where, False):
        raise SpecError(where, "use_sliding_window: true is not supported (Qwen's window on the layers from "
                               "max_window_layers on is not modelled); set it to false")


def _mixtral(config: Mapping[str, Any], where: str) -> dict[str, Any]:
    fields = _decoder_fields(config, where, "mixtral") | _sliding_window(config, where, default=None)
    fields["moe"] = MoESpec(
        num_experts=_int(config, "num_local_experts", where),
        num_experts_per_token=_int(config, "num_experts_per_tok", where),
        expert_ffn_hidden_size=fields["ffn_hidden_size"],
        **hf_settings.read_routing(config, where, "mixtral"),
    )
    return fields


def _qwen2(config: Mapping[str, Any], where: str) -> dict[str, Any]:
    _no_sliding_window(config, where)
    return _decoder_fields(config, where, "qwen2") | {"qkv_bias": True}


def _qwen3(config: Mapping[str, Any], where: str) -> dict[str, Any]:
    _no_sliding_window(config, where)
    return (_decoder_fields(config, where, "qwen3") | _bias_fields(config, where)
            | {"qk_norm": True})


def _qwen3_moe(config: Mapping[str, Any], where: str) -> dict[str, Any]:
    _no_sliding_window(config, where)
    fields = (_decoder_fields(config, where, "qwen3_moe") | _bias_fields(config, where)
              | {"qk_norm": True})
    fields["moe"] = MoESpec(
        num_experts=_int(config, "num_experts", where),
        num_experts_per_token=_int(config, "num_experts_per_tok", where),
        expert_ffn_hidden_size=_int(config, "moe_intermediate_size", where),
        num_dense_layers=_qwen3_moe_dense_layers(config, where, fields["num_layers"]),
        **hf_settings.read_routing(config, where, "qwen3_moe"),
    )
    return fields


def _qwen3_moe_dense_layers(config: Mapping[str, Any], where: str, num_layers: int) -> int:
    """Layer i is dense if i is in ``mlp_only_layers`` or ``(i + 1) % decoder_sparse_step``."""
    step = _int(config, "decoder_sparse_step", where, default=1)
    mlp_only = config.get("mlp_only_layers") or []
    if not isinstance(mlp_only, list) or not all(type(i) is int for i in mlp_only):
        raise SpecError(where, "mlp_only_layers: expected a list of layer indices, "
                               f"got {shown(mlp_only)}")
    dense = [i for i in range(num_layers) if i in mlp_only or (i + 1) % step]
    if dense != list(range(len(dense))):
        raise SpecError(where, "only leading dense layers are supported (ModelSpec puts its "
                               f"num_dense_layers first), but layers {dense} are dense "
                               f"(decoder_sparse_step={step}, mlp_only_layers={mlp_only})")
    return len(dense)


def _deepseek_v2(config: Mapping[str, Any], where: str) -> dict[str, Any]:
    """DeepSeek-V2 (``DeepseekV2MoE``): as V3 with a softmax router and no expert score bias
    (``topk_method`` greedy or group_limited_greedy)."""
    return _deepseek(config, where, "deepseek_v2")


def _deepseek_v3(config: Mapping[str, Any], where: str) -> dict[str, Any]:
    return _deepseek(config, where, "deepseek_v3")


def _deepseek(config: Mapping[str, Any], where: str, model_type: str) -> dict[str, Any]:
    mla = _mla(config, where)
    # head_dim: the q·k width (nope + rope); transformers' own ``head_dim`` is the rope part.
    fields = _decoder_fields(config, where, model_type,
                             head_dim=mla.qk_nope_head_dim + mla.qk_rope_head_dim)
    if _bool(config, "attention_bias", where, False):
        raise SpecError(where, "attention_bias: true is not supported for MLA attention")
    if _int(config, "moe_layer_freq", where, default=1) != 1:
        raise SpecError(where, f"moe_layer_freq must be 1 (every layer after "
                               f"first_k_dense_replace is MoE), got {config['moe_layer_freq']}")
    if "n_shared_experts" not in config:
        raise SpecError(where, "missing required key 'n_shared_experts' (null means none)")
    num_shared = _int(config, "n_shared_experts", where, default=0, minimum=0)
    expert_ffn = _int(config, "moe_intermediate_size", where)
    fields["mla"] = mla
    fields["moe"] = MoESpec(
        num_experts=_int(config, "n_routed_experts", where),
        num_experts_per_token=_int(config, "num_experts_per_tok", where),
        expert_ffn_hidden_size=expert_ffn,
        num_shared_experts=num_shared,
        shared_expert_ffn_hidden_size=expert_ffn if num_shared else 0,
        num_dense_layers=_int(config, "first_k_dense_replace", where, minimum=0),
        router_bias=model_type == "deepseek_v3" and config.get("topk_method") in (None, "noaux_tc"),
        **hf_settings.read_routing(config, where, model_type),
    )
    return fields


def _mla(config: Mapping[str, Any], where: str) -> MLASpec:
    if "q_lora_rank" not in config:
        raise SpecError(where, "missing required key 'q_lora_rank' (null means a plain q_proj)")
    return MLASpec(
        q_lora_rank=_int(config, "q_lora_rank", where, default=0, minimum=0),
        kv_lora_rank=_int(config, "kv_lora_rank", where),
        qk_rope_head_dim=_int(config, "qk_rope_head_dim", where),
        qk_nope_head_dim=_int(config, "qk_nope_head_dim", where),
        v_head_dim=_int(config, "v_head_dim", where),
    )


def _gemma2(config: Mapping[str, Any], where: str) -> dict[str, Any]:
    """Gemma 2 (``Gemma2DecoderLayer``): GeGLU MLP, 4 RMSNorms per layer, head_dim 256 by default,
    tied embeddings by default, a 4096-token sliding window on layers 0, 2, 4, ... (``layer_types``)."""
    act = config.get("hidden_activation") or "gelu_pytorch_tanh"
    if act != "gelu_pytorch_tanh":
        raise SpecError(where, f"hidden_activation must be 'gelu_pytorch_tanh' for a gemma2 config (Gemma2MLP), "
                               f"got {shown(act)}")
    fields = _decoder_fields(config, where, "gemma2") | _bias_fields(config, where)
    fields.update(tied_embeddings=_bool(config, "tie_word_embeddings", where, True), activation="geglu",
                  norm_placement="sandwich", other_features=_extras(config, where, _GEMMA2_EXTRAS))
    every = _full_attention_every(config, where, fields["num_layers"], default=2)
    return fields | _sliding_window(config, where, default=4096, full_every=every)


def _full_attention_every(config: Mapping[str, Any], where: str, num_layers: int, default: int) -> int:
    """n such that ``layer_types`` is full attention exactly on layers i with (i + 1) % n == 0."""
    types = config.get("layer_types")
    if types is None:
        return default
    def pattern(every: int) -> list[str]:
        return ["full_attention" if every and (i + 1) % every == 0 else "sliding_attention" for i in range(num_layers)]

    full = [i for i, kind in enumerate(types) if kind == "full_attention"] if isinstance(types, list) else []
    every = full[0] + 1 if full else default if types == pattern(default) else 0  # default: too few layers to show
    if types != pattern(every):
        raise SpecError(where, "layer_types: only sliding_attention layers with full_attention on every n-th layer "
                               f"are supported (ModelSpec.full_attention_every), got {shown(types)}")
    return every


def _extras(config: Mapping[str, Any], where: str, keys: tuple[str, ...]) -> tuple[tuple[str, Any], ...]:
    """The (key, value) items of ``keys`` the config sets (not null): ModelSpec.other_features."""
    items = []
    for key in keys:
        value = config.get(key)
        if value is None:
            continue
        if not isinstance(value, (bool, int, float, str)):
            raise SpecError(where, f"{key}: expected a number, a string or true/false, got {shown(value)}")
        items.append((key, value))
    return tuple(sorted(items))


def _phi3(config: Mapping[str, Any], where: str) -> dict[str, Any]:
    """Phi-3 (``Phi3Attention``, ``Phi3MLP``): Llama's weights with q/k/v fused in qkv_proj and
    gate/up in gate_up_proj (the same counts), no biases, ``sliding_window`` on every layer."""
    act = config.get("hidden_act") or "silu"
    if act != "silu":
        raise SpecError(where, f"hidden_act must be 'silu' for a phi3 config (Phi3MLP), got {shown(act)}")
    return (_decoder_fields(config, where, "phi3") | _sliding_window(config, where, default=None)
            | {"rotary_percent": _fraction(config, "partial_rotary_factor", where, 1.0)})


def _olmo2(config: Mapping[str, Any], where: str) -> dict[str, Any]:
    """OLMo 2 (``Olmo2DecoderLayer``): RMSNorms after attention and MLP (none before) and q/k
    RMSNorms over the whole q and k projections (``Olmo2Attention.q_norm``/``k_norm``)."""
    return (_decoder_fields(config, where, "olmo2") | _bias_fields(config, where)
            | {"qk_norm": True, "qk_norm_per_head": False, "norm_placement": "post"})


def _llama4_text(config: Mapping[str, Any], where: str) -> dict[str, Any]:
    fields = (_decoder_fields(config, where, "llama4_text") | _bias_fields(config, where)
              | {"other_features": _extras(config, where, _LLAMA4_EXTRAS)})
    return hf_llama4.read_llama4_text(config, where, fields)


def _fraction(config: Mapping[str, Any], key: str, where: str, default: float) -> float:
    value = config.get(key)
    value = default if value is None else value
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
        raise SpecError(where, f"{key}: expected a number in (0, 1], got {shown(value)}")
    return float(value)


def _nemotron(config: Mapping[str, Any], where: str) -> dict[str, Any]:
    act = config.get("hidden_act", "relu2")
    if act != "relu2":
        raise SpecError(where, f"hidden_act must be 'relu2' for a nemotron config (NemotronMLP), got {shown(act)}")
    return (_decoder_fields(config, where, "nemotron") | _bias_fields(config, where)
            | {"activation": "relu2", "norm": "layernorm1p",
               "rotary_percent": _fraction(config, "partial_rotary_factor", where, 0.5)})


def _gpt2(config: Mapping[str, Any], where: str) -> dict[str, Any]:
    hidden = _int(config, "n_embd", where)
    heads = _int(config, "n_head", where)
    if hidden % heads:
        raise SpecError(where, f"n_embd must be a multiple of n_head, got ({hidden}, {heads})")
    return dict(
        num_layers=_int(config, "n_layer", where),
        hidden_size=hidden,
        ffn_hidden_size=_int(config, "n_inner", where, default=4 * hidden),
        num_attention_heads=heads,
        num_kv_heads=heads,
        head_dim=hidden // heads,
        vocab_size=_int(config, "vocab_size", where),
        tied_embeddings=_bool(config, "tie_word_embeddings", where, True),
        max_position_embeddings=_int(config, "n_positions", where,
                                     default=_MAX_POSITIONS_DEFAULT["gpt2"]),
        activation="gelu", norm="layernorm", position_embedding="learned", linear_bias=True,
    )


_READERS: dict[str, Callable[[Mapping[str, Any], str], dict[str, Any]]] = {
    "llama": _llama, "mistral": _mistral, "mixtral": _mixtral, "qwen2": _qwen2,
    "qwen3": _qwen3, "qwen3_moe": _qwen3_moe, "deepseek_v2": _deepseek_v2, "deepseek_v3": _deepseek_v3,
    "gemma2": _gemma2, "phi3": _phi3, "olmo2": _olmo2, "llama4_text": _llama4_text,
    "nemotron": _nemotron, "gpt2": _gpt2,
}
assert set(_READERS) == set(HF_KEYS)


def _autoplan_fields(config: Mapping[str, Any], where: str, name: str | None, model_type: str,
                     fields: Mapping[str, Any]) -> dict[str, Any]:
    """name, aliases, sources, seq_len (``description`` is checked and not kept)."""
    if name is None:
        name = config["name"] if "name" in config else config.get("_name_or_path") or model_type
    name = check_name(name, "name", where)
    description = config.get("description", "")
    if not isinstance(description, str):
        raise SpecError(where, f"description: expected a string, got {shown(description)}")
    max_positions = fields["max_position_embeddings"]
    seq_len = _int(config, "seq_len", where, default=min(DEFAULT_SEQ_LEN, max_positions))
    if fields.get("position_embedding") == "learned" and seq_len > max_positions:
        raise SpecError(where, f"seq_len <= n_positions must hold with learned positions, "
                               f"got ({seq_len}, {max_positions})")
    aliases = tuple(check_name(alias, "aliases", where) for alias in _str_list(config, "aliases", where))
    return dict(name=name, aliases=aliases,
                sources=_str_list(config, "sources", where), seq_len=seq_len)
