"""Which trainer can express which recompute and offload knobs (``autoplan.layout.Layout``).

* ``recompute_layers`` (full recompute of N layers per stage) and ``recompute_modules``
  (selective recompute of named modules): Megatron-LM only (core_v0.15.3
  ``megatron/training/arguments.py``: ``--recompute-method block --recompute-num-layers N``,
  ``--recompute-modules``; the rules of ``megatron/core/transformer/transformer_config.py``
  ``__post_init__``). torchtitan 0.3.0's ``ActivationCheckpoint`` has ``mode`` full/selective
  with ``selective_ac_option`` 'op' or every N-th layer, nanotron a ``recompute_layer`` switch,
  the DeepSpeed export checkpoints every layer: none of them names N layers per stage or
  Megatron's modules.
* ``offload_layers``: no exporter's pinned trainer can express it. Megatron-Core has
  ``TransformerConfig.cpu_offloading_num_layers``, but ``pretrain_gpt.py`` at core_v0.15.3 has no
  flag for it (``--cpu-offloading-num-layers`` arrives in core_v0.16.0's arguments.py), and
  ``__post_init__`` allows it only with pp = 1, no recompute and fewer layers than the model's.
  A measured run whose framework set ``cpu_offloading_num_layers`` itself carries the profile fact
  capability ``activation_offload`` (``TrainerProfile.with_overrides``) and is not refused; the
  capability rules themselves are in ``autoplan.rules.capabilities``.
"""

from __future__ import annotations

import numpy as np

from autoplan.layout import PRECISION

from autoplan.recompute_modules import module_bit
from autoplan.rules.table import ALL, Rule, RuleContext

MEGATRON = ("megatron",)
ARGS = "Megatron-LM core_v0.15.3 megatron/training/arguments.py"
CONFIG = "Megatron-LM core_v0.15.3 megatron/core/transformer/transformer_config.py (__post_init__)"
FP8_DELAYED_MODULES = ("moe_act", "layernorm")  # transformer_config.py: not with fp8 delayed scaling


def _stage_layers(ctx: RuleContext, x) -> object:
    """Layers of the largest (virtual) stage: ceil(L/(pp·vpp))."""
    return np.ceil(ctx.model.num_layers / (x.pp * x.vpp))


def _fp8_delayed(ctx: RuleContext, b) -> np.ndarray | bool:
    """True where an fp8 layout recomputes a module that delayed scaling cannot (False for any
    other recipe, without looking at the layouts)."""
    if ctx.training.fp8_recipe != "delayed":
        return False
    hit = sum(module_bit(b.recompute_modules, name) for name in FP8_DELAYED_MODULES)
    return (b.precision == PRECISION["fp8"]) & (b.recompute == 1) & (hit > 0)


RULES = [
    Rule("recompute_knobs", ALL,
         "recompute_layers needs recompute = full and recompute_modules needs recompute = selective",
         lambda c, b: ((b.recompute_layers > 0) & (b.recompute != 2)) | ((b.recompute_modules > 0) & (b.recompute != 1)),
         lambda c, x: f"recompute={x.recompute}, recompute_layers={x.recompute_layers}, "
                      f"recompute_modules={x.recompute_modules or '(none)'}",
         f"{CONFIG}: recompute_num_layers must be None for selective; recompute_modules apply to selective"),
    Rule("recompute_layers_stage", MEGATRON,
         "recompute_layers must not exceed the layers of a (virtual) pipeline stage",
         lambda c, b: b.recompute_layers > _stage_layers(c, b),
         lambda c, x: f"recompute_layers={x.recompute_layers}, layers={c.model.num_layers}, "
                      f"pp·vpp={x.pp * x.vpp}, largest stage {int(_stage_layers(c, x))}",
         f"{CONFIG}: recompute_num_layers between 1 and num_layers_per_pipeline_rank",
         fix=lambda c, x: f"try --recompute-layers {int(_stage_layers(c, x))}"),
    Rule("recompute_mla_up_proj", MEGATRON, "mla_up_proj recompute needs multi-latent attention",
         lambda c, b: module_bit(b.recompute_modules, "mla_up_proj") > 0,
         lambda c, x: f"recompute_modules={x.recompute_modules}, model '{c.model.name}' has no MLA", CONFIG,
         when=lambda c: c.model.mla is None),
    Rule("recompute_fp8_delayed", MEGATRON,
         "moe_act and layernorm recompute do not work with fp8 delayed scaling",
         lambda c, b: _fp8_delayed(c, b),
         lambda c, x: f"recompute_modules={x.recompute_modules}, precision={x.precision}, "
                      f"fp8_recipe={c.training.fp8_recipe}", CONFIG,
         fix=lambda c, x: "try --fp8-recipe tensorwise"),
    Rule("offload_megatron", MEGATRON,
         "activation offload needs pp = 1, no recompute and fewer offloaded layers than the model's",
         lambda c, b: (b.offload_layers > 0) & ((b.pp > 1) | (b.recompute != 0)
                                                | (b.offload_layers >= c.model.num_layers)),
         lambda c, x: f"offload_layers={x.offload_layers}, pp={x.pp}, recompute={x.recompute}, "
                      f"layers={c.model.num_layers}", CONFIG),
]
