"""Llama 4's language model (``model_type: llama4_text``, or the ``text_config`` of a ``llama4``
config.json) as ModelSpec fields.

From transformers ``models/llama4/configuration_llama4.py`` (``Llama4TextConfig`` defaults) and
``modeling_llama4.py``: every ``interleave_moe_layer_step``-th layer (or the layers in
``moe_layers``) is a ``Llama4TextMoe`` of ``num_local_experts`` experts of width
``intermediate_size`` (gate_up_proj E×h×2f, down_proj E×f×h), top ``num_experts_per_tok`` with
sigmoid scores and no renormalisation, a router without bias and one always-on
``shared_expert`` of width ``intermediate_size``; the other layers are dense MLPs of width
``intermediate_size_mlp``. Layers with RoPE (``no_rope_layers[i] == 1``; by default all but every
``no_rope_layer_interval``-th = 4th) use chunked attention of ``attention_chunk_size`` tokens; the
others attend the whole causal prefix. ``use_qk_norm`` is a weightless L2 norm (no parameters).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from autoplan.errors import SpecError, shown
from autoplan.specs import hf_settings
from autoplan.specs.model import MoESpec
from autoplan.specs.yaml_io import get_int


def _int(config: Mapping[str, Any], key: str, where: str, default: int | None, minimum: int = 1) -> int:
    value = config.get(key)
    return get_int({key: default if value is None else value}, key, where, minimum=minimum)


def read_llama4_text(config: Mapping[str, Any], where: str, fields: dict[str, Any]) -> dict[str, Any]:
    """``fields``: the Llama-shaped decoder fields already read; adds the MoE and the attention."""
    act = config.get("hidden_act") or "silu"
    if act != "silu":
        raise SpecError(where, f"hidden_act must be 'silu' for a llama4_text config (Llama4TextMLP), got {shown(act)}")
    num_layers, expert_ffn = fields["num_layers"], fields["ffn_hidden_size"]
    fields = dict(fields, ffn_hidden_size=_int(config, "intermediate_size_mlp", where, 16384))
    fields["moe"] = MoESpec(
        num_experts=_int(config, "num_local_experts", where, 16),
        num_experts_per_token=_int(config, "num_experts_per_tok", where, 1),
        expert_ffn_hidden_size=expert_ffn, num_shared_experts=1, shared_expert_ffn_hidden_size=expert_ffn,
        num_dense_layers=_dense_layers(config, where, num_layers), score_function="sigmoid",
        normalize_topk=False, aux_loss_coeff=hf_settings.read_routing(config, where, "llama4_text")["aux_loss_coeff"])
    interval = _rope_interval(config, where, num_layers)
    chunk = config.get("attention_chunk_size", 8192)
    if chunk is not None:
        fields.update(attention_window=_int({"attention_chunk_size": chunk}, "attention_chunk_size", where, None),
                      local_attention="chunked", full_attention_every=interval)
    return fields


def _dense_layers(config: Mapping[str, Any], where: str, num_layers: int) -> int:
    """Layers that are not in ``moe_layers`` (default: every interleave_moe_layer_step-th layer,
    ``Llama4TextConfig``) must come first (ModelSpec puts num_dense_layers first)."""
    step = _int(config, "interleave_moe_layer_step", where, 1)
    moe_layers = config.get("moe_layers")
    if moe_layers is None:
        moe_layers = list(range(step - 1, num_layers, step))
    if not isinstance(moe_layers, list) or not all(type(i) is int for i in moe_layers):
        raise SpecError(where, f"moe_layers: expected a list of layer indices, got {shown(moe_layers)}")
    dense = [i for i in range(num_layers) if i not in moe_layers]
    if dense != list(range(len(dense))):
        raise SpecError(where, "only leading dense layers are supported (ModelSpec puts its num_dense_layers "
                               f"first), but layers {dense[:8]}{'...' if len(dense) > 8 else ''} are dense "
                               f"(interleave_moe_layer_step={step})")
    if len(dense) == num_layers:
        raise SpecError(where, f"moe_layers: a llama4_text model needs at least one MoE layer, got {shown(moe_layers)}")
    return len(dense)


def _rope_interval(config: Mapping[str, Any], where: str, num_layers: int) -> int:
    """``no_rope_layer_interval`` n, checked against ``no_rope_layers`` (1 = RoPE and chunked)."""
    interval = _int(config, "no_rope_layer_interval", where, 4)
    pattern = [int((i + 1) % interval != 0) for i in range(num_layers)]
    given = config.get("no_rope_layers")
    if given not in (None, [], pattern):
        raise SpecError(where, f"no_rope_layers must be the pattern of no_rope_layer_interval={interval} "
                               f"(no RoPE and global attention on every {interval}th layer), got {shown(given)}")
    return interval
