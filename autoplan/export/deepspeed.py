"""DeepSpeed: the JSON config (DeepSpeed 0.19.8) and a launch script.

With tp = pp = 1 the plan is plain DeepSpeed ZeRO around the user's training script (a Hugging
Face model, say); with tp or pp > 1 it is Megatron-DeepSpeed (deepspeedai/Megatron-DeepSpeed
master @ 4efb479, 2025-07-16): ``pretrain_gpt.py`` with ``--deepspeed``, the DeepSpeed pipeline
engine when pp > 1 and ``--no-pipeline-parallel`` otherwise. JSON keys are those of
``deepspeed/runtime/config.py`` (``train_batch_size == train_micro_batch_size_per_gpu ×
gradient_accumulation_steps × dp``), ``zero/config.py`` and ``activation_checkpointing/config.py``;
the flags are those of Megatron-DeepSpeed's ``megatron/arguments.py``. JSON has no comments, so the
header (shape, warnings) is in the launch script.
"""

from __future__ import annotations

import json
from pathlib import Path

from autoplan.cost.params import count_params
from autoplan.cost.stages import virtual_stage_layers
from autoplan.export.common import (
    megatron_checkpoint_args,
    check_model_features,
    ExportError,
    ExportResult,
    LaunchOptions,
    bash_array,
    header_lines,
    launch_shape,
    padded_vocab,
    shell_args,
)
from autoplan.export import model_fields
from autoplan.export.launch import Entry, LaunchShape, TrialRun, how_to_run, launch_script, required
from autoplan.export.placement import placement_warning
from autoplan.layout import Layout
from autoplan.specs.model import ModelSpec
from autoplan.specs.training import TrainingSpec

VERSION = "DeepSpeed 0.19.8"
MDS_VERSION = "DeepSpeed 0.19.8 + Megatron-DeepSpeed @ 4efb479"
CONFIG_FILE = "deepspeed_config.json"
LAUNCH_FILE = "deepspeed_launch.sh"
ORDERS = {"topology": "tp-dp-cp-pp"}  # PipeModelDataParallelTopology axes: pipe, data, model

Args = list[tuple[str, object]]


def uses_megatron(layout: Layout) -> bool:
    return layout.tp > 1 or layout.pp > 1


def _trial_paths(layout: Layout) -> dict[str, str]:
    if uses_megatron(layout):
        return {"MEGATRON_DEEPSPEED": "your Megatron-DeepSpeed checkout"}
    return {"TRAIN_SCRIPT": "your DeepSpeed training script (an absolute path: run.sh runs in its folder)"}


def _trial_logging_on(folder: Path) -> None:
    """The JSON's wall-clock breakdown (the fwd/bwd/step timers) and ``log_level: info``:
    DeepSpeed 0.19.8's logger starts at WARNING (``deepspeed/utils/logging.py``) and the engine
    sets the JSON's level (``engine.py``), so without it the ``ThroughputTimer`` line that
    ``calibrate --from-log`` reads (``logger.info``) is never printed under torchrun."""
    from autoplan.report.destination import write_text

    path = folder / CONFIG_FILE
    config = json.loads(path.read_text(encoding="utf-8"))
    config.update(wall_clock_breakdown=True, log_level="info")
    write_text(path, json.dumps(config, indent=2) + "\n")


# autoplan trial: steps_per_print is already 1 in the export; _trial_logging_on adds the rest.
TRIAL = TrialRun(LAUNCH_FILE, (), _trial_paths, _trial_logging_on)


def check_architecture(m: ModelSpec) -> None:
    """Refuse (ExportError) a model with multi-token prediction: transformers' DeepseekV3ForCausalLM
    (5.22.2, what plain DeepSpeed trains) builds no MTP module (num_mtp_layers is read by
    generate(use_mtp=True) only; tests/trainers/test_param_counts.py builds it) and
    Megatron-DeepSpeed has none, so the plan's MTP compute and memory would not run."""
    if m.num_mtp_layers:
        pc = count_params(m)
        raise ExportError(f"DeepSpeed cannot express {m.name!r}: {m.num_mtp_layers} MTP layer(s) "
                          f"({pc.num_mtp_layers * pc.mtp_per_depth:,} parameters): the Hugging Face model builds no "
                          "multi-token-prediction module and Megatron-DeepSpeed has none; give a model file with "
                          "num_mtp_layers: 0, or export to megatron or torchtitan")


