"""Megatron-Bridge: a recipe override YAML and a launch script for ``scripts/training/run_recipe.py``,
pinned to Megatron-Bridge v0.3.1 (commit 9c9dd84896).

Bridge builds a run from a recipe (a function returning a ``ConfigContainer``: the model provider
from the Hugging Face checkpoint's config, the optimizer, DDP, data and logging sections) and
overrides on top. ``run_recipe.py --recipe NAME key=value ...`` applies Hydra-style overrides to
the recipe's container (``process_config_with_overrides``); the same overrides are written as a
YAML (``megatron_bridge_overrides.yaml``), the form ``process_config_with_overrides(config,
config_filepath=...)`` and the examples' ``--config-file`` merge with ``OmegaConf.merge``. Both come
from one mapping (:func:`overrides`); each key is a field of the section's dataclass at v0.3.1
(tests/unit/export/data/megatron_bridge_fields.yaml). Mapping of the plan:

=================  ===========================================================================
model              the recipe of the preset (``RECIPES``: the recipe builds that model from its
                   Hugging Face config, so the model's fields are the recipe's); its shape
                   restated (model.num_layers, hidden_size, ...); any other model is refused
tp, pp, vpp, cp    model.tensor_model_parallel_size, pipeline_model_parallel_size,
                   virtual_pipeline_model_parallel_size (null for vpp 1), context_parallel_size
uneven stages      model.pipeline_model_parallel_layout (Megatron-Core's layout string,
                   export.megatron_model.pipeline_layout), embed-loss as well
ep, etp, sp        model.expert_model_parallel_size, expert_tensor_parallel_size, sequence_parallel
zero 1 / 3         ddp.use_distributed_optimizer; zero 3: ddp.use_megatron_fsdp with
                   data_parallel_sharding_strategy optim_grads_params, model.init_model_with_meta_device,
                   model.gradient_accumulation_fusion false, checkpoint.ckpt_format fsdp_dtensor
hsdp               ddp.num_distributed_optimizer_instances dp·cp/hsdp
overlap            ddp.overlap_grad_reduce / overlap_param_gather and comm_overlap.tp_comm_overlap
                   as the profile's options and overlap fractions (export.megatron.overlap_args)
mbs, gbs, seq      train.micro_batch_size, global_batch_size; dataset.sequence_length, model.seq_length
recompute          model.recompute_granularity / recompute_method / recompute_num_layers /
                   recompute_modules (as Megatron-LM's flags, export.megatron.recompute_args)
offload_layers     model.cpu_offloading, cpu_offloading_num_layers N, activations only
optimizer          optimizer.optimizer adam|sgd; offload: optimizer_cpu_offload,
                   optimizer_offload_fraction 1.0, overlap_cpu_optimizer_d2h_h2d,
                   use_precision_aware_optimizer
precision          mixed_precision fields over the recipe's bf16_mixed: fp8 hybrid, fp8_recipe,
                   fp8_param_gather, fp8_dot_product_attention (fp8_attention), grad_reduce_in_fp32,
                   and every layer in FP8 (the current-scaling
                   recipe's first/last bf16 layers off: the cost model runs all layers in FP8);
                   written whole (``_target_`` MixedPrecisionConfig) where the recipe holds a name
                   (``RECIPE_OBJECTS``)
TP overlap         comm_overlap.tp_comm_overlap; a CommOverlapConfig (``_target_``) where the recipe
                   has none and the plan overlaps, nothing where neither overlaps
MoE dispatch       model.moe_token_dispatcher_type flex + moe_flex_dispatcher_backend deepep (profile
                   option moe_token_dedup; megatron-core 0.16's ``moe_enable_deepep`` is deprecated)
                   or alltoall; moe_grouped_gemm
checkpoint         save/load/save_interval from --checkpoint-dir; without it save and load null (the
                   recipes save into ./nemo_experiments/default/checkpoints and resume from there)
data, tokenizer    dataset.blend / split or dataset.mock (only with --mock-data);
                   tokenizer.tokenizer_type HuggingFaceTokenizer + tokenizer_model, else the
                   script's required DATA_PATH and TOKENIZER
placement          Megatron-Core's default order tp-cp-ep-dp-pp (a header warning otherwise)
=================  ===========================================================================
"""

