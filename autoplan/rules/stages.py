"""Uneven pipeline stages: layers that do not divide into pp·vpp stages.

One meaning everywhere (search, estimate, explain, compare, export): the stages hold the layers
split as ``autoplan.cost.stages.stage_layers`` splits them, as evenly as possible with the extra
layers on the early stages (with vpp, the pp·vpp virtual stages are split that way and virtual
stage ``k·pp + r`` runs on rank ``r``, so the ranks again hold ceil(L/pp) or floor(L/pp) layers,
the early ranks the more). Such a layout is legal wherever the trainer can run that exact split,
by default; ``--even-stages-only`` keeps to layers that divide into pp·vpp stages
(``--allow-uneven-pp``, the old opt-in, is accepted and does nothing):

* Megatron-LM core_v0.15.3: yes. ``--pipeline-model-parallel-layout`` (``megatron/training/
  arguments.py``; ``megatron/core/transformer/pipeline_parallel_layer_layout.py``) places any
  number of layers on every (virtual) stage. ``--decoder-first/last-pipeline-num-layers``
  cannot: the middle stages must then hold equal layers, each a multiple of vpp
  (``megatron/core/transformer/transformer_config.py``), which ceil/floor splits rarely are.
* torchtitan 0.3.0: yes for vpp <= 2. Without ``pipeline_parallel_layers_per_stage`` and with
  ``pipeline_parallel_first/last_stage_less_layers = 0`` it makes pp (1F1B) or 2·pp
  (Interleaved1F1B) stages and gives the ``L mod stages`` extra layers to the first stages
  (``torchtitan/distributed/pipeline_parallel.py``: ``_get_pipeline_metadata``,
  ``generate_llm_fqn_per_model_part``; the same at tag v0.2.2). More virtual stages need
  ``pipeline_parallel_layers_per_stage``, which makes ceil(L/layers) stages and cannot name
  pp·vpp of them in general.
* nanotron: yes; it assigns blocks to ranks itself, cutting the cumulative compute cost at
  equal fractions (``src/nanotron/models/base.py``, ``build_model``; costs from
  ``LlamaForTraining.get_block_compute_costs``, where the LM head weighs V·h, about two Llama-8B
  layers). No option sets the split: for dense models the cost model uses nanotron's own
  assignment (profile ``pp_split_rule: compute_cost``, ``autoplan.cost.stages``), whatever the
  layout's ``pp_split``.
* DeepSpeed v0.19.5: yes (vpp is 1: it has no interleaving). Megatron-DeepSpeed's model pipes
  (``GPTModelPipe`` and the others) build ``PipelineModule(..., partition_method=
  'type:transformer')``; ``_partition_layers`` (``deepspeed/runtime/pipe/module.py``) weighs
  each transformer layer 1 and every other layer spec 0 and cuts them with
  ``partition_balanced`` (``deepspeed/runtime/utils.py``), a dynamic programme that minimises
  the largest minus the smallest stage and keeps the last cut among equal ones. On equal
  layers that puts the ``L mod pp`` extra layers on the first stages, the split the cost model
  costs (``tests/unit/rules/test_stages.py`` replays the programme; BLOOM-176B ran 70 layers on
  PP12 this way). An earlier reading here held that the tie-breaking could not be predicted.
* hf (Hugging Face Trainer / Accelerate): no; it has no pipeline split to configure.
"""

from __future__ import annotations

import numpy as np

from autoplan.rules.table import ALL, Rule, RuleContext, gpus_of, indivisible, nearest

PROFILES = "autoplan/profiles/<trainer>.yaml capabilities (uneven_stages_max_vpp)"


def uneven(ctx: RuleContext, b) -> np.ndarray:
    """True where the layers (+2 units under ``pp_split`` embed-loss) do not divide into pp·vpp
    equal stages."""
    return indivisible(ctx.model.num_layers + 2 * (b.pp_split == 1), b.pp * b.vpp)


def trainer_splits_unevenly(ctx: RuleContext, b):
    """True where the trainer can run the cost model's uneven split (per layout): its profile's
    ``uneven_stages_max_vpp`` virtual stages per rank at most (True for any, False for none)."""
    most = ctx.profile.capabilities.uneven_stages_max_vpp
    if most == float("inf") or most == 0:
        return most > 0
    return b.vpp <= most


def _uneven_unsupported(ctx: RuleContext, b) -> np.ndarray | bool:
    """True where the stages are uneven and the trainer cannot run that split."""
    splits = trainer_splits_unevenly(ctx, b)
    if splits is True:  # (every layout: no need to look at the stages)
        return False
    return uneven(ctx, b) & ~np.asarray(splits, dtype=bool)


def fix_pp(ctx: RuleContext, x) -> str:
    """'try --pp N': the nearest pp that divides the layers into pp·vpp stages and the GPUs."""
    pp = nearest(x.pp, lambda p: ctx.model.num_layers % (p * x.vpp) == 0
                 and gpus_of(ctx, x) % (x.tp * p * x.cp) == 0)
    return f"try --pp {pp}" if pp else ""


def _fix_uneven(ctx: RuleContext, x) -> str:
    fix = fix_pp(ctx, x)
    return f"{fix} or drop --even-stages-only" if fix else "drop --even-stages-only"


def _values(ctx: RuleContext, x) -> str:
    layers, stages = ctx.model.num_layers, x.pp * x.vpp
    return f"layers={layers}, pp({x.pp})·vpp({x.vpp}) = {stages}, {layers} mod {stages} = {layers % stages}"


RULES = [
    Rule("pp_uneven", ALL,
         "layers must be divisible by pp·vpp under --even-stages-only",
         lambda c, b: False if c.allow_uneven_pp else uneven(c, b) & trainer_splits_unevenly(c, b),
         _values, PROFILES, fix=_fix_uneven),
    Rule("trainer_uneven_pp", ALL,
         "layers must be divisible by pp·vpp: the trainer cannot run unequal stages here",
         lambda c, b: _uneven_unsupported(c, b),
         lambda c, x: f"{_values(c, x)}; {c.profile.name}" + (
             f" splits unequal layers only with vpp <= {c.profile.capabilities.uneven_stages_max_vpp:g}"
             if c.profile.capabilities.uneven_stages_max_vpp else " has no unequal stages"),
         PROFILES, fix=fix_pp),
]