def render(model: ModelSpec, layout: Layout, training: TrainingSpec, launch: LaunchOptions,
           profile: object = None) -> ExportResult:
    check_architecture(model)
    per_node, nodes = launch_shape(training)
    # Plain DeepSpeed trains the user's own (Hugging Face) model, windows and all; Megatron-DeepSpeed
    # builds its GPT model from the flags.
    features = check_model_features(model, training, "Megatron-DeepSpeed") if uses_megatron(layout) else []
    warnings = features + _warnings(model, layout) + (
        launch.no_checkpoint_warning("Megatron-DeepSpeed") if uses_megatron(layout) else [])
    config = ds_config(layout, launch, with_optimizer=not uses_megatron(layout), moe=model.moe is not None)
    if model.moe is not None and layout.ep > 1 and not uses_megatron(layout):
        config["expert_parallel"] = autoep_section(model, layout)
    files = {CONFIG_FILE: json.dumps(config, indent=2) + "\n"}
    files[LAUNCH_FILE] = _script(model, layout, training, launch, per_node, nodes, warnings)
    return ExportResult(files, warnings)


def ds_config(lay: Layout, launch: LaunchOptions, *, with_optimizer: bool, moe: bool = False) -> dict[str, object]:
    """The JSON config; MoE with pp and tp > 1 turns off pipe/grad partitioning, which
    Megatron-DeepSpeed's GPTModelPipe asserts (megatron/model/gpt_model.py)."""
    zero: dict[str, object] = {"stage": lay.zero}
    if lay.zero >= 2:
        zero.update(overlap_comm=True, contiguous_gradients=True)
    if lay.offload in ("optimizer", "params"):  # ZeRO-Offload: DeepSpeedCPUAdam / CPULion on the host
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
    if lay.offload == "params":  # ZeRO-Infinity parameter offload (stage 3)
        zero["offload_param"] = {"device": "cpu", "pin_memory": True}
    if lay.hsdp:  # ZeRO++ hierarchical partitioning: a secondary parameter partition over hsdp ranks
        zero["zero_hpz_partition_size"] = lay.hsdp
    config: dict[str, object] = {
        "train_batch_size": lay.gbs_seqs,
        "train_micro_batch_size_per_gpu": lay.mbs,
        "gradient_accumulation_steps": lay.grad_acc,
        "gradient_clipping": launch.grad_clip,
        "zero_optimization": zero,
        "bf16": {"enabled": True},
        "steps_per_print": 1,
        "wall_clock_breakdown": False,
    }
    if moe and lay.pp > 1 and lay.tp > 1:
        config["pipeline"] = {"pipe_partitioned": False, "grad_partitioned": False}
    if lay.recompute == "full":
        config["activation_checkpointing"] = {
            "partition_activations": False, "contiguous_memory_optimization": False,
            "cpu_checkpointing": False, "number_checkpoints": None,
            "synchronize_checkpoint_boundary": False, "profile": False}
    if with_optimizer:
        config["optimizer"] = ds_optimizer(lay, launch)
        if lay.optimizer in TORCH_OPTIMIZERS and lay.zero > 0:
            config["zero_allow_untested_optimizer"] = True  # engine.py: a torch.optim class under ZeRO
        config["scheduler"] = {"type": "WarmupCosineLR", "params": {
            "total_num_steps": launch.train_steps, "warmup_num_steps": launch.warmup_steps,
            "cos_min_ratio": launch.min_lr / launch.lr}}
    return config


# torch.optim classes DeepSpeed builds by name (engine.py _configure_basic_optimizer); the others
# are its own (deepspeed/runtime/config.py DEEPSPEED_OPTIMIZERS).
TORCH_OPTIMIZERS = {"sgd": "SGD", "adafactor": "Adafactor"}