from __future__ import annotations

import re
from typing import Any

import yaml

from autoplan.export.common import (
    ExportError,
    ExportResult,
    LaunchOptions,
    bash_array,
    check_model_features,
    header_lines,
    launch_shape,
)
from autoplan.export.launch import Entry, LaunchShape, TrialRun, how_to_run, launch_script
from autoplan.export.megatron import (
    assumed_efficiency,
    cuda_graph_impl_and_scope,
    data_words,
    overlap_args,
    overlap_warnings,
    path_lines,
    recompute_args,
)
from autoplan.export.megatron_model import embed_loss_layout, pipeline_layout
from autoplan.export.model_fields import FIELDS, used_fields
from autoplan.export.placement import placement_warning
from autoplan.layout import Layout
from autoplan.profiles import TrainerProfile, load_profile
from autoplan.specs.model import ModelSpec
from autoplan.specs.training import TrainingSpec

TRAINER = "Megatron-Bridge"
OVERRIDES_FILE = "megatron_bridge_overrides.yaml"
LAUNCH_FILE = "megatron_bridge_pretrain.sh"
# autoplan trial: the overrides log every iteration (logger.log_interval 1); the Bridge prints
# Megatron's training_log line, with throughput under LoggerConfig.log_throughput
# (megatron/bridge/training/config.py, utils/train_utils.py).
TRIAL = TrialRun(LAUNCH_FILE, ("logger.log_throughput=true",),
                 lambda layout: {"MEGATRON_BRIDGE": "your Megatron-Bridge checkout (its scripts/training/run_recipe.py)"})
ORDERS = {"default": "tp-cp-dp-pp"}
# Model preset -> the v0.3.1 recipe that builds it (src/megatron/bridge/recipes/*: llama/llama3.py,
# llama/llama2.py, qwen/qwen3.py, qwen/qwen3_moe.py, deepseek/deepseek_v3.py, gpt/gpt3_175b.py).
RECIPES = {"llama2-7b": "llama2_7b_pretrain_config", "llama3-8b": "llama3_8b_pretrain_config",
           "llama3-70b": "llama3_70b_pretrain_config", "llama3.1-405b": "llama31_405b_pretrain_config",
           "llama3.2-1b": "llama32_1b_pretrain_config", "qwen3-8b": "qwen3_8b_pretrain_config",
           "qwen3-30b-a3b": "qwen3_30b_a3b_pretrain_config", "qwen3-235b-a22b": "qwen3_235b_a22b_pretrain_config",
           "deepseek-v3": "deepseek_v3_pretrain_config", "gpt3-175b": "gpt3_175b_pretrain_config"}
# The sections a recipe holds as config objects (Bridge's override merge sets their fields);
# every other recipe keeps recipes/common.py _pretrain_common's comm_overlap=None and
# mixed_precision="bf16_mixed" (a name). Over None or a name, Bridge's overrides
# (training/utils/omegaconf_utils.py process_config_with_overrides) cannot set one field: Hydra
# refuses the key ("Could not override 'mixed_precision.bf16'") and the YAML merge leaves a plain
# dict that runtime_config_update's ``cfg.mixed_precision.finalize()`` fails on. There the section
# is written whole as a ``_target_`` object, which _apply_overrides instantiates
# (utils/instantiate_utils.py). Read from each recipe function at v0.3.1 (``cfg.comm_overlap =
# CommOverlapConfig(...)``, ``cfg.mixed_precision = bf16_mixed()`` / ``MixedPrecisionConfig(...)``).
RECIPE_OBJECTS = {"llama2_7b_pretrain_config": {"comm_overlap"},
                  "llama3_70b_pretrain_config": {"comm_overlap", "mixed_precision"},
                  "llama31_405b_pretrain_config": {"comm_overlap", "mixed_precision"},
                  "deepseek_v3_pretrain_config": {"comm_overlap", "mixed_precision"},
                  "gpt3_175b_pretrain_config": {"comm_overlap", "mixed_precision"}}
