"""The Hugging Face ``config.json`` fields that size nothing but that a trainer must be given.

RoPE base and scaling, the norm epsilon, the special token ids, the multi-token-prediction depth
and the MoE router's settings. The cost model reads none of them; the exporters write them so
that the exported job trains the model of the config (``autoplan.export``). Defaults are those
of the ``transformers`` configuration classes (``configuration_<type>.py``); DeepSeek-V3's
``aux_loss_alpha`` and ``seq_aux`` come from DeepSeek's own ``configuration_deepseek.py``
(transformers' class has neither). A token id given as a list (an instruct model's several end
tokens) is read as its first element; an explicit null means none (an absent key: the default).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from autoplan.errors import SpecError, shown

_DECODER = ("rope_theta", "rope_scaling", "rms_norm_eps", "bos_token_id", "eos_token_id")
SETTING_KEYS: dict[str, tuple[str, ...]] = {
    "llama": _DECODER, "mistral": _DECODER, "qwen2": _DECODER, "qwen3": _DECODER,
    "mixtral": _DECODER + ("router_aux_loss_coef",),
    "qwen3_moe": _DECODER + ("norm_topk_prob", "router_aux_loss_coef"),
    "deepseek_v2": _DECODER + ("scoring_func", "norm_topk_prob", "routed_scaling_factor", "n_group",
                               "topk_group", "aux_loss_alpha", "seq_aux"),
    "deepseek_v3": _DECODER + ("scoring_func", "norm_topk_prob", "routed_scaling_factor", "n_group",
                               "topk_group", "aux_loss_alpha", "seq_aux", "num_nextn_predict_layers"),
    "gemma2": _DECODER, "phi3": _DECODER, "olmo2": _DECODER,
    "llama4_text": _DECODER + ("router_aux_loss_coef",),
    "nemotron": ("rope_theta", "rope_scaling", "norm_eps", "bos_token_id", "eos_token_id"),
    "gpt2": ("layer_norm_epsilon", "bos_token_id", "eos_token_id"),
}
_ROPE_THETA_DEFAULT = {"mixtral": 1e6, "llama4_text": 5e5}  # the others: 10000
_NORM_EPS_DEFAULT = {"llama": 1e-6, "mistral": 1e-6, "mixtral": 1e-5, "qwen2": 1e-6, "qwen3": 1e-6,
                     "qwen3_moe": 1e-6, "deepseek_v2": 1e-6, "deepseek_v3": 1e-6, "gemma2": 1e-6, "phi3": 1e-5,
                     "olmo2": 1e-5, "llama4_text": 1e-5, "nemotron": 1e-5, "gpt2": 1e-5}
_GPT2_TOKEN_DEFAULT = 50256
_EPS_KEY = {"gpt2": "layer_norm_epsilon", "nemotron": "norm_eps"}  # the others: rms_norm_eps


def read_settings(config: Mapping[str, Any], where: str, model_type: str) -> dict[str, Any]:
    """The ModelSpec fields rope_theta, rope_scaling, norm_eps, bos/eos_token_id, num_mtp_layers."""
    eps_key = _EPS_KEY.get(model_type, "rms_norm_eps")
    token_default = _GPT2_TOKEN_DEFAULT if model_type == "gpt2" else None
    fields: dict[str, Any] = {
        "norm_eps": _positive(config, eps_key, where, _NORM_EPS_DEFAULT[model_type]),
        "bos_token_id": _token_id(config, "bos_token_id", where, token_default),
        "eos_token_id": _token_id(config, "eos_token_id", where, token_default)}
    if model_type != "gpt2":
        fields.update(rope_theta=_positive(config, "rope_theta", where, _ROPE_THETA_DEFAULT.get(model_type, 1e4)),
                      rope_scaling=_rope_scaling(config, where))
    if model_type == "deepseek_v3":
        fields["num_mtp_layers"] = _count(config, "num_nextn_predict_layers", where, 0)
    return fields


def read_routing(config: Mapping[str, Any], where: str, model_type: str) -> dict[str, Any]:
    """The MoESpec routing fields of a mixtral, qwen3_moe, llama4_text, deepseek_v2 or deepseek_v3
    config (DeepSeek-V2: softmax, no renormalisation, no scaling and, with ``topk_method: greedy``,
    no groups by default, as in its ``DeepseekV2MoEGate``)."""
    if model_type in ("mixtral", "llama4_text"):  # mixtral: softmax over the top-k logits: normalised weights
        return {"normalize_topk": True, "aux_loss_coeff": _number(config, "router_aux_loss_coef", where, 0.001)}
    if model_type == "qwen3_moe":
        return {"normalize_topk": flag(config, "norm_topk_prob", where, False),
                "aux_loss_coeff": _number(config, "router_aux_loss_coef", where, 0.001)}
    v2 = model_type == "deepseek_v2"
    scoring = config.get("scoring_func") or ("softmax" if v2 else "sigmoid")
    if scoring not in ("softmax", "sigmoid"):
        raise SpecError(where, f"scoring_func: expected 'softmax' or 'sigmoid', got {shown(scoring)}")
    greedy = v2 and config.get("topk_method", "greedy") == "greedy"  # no group limit
    return {"score_function": scoring, "normalize_topk": flag(config, "norm_topk_prob", where, not v2),
            "routed_scaling_factor": _positive(config, "routed_scaling_factor", where, 1.0 if v2 else 2.5),
            "num_expert_groups": 1 if greedy else _count(config, "n_group", where, 1 if v2 else 8, minimum=1),
            "num_limited_groups": 1 if greedy else _count(config, "topk_group", where, 1 if v2 else 4, minimum=1),
            "aux_loss_coeff": _number(config, "aux_loss_alpha", where, 0.001),
            "aux_loss_per_sequence": flag(config, "seq_aux", where, True)}


def write_settings(spec: Any) -> dict[str, Any]:
    """The HF keys of :func:`read_settings` and :func:`read_routing` for ``spec`` (a ModelSpec)."""
    keys = SETTING_KEYS[spec.model_type]
    values: dict[str, Any] = {
        "rope_theta": spec.rope_theta, "rope_scaling": spec.rope_scaling_dict or None,
        "rms_norm_eps": spec.norm_eps, "layer_norm_epsilon": spec.norm_eps, "norm_eps": spec.norm_eps,
        "bos_token_id": spec.bos_token_id, "eos_token_id": spec.eos_token_id,
        "num_nextn_predict_layers": spec.num_mtp_layers}
    moe = spec.moe
    if moe is not None:
        values.update(router_aux_loss_coef=moe.aux_loss_coeff, aux_loss_alpha=moe.aux_loss_coeff,
                      norm_topk_prob=moe.normalize_topk, scoring_func=moe.score_function,
                      routed_scaling_factor=moe.routed_scaling_factor, n_group=moe.num_expert_groups,
                      topk_group=moe.num_limited_groups, seq_aux=moe.aux_loss_per_sequence)
    return {key: values[key] for key in keys if key in values}


def _number(config: Mapping[str, Any], key: str, where: str, default: float) -> float:
    value = config.get(key)
    if value is None:
        return float(default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise SpecError(where, f"{key}: expected a number >= 0, got {shown(value)}")
    return float(value)


def _positive(config: Mapping[str, Any], key: str, where: str, default: float) -> float:
    value = _number(config, key, where, default)
    if value <= 0:
        raise SpecError(where, f"{key}: expected a number > 0, got {shown(value)}")
    return value


def _count(config: Mapping[str, Any], key: str, where: str, default: int, minimum: int = 0) -> int:
    value = config.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise SpecError(where, f"{key}: expected an integer >= {minimum}, got {shown(value)}")
    return value


def flag(config: Mapping[str, Any], key: str, where: str, default: bool) -> bool:
    value = config.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise SpecError(where, f"{key}: expected true or false, got {shown(value)}")
    return value


def _token_id(config: Mapping[str, Any], key: str, where: str, default: int | None) -> int | None:
    if key not in config:
        return default
    value = config[key]
    if isinstance(value, list) and value:
        value = value[0]
    if value is None:  # an explicit null: the model has none
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise SpecError(where, f"{key}: expected a token id (an integer >= 0) or a list of them, got {shown(value)}")
    return value


def _rope_scaling(config: Mapping[str, Any], where: str) -> tuple[tuple[str, float | str], ...]:
    value = config.get("rope_scaling")
    if value is None:
        return ()
    if isinstance(value, dict):
        value = {k: v for k, v in value.items() if v is not None}
    scalar = (str, int, float)
    if (not isinstance(value, dict) or not all(isinstance(k, str) for k in value)
            or not all(isinstance(v, scalar) and not isinstance(v, bool) for v in value.values())):
        raise SpecError(where, f"rope_scaling: expected null or a mapping of names to numbers or strings, "
                               f"got {shown(value)}")
    return tuple(sorted(value.items()))