def ds_optimizer(lay: Layout, launch: LaunchOptions) -> dict[str, object]:
    """The ``optimizer`` section: AdamW, Lion, Muon (DeepSpeed's), SGD with momentum or Adafactor
    (torch.optim by name). Muon needs each parameter's ``use_muon`` set by the training script
    (engine.py asserts it; a note in the launch script)."""
    extra: dict[str, object] = {"adamw": {"betas": [0.9, 0.95], "eps": 1e-8}, "lion": {"betas": [0.9, 0.99]},
                                "muon": {"momentum": 0.95}, "sgd": {"momentum": 0.9}, "adafactor": {}}[lay.optimizer]
    params = {"lr": launch.lr, **extra, "weight_decay": launch.weight_decay}
    kind = {"adamw": "AdamW", "lion": "Lion", "muon": "Muon"}.get(lay.optimizer) or TORCH_OPTIMIZERS[lay.optimizer]
    return {"type": kind, "params": params}


AUTOEP_PRESETS = ("mixtral", "qwen3_moe", "deepseek_v3")  # deepspeed/module_inject/auto_ep_presets at 0.19.8
# Each preset's route_norm (top-k weights renormalised), auto_ep_presets/<preset>.py at 0.19.8; the
# JSON's route_norm overrides it (auto_ep_config.py parse_autoep_config, auto_ep_layer.py).
AUTOEP_ROUTE_NORM = {"mixtral": True, "qwen3_moe": True, "deepseek_v3": False}
# The model fields each path writes (autoplan.export.model_fields). Plain DeepSpeed trains the
# Hugging Face model, whose config carries them all, but for the expert bias: the HF router only
# reads e_score_correction_bias, and AutoEP copies it but rejects load_balance_coeff (the update of
# aux-loss-free balancing; auto_ep_presets/base.py), so nothing trains it (a warning); and for
# multi-token prediction: transformers' DeepseekV3ForCausalLM (5.22.2) builds no MTP module
# (num_mtp_layers is read by generate(use_mtp=True) only; the checkpoint's model.layers.61 is
# ignored on load), found by building it (tests/trainers/test_param_counts.py): refused,
# check_architecture.
MODEL_FIELDS = frozenset(name for name in model_fields.FIELDS if name not in ("moe.router_bias", "num_mtp_layers"))
# Megatron-DeepSpeed's GPT model: the flags of megatron_deepspeed_args; the rest is warned
# (_mds_warnings) or refused (architecture_problems, check_model_features).
MDS_MODEL_FIELDS = frozenset({"rope_theta", "norm_eps", "bos_token_id", "eos_token_id", "tied_embeddings",
                              "activation", "norm", "position_embedding", "linear_bias", "moe.aux_loss_coeff"})


def autoep_section(m: ModelSpec, lay: Layout) -> dict[str, object]:
    """AutoEP (``expert_parallel`` in the JSON, ``deepspeed/module_inject/auto_ep_config.py``
    ``parse_autoep_config`` at 0.19.8): DeepSpeed replaces the Hugging Face model's MoE blocks with
    expert-parallel ones over ``autoep_size`` ranks, found by the preset of the model type (other
    types need ``moe_layer_pattern``/``expert_pattern``, a header warning). AutoEP is also what lets
    ZeRO-3 run experts (engine.py refuses native DeepSpeed MoE under ZeRO-3)."""
    section: dict[str, object] = {"enabled": True, "autoep_size": lay.ep, "expert_tensor_parallel_size": 1}
    if m.model_type in AUTOEP_PRESETS:
        section["preset_model"] = m.model_type
        if AUTOEP_ROUTE_NORM[m.model_type] != m.moe.normalize_topk:
            section["route_norm"] = m.moe.normalize_topk
    return section