TARGETS = {"mixed_precision": "megatron.bridge.training.mixed_precision.MixedPrecisionConfig",
           "comm_overlap": "megatron.bridge.training.comm_overlap.CommOverlapConfig"}
# torch.bfloat16 as Bridge writes a dtype in YAML (utils/yaml_utils.py _torch_dtype_representer)
BF16_DTYPE = {"_target_": "torch.bfloat16", "_call_": False}
# The model fields the export writes beyond the shape: none (the recipe's provider sets them).
MODEL_FIELDS: frozenset[str] = frozenset()
# fp8 recipe -> the training/mixed_precision.py recipe whose fields the export writes (for the header).
MIXED_PRECISION = {"tensorwise": "bf16_with_fp8_current_scaling_mixed", "delayed": "bf16_with_fp8_delayed_scaling_mixed",
                   "blockwise": "bf16_with_fp8_subchannel_scaling_mixed", "mxfp8": "bf16_with_mxfp8_mixed"}

Sections = dict[str, dict[str, Any]]


def render(model: ModelSpec, layout: Layout, training: TrainingSpec, launch: LaunchOptions,
           profile: TrainerProfile | None = None) -> ExportResult:
    """The override YAML and the launch script of this plan (a pure function of its inputs)."""
    profile = profile or load_profile("megatron-bridge")
    recipe = recipe_of(model)
    per_node, nodes = launch_shape(training)
    efficiency = assumed_efficiency(training, profile)
    warnings = (check_model_features(model, training, TRAINER) + _recipe_warnings(model, recipe)
                + overlap_warnings(layout, efficiency) + launch.no_checkpoint_warning(TRAINER))
    order = placement_warning(TRAINER, ORDERS, layout)
    warnings += [order] if order else []
    sections = overrides(model, layout, training, launch, profile, recipe)
    version = f"{TRAINER} {profile.capabilities.version} (scripts/training/run_recipe.py --recipe {recipe})"
    commands = [how_to_run(LAUNCH_FILE, launch.launcher, nodes, "MEGATRON_BRIDGE=/path/to/Megatron-Bridge")]
    head = header_lines(version, model, layout, training, launch=commands, warnings=warnings,
                        prediction=launch.prediction, notes=_notes(layout, training, launch))
    yaml_text = "".join(f"# {line}\n" for line in head) + yaml.safe_dump(sections, sort_keys=False)
    setup = ('MEGATRON_BRIDGE="${MEGATRON_BRIDGE:-.}"\n' + path_lines(launch)
             + bash_array("OVERRIDES", hydra_words(sections) + _path_words(launch)))
    entry = Entry('"$MEGATRON_BRIDGE/scripts/training/run_recipe.py"', setup,
                  f'--recipe {recipe} "${{OVERRIDES[@]}}" "$@"')
    script = launch_script(LaunchShape(per_node, nodes), entry, launch.launcher, head, "autoplan-megatron-bridge")
    return ExportResult({OVERRIDES_FILE: yaml_text, LAUNCH_FILE: script}, warnings)


def recipe_of(model: ModelSpec) -> str:
    """The recipe that builds ``model``: a preset of ``RECIPES`` with the preset's own fields."""
    from autoplan.specs.models import load_model

    if model.name not in RECIPES or model != load_model(model.name):
        raise ExportError(f"the {TRAINER} export writes overrides on a recipe that builds the model; no v0.3.1 recipe "
                          f"builds {model.name!r} (recipes for: {', '.join(RECIPES)})")
    return RECIPES[model.name]


