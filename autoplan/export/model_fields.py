"""Which model fields each exporter writes: the one declaration, and what a model uses.

The shape (layers, widths, heads, vocabulary) is written by every exporter (test_roundtrip reads
it back). The fields below change the model without sizing it, or change its architecture;
each exporter module declares the ones it writes in ``MODEL_FIELDS`` (DeepSpeed: one set for the
Hugging Face model AutoEP wraps and one for Megatron-DeepSpeed's GPT model). A field a model uses
(its value differs from ModelSpec's default) that the exporter does not write must make the
export refuse the model or warn, in words of :data:`FIELDS` (tests/unit/export/
test_model_field_contract.py checks every preset against every exporter).
"""

from __future__ import annotations

import dataclasses

from autoplan.layout import Layout
from autoplan.specs.model import MoESpec, ModelSpec

# field ('moe.x' for MoESpec's) -> the words a warning or refusal about it uses (any one, any case)
FIELDS: dict[str, tuple[str, ...]] = {
    "rope_theta": ("rope_theta", "rotary-base"),
    "rope_scaling": ("rope_scaling", "RoPE scaling"),
    "rotary_percent": ("rotary_percent", "rotary-percent"),
    "norm_eps": ("eps",),
    "bos_token_id": ("bos",), "eos_token_id": ("eos",),
    "tied_embeddings": ("tying", "tied"),
    "activation": ("MLP", "activation"), "norm": ("norm",), "position_embedding": ("positions",),
    "norm_placement": ("norm_placement",), "qk_norm": ("q/k",), "qk_norm_per_head": ("q/k",),
    "qkv_bias": ("bias",), "linear_bias": ("bias",),
    "attention_window": ("window", "attention of"),
    "other_features": ("has no",),
    "num_mtp_layers": ("MTP", "multi-token"),
    "mla": ("latent attention", "MLA"),
    "moe.router_bias": ("expert bias", "e_score_correction_bias"),
    "moe.score_function": ("scores", "score"),
    "moe.normalize_topk": ("top-k weights", "renormalised"),
    "moe.routed_scaling_factor": ("scaling",),
    "moe.num_expert_groups": ("group",),
    "moe.aux_loss_coeff": ("balance loss", "aux"),
    "moe.aux_loss_per_sequence": ("balance loss", "aux"),
}
_MODEL_DEFAULTS = {f.name: f.default for f in dataclasses.fields(ModelSpec)}
_MOE_DEFAULTS = {f.name: f.default for f in dataclasses.fields(MoESpec)}


def used_fields(m: ModelSpec) -> list[str]:
    """The fields of :data:`FIELDS` whose value in ``m`` is not ModelSpec's (MoESpec's) default."""
    used = []
    for name in FIELDS:
        if name.startswith("moe."):
            key = name[4:]
            if m.moe is not None and getattr(m.moe, key) != _MOE_DEFAULTS[key]:
                used.append(name)
        elif name == "mla":
            if m.mla is not None:
                used.append(name)
        elif getattr(m, name) != _MODEL_DEFAULTS[name]:
            used.append(name)
    return used


def written_fields(trainer: str, layout: Layout) -> frozenset[str]:
    """The fields ``trainer``'s exporter writes for ``layout`` (its module's ``MODEL_FIELDS``)."""
    import importlib

    from autoplan.export.registry import renderer_module

    module = importlib.import_module(renderer_module(trainer))
    if trainer == "deepspeed" and module.uses_megatron(layout):
        return module.MDS_MODEL_FIELDS
    return module.MODEL_FIELDS