def megatron_deepspeed_args(m: ModelSpec, lay: Layout, training: TrainingSpec, launch: LaunchOptions) -> Args:
    """Megatron-DeepSpeed ``pretrain_gpt.py`` flags (without --data-path, added by the script)."""
    args: Args = [("--tensor-model-parallel-size", lay.tp), ("--pipeline-model-parallel-size", lay.pp)]
    if lay.pp == 1:
        args.append(("--no-pipeline-parallel", None))
    if lay.sp:
        args.append(("--sequence-parallel", None))
    args += [("--deepspeed", None), ("--deepspeed_config", CONFIG_FILE), ("--zero-stage", lay.zero),
             ("--micro-batch-size", lay.mbs), ("--global-batch-size", lay.gbs_seqs),
             ("--seq-length", training.seq_len), ("--bf16", None)]
    if lay.optimizer == "sgd":
        args.append(("--optimizer", "sgd"))
    if training.attention_kernel == "flash":  # the fused kernel the profile assumes (no s×s scores kept)
        args.append(("--use-flash-attn-v2", None))
    if lay.recompute == "full":
        args += [("--checkpoint-activations", None), ("--deepspeed-activation-checkpointing", None)]
    elif lay.recompute == "selective" and training.attention_kernel != "flash":
        args.append(("--recompute-granularity", "selective"))
    return (args + _mds_model_args(m, lay, training) + _mds_moe_args(m, lay, training.moe_capacity_factor)
            + _mds_schedule_args(m, launch) + megatron_checkpoint_args(launch))


def _mds_model_args(m: ModelSpec, lay: Layout, training: TrainingSpec) -> Args:
    if m.activation == "relu2" or m.norm == "layernorm1p" or m.rotary_percent < 1.0:
        raise ExportError(f"this Megatron-DeepSpeed export writes SwiGLU/GELU models with RMSNorm or LayerNorm "
                          f"and full rotary embeddings; {m.name!r} has a {m.activation} MLP, {m.norm} and "
                          f"rotary_percent {m.rotary_percent} (export it with --trainer megatron)")
    args: Args = [("--num-layers", m.num_layers), ("--hidden-size", m.hidden_size),
                  ("--ffn-hidden-size", m.ffn_hidden_size), ("--num-attention-heads", m.num_attention_heads),
                  ("--num-key-value-heads", m.num_kv_heads),
                  ("--max-position-embeddings", max(m.max_position_embeddings, training.seq_len))]
    if m.head_dim * m.num_attention_heads != m.hidden_size:
        args.append(("--kv-channels", m.head_dim))
    if m.activation == "swiglu":
        args.append(("--swiglu", None))
    args += [("--normalization", m.norm), ("--layernorm-epsilon", m.norm_eps)]
    if m.position_embedding == "rope":
        args += [("--use-rotary-position-embeddings", None),
                 ("--rotary-position-embeddings-theta", round(m.rope_theta))]
    if not m.linear_bias:
        args.append(("--disable-bias-linear", None))
    if not m.tied_embeddings:
        args.append(("--untie-embeddings-and-output-weights", None))
    return args + [("--attention-dropout", 0.0), ("--hidden-dropout", 0.0)]


def _mds_moe_args(m: ModelSpec, lay: Layout, capacity_factor: float | None) -> Args:
    if m.moe is None:
        return []
    args: Args = [("--num-experts", m.moe.num_experts), ("--moe-expert-parallel-size", lay.ep),
                  ("--topk", m.moe.num_experts_per_token), ("--expert-interval", 1),
                  ("--moe-loss-coeff", m.moe.aux_loss_coeff)]
    if lay.etp > 1:
        args.append(("--enable-expert-tensor-parallelism", None))
    # The plan's routing: dropless (no capacity factor) -> drop_tokens=False in DeepSpeed's MoE
    # (megatron/model/transformer.py passes args.moe_token_dropping, default True with
    # --moe-train-capacity-factor 1.0, megatron/arguments.py); else the plan's capacity factor.
    if capacity_factor is None:
        return args + [("--disable-moe-token-dropping", None)]
    return args + [("--moe-train-capacity-factor", float(capacity_factor))]