def overrides(m: ModelSpec, lay: Layout, training: TrainingSpec, launch: LaunchOptions,
              profile: TrainerProfile, recipe: str | None = None) -> Sections:
    """Section -> {ConfigContainer field: value} for this plan (the module doc's table), over
    ``recipe`` (default: the model's)."""
    flags = dict(overlap_args(lay, assumed_efficiency(training, profile), profile))
    objects = RECIPE_OBJECTS.get(recipe or recipe_of(m), set())
    sections: Sections = {
        "model": _model(m, lay, training, profile),
        "train": {"train_iters": launch.train_steps, "global_batch_size": lay.gbs_seqs, "micro_batch_size": lay.mbs},
        "ddp": _ddp(lay, flags),
        "optimizer": _optimizer(lay, launch),
        "scheduler": {"lr_warmup_iters": launch.warmup_steps, "lr_decay_style": "cosine"},
        "mixed_precision": _precision(lay, training),
        "comm_overlap": {"tp_comm_overlap": "--tp-comm-overlap" in flags},
        "dataset": _dataset(training, launch),
        "tokenizer": _tokenizer(m, launch),
        "rng": {"seed": launch.seed},
        "logger": {"log_interval": 1},
    }
    if profile.options.moe_a2a_overlap and lay.ep > 1:
        sections["comm_overlap"]["overlap_moe_expert_parallel_comm"] = True
    for name, fields in _cuda_graph_sections(training).items():
        sections.setdefault(name, {}).update(fields)
    checkpoint = {"ckpt_format": "fsdp_dtensor"} if lay.zero == 3 else {}
    if launch.checkpoint_dir:
        checkpoint.update(save=launch.checkpoint_dir, load=launch.checkpoint_dir, save_interval=launch.train_steps)
    else:  # as the header says: no checkpoint (not the recipe's ./nemo_experiments folder)
        checkpoint.update(save=None, load=None)
    sections["checkpoint"] = checkpoint
    for name in ("mixed_precision", "comm_overlap"):
        if name not in objects:
            sections[name] = _whole(name, sections[name])
    return {name: fields for name, fields in sections.items() if fields is not None}


def _whole(name: str, fields: dict[str, Any]) -> dict[str, Any] | None:
    """Section ``name`` as a ``_target_`` object, over a recipe that holds None or a name
    (RECIPE_OBJECTS); a comm_overlap that overlaps nothing stays the recipe's None."""
    if name == "comm_overlap":
        return {"_target_": TARGETS[name], **fields} if any(fields.values()) else None
    # bf16_mixed()'s fields (training/mixed_precision.py), the ones written over them after
    return {"_target_": TARGETS[name], "bf16": True, "params_dtype": dict(BF16_DTYPE),
            "pipeline_dtype": dict(BF16_DTYPE), "autocast_enabled": False, **fields}


def _model(m: ModelSpec, lay: Layout, training: TrainingSpec, profile: TrainerProfile) -> dict[str, Any]:
    out: dict[str, Any] = {
        "tensor_model_parallel_size": lay.tp, "pipeline_model_parallel_size": lay.pp,
        "virtual_pipeline_model_parallel_size": lay.vpp if lay.vpp > 1 else None,
        "context_parallel_size": lay.cp, "expert_model_parallel_size": lay.ep,
        "expert_tensor_parallel_size": lay.etp, "sequence_parallel": bool(lay.sp), "seq_length": training.seq_len,
        "num_layers": m.num_layers, "hidden_size": m.hidden_size, "ffn_hidden_size": m.ffn_hidden_size,
        "num_attention_heads": m.num_attention_heads}
    if m.mla is None:
        out.update(num_query_groups=m.num_kv_heads, kv_channels=m.head_dim)
    if lay.pp_split == "embed-loss":
        out["pipeline_model_parallel_layout"] = embed_loss_layout(m.num_layers, lay.pp, lay.vpp, m.num_mtp_layers)
    elif m.num_layers % (lay.pp * lay.vpp):
        out["pipeline_model_parallel_layout"] = pipeline_layout(m.num_layers, lay.pp, lay.vpp, m.num_mtp_layers)
    out.update(_recompute(lay))
    if lay.offload_layers:
        out.update(cpu_offloading=True, cpu_offloading_num_layers=lay.offload_layers,
                   cpu_offloading_activations=True, cpu_offloading_weights=False)
    if lay.zero == 3:
        out.update(init_model_with_meta_device=True, gradient_accumulation_fusion=False)
    impl, scope = cuda_graph_impl_and_scope(training)
    if impl != "none":  # TransformerConfig fields, as scripts/performance/utils/overrides.py sets them
        out.update(cuda_graph_impl=impl, cuda_graph_scope=scope, use_te_rng_tracker=True)
    if m.moe is not None:
        dedup = profile.options.moe_token_dedup
        out.update(moe_token_dispatcher_type="flex" if dedup else "alltoall", moe_grouped_gemm=profile.options.moe_grouped_gemm)
        if dedup:
            out["moe_flex_dispatcher_backend"] = "deepep"
    return out


def _cuda_graph_sections(training: TrainingSpec) -> Sections:
    """What CUDA graphs need beyond the model's fields (v0.3.1): TE's RNG tracker in ``rng``
    (scripts/performance/utils/overrides.py _set_cuda_graph_overrides), and with the full-iteration
    graph the loss NaN check off (training/config.py asserts
    ``rerun_state_machine.check_for_nan_in_loss`` False with it)."""
    impl, _ = cuda_graph_impl_and_scope(training)
    if impl == "none":
        return {}
    out: Sections = {"rng": {"te_rng_tracker": True}}
    if impl == "local":
        out["rerun_state_machine"] = {"check_for_nan_in_loss": False}
    return out


def _recompute(lay: Layout) -> dict[str, Any]:
    """Megatron-LM's recompute flags (``megatron.recompute_args``) as TransformerConfig fields."""
    flags = dict(recompute_args(lay))
    out: dict[str, Any] = {"recompute_granularity": flags.get("--recompute-granularity")}
    if "--recompute-method" in flags:
        out.update(recompute_method=flags["--recompute-method"], recompute_num_layers=flags["--recompute-num-layers"])
    if "--recompute-modules" in flags:
        out["recompute_modules"] = list(flags["--recompute-modules"])
    return out


def _ddp(lay: Layout, flags: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"use_distributed_optimizer": lay.zero >= 1,
                           "overlap_grad_reduce": "--overlap-grad-reduce" in flags,
                           "overlap_param_gather": "--overlap-param-gather" in flags}
    if lay.zero == 3:
        out.update(use_megatron_fsdp=True, data_parallel_sharding_strategy="optim_grads_params")
    if lay.hsdp:
        out["num_distributed_optimizer_instances"] = lay.dp * lay.cp // lay.hsdp
    return out


def _optimizer(lay: Layout, launch: LaunchOptions) -> dict[str, Any]:
    out: dict[str, Any] = {"optimizer": "adam" if lay.optimizer == "adamw" else lay.optimizer, "lr": launch.lr,
                           "min_lr": launch.min_lr, "weight_decay": launch.weight_decay, "clip_grad": launch.grad_clip}
    if lay.offload == "optimizer":
        out.update(optimizer_cpu_offload=True, optimizer_offload_fraction=1.0, overlap_cpu_optimizer_d2h_h2d=True,
                   use_precision_aware_optimizer=True)
    return out


def _precision(lay: Layout, training: TrainingSpec) -> dict[str, Any]:
    out: dict[str, Any] = {"bf16": True, "grad_reduce_in_fp32": not training.grad_reduce_in_bf16}
    if lay.precision == "fp8":
        out.update(fp8=FP8_FORMAT.get(training.fp8_recipe, "hybrid"), fp8_recipe=training.fp8_recipe,
                   fp8_param_gather=bool(training.fp8_param_gather),
                   fp8_dot_product_attention=bool(training.fp8_attention), **FP8_RECIPE_FIELDS.get(training.fp8_recipe, {}),
                   first_last_layers_bf16=False, num_layers_at_start_in_bf16=0, num_layers_at_end_in_bf16=0)
    return out