def _mds_schedule_args(m: ModelSpec, launch: LaunchOptions) -> Args:
    tokenizer: Args = ([("--tokenizer-type", "HFTokenizer"), ("--tokenizer-model", launch.tokenizer)]
                       if launch.tokenizer else
                       [("--tokenizer-type", "HFTokenizer")])  # --tokenizer-model: the script's TOKENIZER
    return tokenizer + [
        ("--make-vocab-size-divisible-by", 1), ("--split", "99,1,0"),
        ("--train-iters", launch.train_steps), ("--lr", launch.lr), ("--min-lr", launch.min_lr),
        ("--lr-warmup-iters", launch.warmup_steps), ("--lr-decay-style", "cosine"),
        ("--weight-decay", launch.weight_decay), ("--clip-grad", launch.grad_clip),
        ("--seed", launch.seed), ("--log-interval", 1), ("--distributed-backend", "nccl")]


def _script(m: ModelSpec, lay: Layout, training: TrainingSpec, launch: LaunchOptions, per_node: int, nodes: int,
            warnings: list[str]) -> str:
    if uses_megatron(lay):
        # Megatron-DeepSpeed has no synthetic data set (no --mock-data in megatron/arguments.py)
        data = required("DATA_PATH", "a Megatron .bin/.idx prefix", launch.data_path)
        if not launch.tokenizer:
            data += required("TOKENIZER", "a Hugging Face tokenizer name or path (or export with --tokenizer)")
        words = shell_args(megatron_deepspeed_args(m, lay, training, launch)) + ['--data-path "$DATA_PATH"']
        words += [] if launch.tokenizer else ['--tokenizer-model "$TOKENIZER"']
        commands = [how_to_run(LAUNCH_FILE, launch.launcher, nodes, "MEGATRON_DEEPSPEED=/path/to/Megatron-DeepSpeed")]
        setup = 'MEGATRON_DEEPSPEED="${MEGATRON_DEEPSPEED:-.}"\n' + data + bash_array("ARGS", words)
        entry = Entry('"$MEGATRON_DEEPSPEED/pretrain_gpt.py"', setup, '"${ARGS[@]}" "$@"')
        version = MDS_VERSION
    else:
        commands = [how_to_run(LAUNCH_FILE, launch.launcher, nodes, "TRAIN_SCRIPT=your_train.py"),
                    "the script must call deepspeed.initialize(config=...) with its model, or be a Hugging "
                    f"Face Trainer script given --deepspeed {CONFIG_FILE}"]
        setup = (required("TRAIN_SCRIPT", "your DeepSpeed training script")
                 + (required("CHECKPOINT_DIR", "", launch.checkpoint_dir) + "export CHECKPOINT_DIR\n"
                    if launch.checkpoint_dir else "")
                 + bash_array("ARGS", shell_args([("--deepspeed", None), ("--deepspeed_config", CONFIG_FILE)])))
        entry = Entry('"$TRAIN_SCRIPT"', setup, '"${ARGS[@]}" "$@"')
        version = VERSION
    head = header_lines(version, m, lay, training, launch=commands, warnings=warnings,
                        notes=_notes(lay, training) + _stage_notes(m, lay), prediction=launch.prediction)
    return launch_script(LaunchShape(per_node, nodes), entry, launch.launcher, head, "autoplan-deepspeed")


def _stage_notes(m: ModelSpec, lay: Layout) -> list[str]:
    """Where the layers fall when they do not divide into pp stages: DeepSpeed's PipelineModule cuts
    them itself (Megatron-DeepSpeed's partition_method 'type:transformer', extra layers on the first
    stages: autoplan/rules/stages.py), the split the prediction assumed."""
    if lay.pp == 1 or m.num_layers % lay.pp == 0:
        return []
    split = virtual_stage_layers(m.num_layers, lay.pp, 1)
    return [f"pipeline stages hold {', '.join(map(str, split))} transformer layers: DeepSpeed's "
            "partition_method 'type:transformer' makes this split itself (no flag), as the prediction assumed"]