# The fields Bridge v0.3.1's own mixed-precision presets set per FP8 recipe
# (megatron/bridge/training/mixed_precision.py): bf16_with_mxfp8_mixed runs E4M3 throughout
# (fp8 "e4m3"; the others "hybrid": E4M3 forward, E5M2 gradients), and
# bf16_with_fp8_delayed_scaling_mixed keeps a 1024-step amax history reduced by max, margin 0.
FP8_FORMAT = {"mxfp8": "e4m3"}
FP8_RECIPE_FIELDS = {"delayed": {"fp8_margin": 0, "fp8_amax_history_len": 1024, "fp8_amax_compute_algo": "max"}}


def _dataset(training: TrainingSpec, launch: LaunchOptions) -> dict[str, Any]:
    """A blend 'w1 p1 w2 p2' as Megatron-Core's blend ([prefixes], [weights]); one prefix with no
    weights; mock data only when asked; else the script's DATA_PATH (``_path_words``)."""
    out: dict[str, Any] = {"sequence_length": training.seq_len}
    if launch.data_path:
        words = data_words(launch.data_path)
        blend = [words[1::2], [float(w) for w in words[0::2]]] if len(words) > 1 else [words, None]
        return {**out, "blend": blend, "split": "99,1,0", "mock": False}
    return {**out, "mock": True} if launch.synthetic else {**out, "split": "99,1,0", "mock": False}


def _tokenizer(m: ModelSpec, launch: LaunchOptions) -> dict[str, Any]:
    if launch.tokenizer:
        return {"tokenizer_type": "HuggingFaceTokenizer", "tokenizer_model": launch.tokenizer}
    if launch.synthetic:
        return {"tokenizer_type": "NullTokenizer", "tokenizer_model": None, "vocab_size": m.vocab_size}
    return {"tokenizer_type": "HuggingFaceTokenizer"}


def _path_words(launch: LaunchOptions) -> list[str]:
    """The overrides that read ``megatron.path_lines``' variables (the same Megatron datasets) (Hydra-quoted inside bash double quotes)."""
    words = []
    if not launch.data_path and not launch.synthetic:
        words.append('"dataset.blend=[[\'${DATA_PATH}\'],null]"')
    if not launch.tokenizer and not launch.synthetic:
        words.append('"tokenizer.tokenizer_model=\'${TOKENIZER}\'"')
    return words


_BARE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]*$")


def hydra_value(value: Any) -> str:
    """A value in Hydra's override grammar: null, true/false, numbers, [a,b], quoted strings."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(hydra_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{key}:{hydra_value(v)}" for key, v in value.items()) + "}"
    text = str(value)
    if _BARE.match(text) and text.lower() not in ("null", "true", "false"):
        return text
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def hydra_words(sections: Sections) -> list[str]:
    """``section.field=value`` for every override, shell-quoted (the same mapping as the YAML);
    a section written whole (``_target_``) as one ``section={...}``."""
    import shlex

    words = []
    for section, fields in sections.items():
        if "_target_" in fields:
            words.append(shlex.quote(f"{section}={hydra_value(fields)}"))
        else:
            words += [shlex.quote(f"{section}.{key}={hydra_value(value)}") for key, value in fields.items()]
    return words


def _recipe_warnings(m: ModelSpec, recipe: str) -> list[str]:
    """The model fields the recipe sets (written by no override), in model_fields.FIELDS' words."""
    used = [f"{name} ({FIELDS[name][0]})" for name in used_fields(m) if name not in MODEL_FIELDS]
    if not used:
        return []
    return [f"{', '.join(used)}: set by the recipe {recipe} from the model's Hugging Face config, not written here"]


def _notes(lay: Layout, training: TrainingSpec, launch: LaunchOptions) -> list[str]:
    notes = [f"overrides also in {OVERRIDES_FILE} (OmegaConf, for process_config_with_overrides(config_filepath=...))"]
    if lay.precision == "fp8":
        notes.append(f"fp8 {training.fp8_recipe}: the fields of {MIXED_PRECISION[training.fp8_recipe]} "
                     "with every layer in FP8 (first_last_layers_bf16 false), as predicted")
    if launch.synthetic:
        notes.append("--mock-data: dataset.mock (Bridge's mock GPT dataset) and NullTokenizer, as asked at export")
    return notes