def _notes(lay: Layout, training: TrainingSpec) -> list[str]:
    if uses_megatron(lay):
        notes = ["the optimizer comes from Megatron-DeepSpeed's flags, so the JSON has none"
                 + (" (--optimizer sgd)" if lay.optimizer == "sgd" else "")]
        if lay.recompute == "selective" and training.attention_kernel == "flash":
            notes.append("recompute=selective: with flash attention Megatron-DeepSpeed's selective recompute "
                         "checkpoints nothing (megatron/model/transformer.py sets checkpoint_core_attention "
                         "only for unfused attention), as the prediction assumes; no flag is written")
        return notes
    notes = [f"build the model with the shape above; the JSON holds batch, ZeRO-{lay.zero} and precision",
             "checkpoints are the training script's (model_engine.save_checkpoint / load_checkpoint); "
             "--checkpoint-dir exports CHECKPOINT_DIR to it"]
    if lay.optimizer == "muon":
        notes.append("optimizer Muon: set p.use_muon = True on the 2-D hidden matrices and False on the "
                     "embedding, head and norms before deepspeed.initialize (engine.py asserts it)")
    if lay.recompute == "full":
        notes.append("full recompute: call model.gradient_checkpointing_enable() (Hugging Face) or wrap "
                     "layers with deepspeed.checkpointing.checkpoint")
    # The attention kernel is the training script's (transformers from_pretrained attn_implementation)
    implementation = "eager" if training.attention_kernel == "eager" else "sdpa"
    notes.append(f"attention_kernel={training.attention_kernel}: load the Hugging Face model with "
                 f"attn_implementation='{implementation}', the kernel the prediction assumed")
    return notes


def _warnings(m: ModelSpec, lay: Layout) -> list[str]:
    warnings = []
    order = placement_warning("DeepSpeed", ORDERS, lay)
    if order:
        warnings.append(order)
    if lay.recompute == "selective" and not uses_megatron(lay):
        warnings.append("recompute=selective: plain DeepSpeed has no selective recompute; exported "
                        "without recompute")
    if m.moe is not None and lay.ep > 1 and not uses_megatron(lay) and m.model_type not in AUTOEP_PRESETS:
        warnings.append(f"AutoEP has no preset for model_type {m.model_type!r}: add moe_layer_pattern, "
                        "expert_pattern and router_pattern to the JSON's expert_parallel section")
    if m.moe is not None and m.moe.router_bias and not uses_megatron(lay):
        warnings.append("the model's expert bias (e_score_correction_bias, aux-loss-free balancing) steers the "
                        "routing but nothing updates it: the Hugging Face router only reads it and DeepSpeed "
                        "0.19.8's AutoEP rejects load_balance_coeff (auto_ep_presets/base.py)")
    warnings += _mds_warnings(m, lay) if uses_megatron(lay) else []
    return warnings


def _mds_warnings(m: ModelSpec, lay: Layout) -> list[str]:
    warnings = []
    # latent attention, shared experts, dense leading layers and a separate expert width are
    # refused by the rule table (rules/deepspeed.py megatron_deepspeed_model): they size the model
    if m.qk_norm or (m.qkv_bias and not m.linear_bias):
        warnings.append("Megatron-DeepSpeed's GPT model has no q/k norms or q/k/v-only biases; those "
                        "parts of the model are not expressed")
    if m.rope_scaling:
        warnings.append(f"rope_scaling {m.rope_scaling_dict} has no Megatron-DeepSpeed flag; RoPE is unscaled")
    moe = m.moe
    differ = [] if moe is None else [text for bad, text in [
        (moe.score_function != "softmax", f"{moe.score_function} scores"),
        (moe.router_bias, "an expert bias (e_score_correction_bias)"),
        (moe.num_expert_groups > 1, f"group-limited routing ({moe.num_limited_groups} of {moe.num_expert_groups} groups)"),
        (moe.routed_scaling_factor != 1.0, f"routed scaling {moe.routed_scaling_factor}"),
        (moe.aux_loss_per_sequence, "a per-sequence balance loss")] if bad]
    if differ:
        warnings.append("Megatron-DeepSpeed's top-k gate (softmax, no groups, bias or scaling; a batch-wise "
                        "balance loss) cannot express the model's " + ", ".join(differ))
    padded = padded_vocab(m.vocab_size, lay.tp)
    if padded != m.vocab_size:
        warnings.append(f"the vocabulary is padded from {m.vocab_size} to {padded} so that tp={lay.tp} "
                        "divides it")
    return warnings
