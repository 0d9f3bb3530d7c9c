"""nanotron: the YAML config of ``run_train.py``, pinned to nanotron main @ 2411b022 (2026-04-07).

Field names are those of ``src/nanotron/config/{config,parallelism_config,models_config}.py`` and
follow ``examples/config_tiny_llama.yaml``. Mapping: dp/tp/pp as they are, ``pp_engine: 1f1b``,
``tp_mode: REDUCE_SCATTER`` (sequence parallel) or ``ALL_REDUCE``,
``tp_linear_async_communication`` with sequence parallel, ``recompute_layer`` for full recompute,
``tokens.micro_batch_size = mbs``, ``tokens.batch_accumulation_per_replica = grad_acc``,
``optimizer.zero_stage = zero``. Llama-shaped models use ``LlamaConfig``; Qwen and MoE models use
``Qwen2Config`` (with ``moe_config``). From the model: ``rope_theta``, ``rms_norm_eps``,
``bos/eos_token_id``, ``tie_word_embeddings``, ``attention_bias``, ``router_aux_loss_coef``; RoPE
scaling and the MoE routing nanotron cannot take are header warnings (:func:`model_warnings`).
"""

from __future__ import annotations


import yaml

from autoplan.export.common import (
    check_model_features,
    ExportError,
    ExportResult,
    LaunchOptions,
    commented,
    header_lines,
    launch_shape,
    padded_vocab,
)
from autoplan.export.launch import Entry, LaunchShape, TrialRun, how_to_run, launch_script, required
from autoplan.export.placement import placement_warning
from autoplan.layout import Layout
from autoplan.specs.model import ModelSpec
from autoplan.specs.training import TrainingSpec

VERSION = "nanotron main @ 2411b022 (2026-04-07; package version 0.4)"
FILE_NAME = "nanotron_config.yaml"
LAUNCH_FILE = "nanotron_launch.sh"
# autoplan trial: the export's iteration_step_info_interval is already 1 (a step line each step).
TRIAL = TrialRun(LAUNCH_FILE, (), lambda layout: {"NANOTRON": "your nanotron checkout (its run_train.py)"})
ORDERS = {"context": "tp-cp-dp-pp"}  # ParallelContext: ranks reshaped as (ep, pp, dp, cp, tp)
# The model fields the config writes (autoplan.export.model_fields); the others are refused
# (check_architecture) or warned (model_warnings).
MODEL_FIELDS = frozenset({"rope_theta", "norm_eps", "bos_token_id", "eos_token_id", "tied_embeddings", "qkv_bias"})
DEFAULT_TOKEN_IDS = (1, 2)  # LlamaConfig/Qwen2Config defaults, used when the model gives none


def render(model: ModelSpec, layout: Layout, training: TrainingSpec, launch: LaunchOptions,
           profile: object = None) -> ExportResult:
    per_node, nodes = launch_shape(training)
    warnings = check_model_features(model, training, "nanotron") + _warnings(model, layout)
    config = {
        "general": {"project": "autoplan", "run": "autoplan_%date_%jobid", "seed": launch.seed,
                    "step": None, "consumed_train_samples": None, "benchmark_csv_path": None,
                    "ignore_sanity_checks": True},
        "parallelism": parallelism(layout),
        "model": {"ddp_bucket_cap_mb": 25, "dtype": "bfloat16", "init_method": {"std": 0.02},
                  "make_vocab_size_divisible_by": 1, "model_config": model_config(model, layout, training)},
        "tokenizer": {"tokenizer_name_or_path": launch.tokenizer, "tokenizer_revision": None,
                      "tokenizer_max_length": None},
        "checkpoints": {"checkpoints_path": launch.checkpoint_dir or PLACEHOLDER.format("CHECKPOINT_DIR"),
                        "checkpoint_interval": launch.train_steps,
                        "checkpoints_path_is_shared_file_system": False, "resume_checkpoint_path": None,
                        "save_initial_state": False},
        "logging": {"iteration_step_info_interval": 1, "log_level": "info", "log_level_replica": "info"},
        "tokens": tokens(layout, training, launch),
        "optimizer": optimizer(layout, launch),
        "data_stages": [{"name": "Stable Training Stage", "start_training_step": 1,
                         "data": _data(launch)}],
        "profiler": None,
        "lighteval": None,
    }
    commands = [how_to_run(LAUNCH_FILE, launch.launcher, nodes, "NANOTRON=/path/to/nanotron")]
    notes = ["nanotron assigns layers to pipeline stages itself, balancing the embedding and LM head too"]
    if launch.data_path:
        notes.append("the data set is read with Hugging Face datasets (text column 'text')")
    elif launch.synthetic:
        notes.append("dataset null = nanotron's dummy data generator (--mock-data)")
    if _from_env(launch):
        names = " and ".join(_from_env(launch))
        notes.append(f"the launch script requires {names} and writes them over the set-NAME placeholders in a "
                     "copy of this file (never dummy data unless exported with --mock-data)")
    head = header_lines(VERSION, model, layout, training, launch=commands, notes=notes, warnings=warnings,
                        prediction=launch.prediction)
    text = commented(head) + yaml.safe_dump(config, sort_keys=False, default_flow_style=False)
    setup = ("export CUDA_DEVICE_MAX_CONNECTIONS=1  # as nanotron's README launches run_train.py\n"
             'NANOTRON="${NANOTRON:-.}"\n' + f'CONFIG_FILE="${{EXPORT_DIR:-$PWD}}/{FILE_NAME}"\n')
    for name in _from_env(launch):
        setup += required(name, REQUIRED_PATHS[name]) + f"export {name}\n"
    setup += FILL_PLACEHOLDERS if _from_env(launch) else ""
    entry = Entry('"$NANOTRON/run_train.py"', setup, '--config-file "$CONFIG_FILE" "$@"')
    script = launch_script(LaunchShape(per_node, nodes), entry, launch.launcher, head, "autoplan-nanotron")
    return ExportResult({FILE_NAME: text, LAUNCH_FILE: script}, warnings)


def parallelism(lay: Layout) -> dict[str, object]:
    return {"dp": lay.dp, "tp": lay.tp, "pp": lay.pp, "pp_engine": "afab" if lay.pp_schedule == "afab" else "1f1b",
            "tp_mode": "REDUCE_SCATTER" if lay.sp else "ALL_REDUCE",
            "tp_linear_async_communication": lay.sp, "recompute_layer": lay.recompute == "full",
            "expert_parallel_size": lay.ep, "context_parallel_size": lay.cp}


def tokens(lay: Layout, training: TrainingSpec, launch: LaunchOptions) -> dict[str, object]:
    return {"sequence_length": training.seq_len, "train_steps": launch.train_steps,
            "micro_batch_size": lay.mbs, "batch_accumulation_per_replica": lay.grad_acc,
            "val_check_interval": -1, "limit_val_batches": 0, "limit_test_batches": 0}


def optimizer(lay: Layout, launch: LaunchOptions) -> dict[str, object]:
    return {"zero_stage": lay.zero, "weight_decay": launch.weight_decay, "clip_grad": launch.grad_clip,
            "accumulate_grad_in_fp32": True,
            "learning_rate_scheduler": {"learning_rate": launch.lr, "lr_warmup_steps": launch.warmup_steps,
                                        "lr_warmup_style": "linear", "lr_decay_style": "cosine",
                                        "min_decay_lr": launch.min_lr},
            "optimizer_factory": ({"name": "sgd"} if lay.optimizer == "sgd" else  # SGDOptimizerArgs
                                  {"name": "adamW", "adam_beta1": 0.9, "adam_beta2": 0.95,
                                   "adam_eps": 1.0e-8, "torch_adam_is_fused": True})}


def model_config(m: ModelSpec, lay: Layout, training: TrainingSpec) -> dict[str, object]:
    """``LlamaConfig`` for Llama-shaped dense models, ``Qwen2Config`` for Qwen and MoE models."""
    check_architecture(m)
    config: dict[str, object] = {
        "hidden_act": "silu", "hidden_size": m.hidden_size, "intermediate_size": m.ffn_hidden_size,
        "num_hidden_layers": m.num_layers, "num_attention_heads": m.num_attention_heads,
        "num_key_value_heads": m.num_kv_heads,
        "max_position_embeddings": max(m.max_position_embeddings, training.seq_len),
        "vocab_size": m.vocab_size, "tie_word_embeddings": m.tied_embeddings,
        "rms_norm_eps": m.norm_eps, "rope_theta": m.rope_theta, "rope_scaling": None, "rope_interleaved": False,
        "attention_bias": m.qkv_bias, "initializer_range": 0.02, "pretraining_tp": 1, "use_cache": True,
        "bos_token_id": DEFAULT_TOKEN_IDS[0] if m.bos_token_id is None else m.bos_token_id,
        "eos_token_id": DEFAULT_TOKEN_IDS[1] if m.eos_token_id is None else m.eos_token_id, "pad_token_id": None}
    if m.moe is None and m.model_type not in ("qwen2", "qwen3"):
        return {**config, "is_llama_config": True}
    config["is_qwen2_config"] = True
    if m.moe is not None:
        moe = m.moe
        config["moe_config"] = {
            "num_experts": moe.num_experts, "top_k": moe.num_experts_per_token,
            "moe_intermediate_size": moe.expert_ffn_hidden_size,
            "shared_expert_intermediate_size": moe.num_shared_experts * moe.shared_expert_ffn_hidden_size,
            "enable_shared_expert": moe.num_shared_experts > 0,
            "layers": list(range(moe.num_dense_layers, m.num_layers)) if moe.num_dense_layers else [-1],
            "router_aux_loss_coef": moe.aux_loss_coeff, "token_dispatcher_type": "alltoall"}
    return config


def check_architecture(m: ModelSpec) -> None:
    problems = [reason for bad, reason in [
        (m.mla is not None, "latent attention (MLA)"), (m.activation != "swiglu", f"{m.activation} MLP"),
        (m.norm != "rmsnorm", m.norm), (m.position_embedding != "rope", f"{m.position_embedding} positions"),
        (m.linear_bias, "biases on every linear layer"),
        (m.qk_norm, "q/k RMSNorms (Qwen2Config has none)"),
        (m.head_dim * m.num_attention_heads != m.hidden_size,
         f"head_dim {m.head_dim} != hidden/heads = {m.hidden_size}/{m.num_attention_heads}")] if bad]
    if problems:
        raise ExportError(f"nanotron's LlamaConfig/Qwen2Config cannot express {m.name!r}: "
                          + ", ".join(problems))


# A path the export was not given is a placeholder ``set-NAME`` in the YAML, which the launch
# script replaces by the required environment variable NAME in a copy of the file (run directly,
# the placeholder fails: no data set or folder of that name). Without --data-path (and without
# --mock-data) that is DATA_PATH: dataset null would be nanotron's dummy data generator
# (src/nanotron/data/dataloader.py); without --checkpoint-dir CHECKPOINT_DIR, as nanotron requires
# checkpoints.checkpoints_path (src/nanotron/config/config.py CheckpointsArgs).
PLACEHOLDER = "set-{}"
REQUIRED_PATHS = {"DATA_PATH": "a Hugging Face dataset name or path (or export with --data-path or --mock-data)",
                  "CHECKPOINT_DIR": "the folder nanotron saves checkpoints in (or export with --checkpoint-dir)"}
FILL_PLACEHOLDERS = ('FILLED="$(mktemp -t nanotron_config.XXXXXX.yaml)"\n'
                     'python3 - "$CONFIG_FILE" "$FILLED" <<\'PY\'\n'
                     "import os, sys, yaml\n"
                     "def fill(node):\n"
                     "    if isinstance(node, dict):\n"
                     "        return {key: fill(value) for key, value in node.items()}\n"
                     "    if isinstance(node, list):\n"
                     "        return [fill(value) for value in node]\n"
                     "    if isinstance(node, str) and node.startswith('set-') and node[4:] in os.environ:\n"
                     "        return os.environ[node[4:]]\n"
                     "    return node\n"
                     "yaml.safe_dump(fill(yaml.safe_load(open(sys.argv[1]))), open(sys.argv[2], 'w'), sort_keys=False)\n"
                     "PY\n"
                     'CONFIG_FILE="$FILLED"\n')


def _from_env(launch: LaunchOptions) -> list[str]:
    """The paths the launch script takes from the environment (REQUIRED_PATHS)."""
    return [name for name, missing in [("DATA_PATH", _data_from_env(launch)),
                                       ("CHECKPOINT_DIR", not launch.checkpoint_dir)] if missing]


def _data_from_env(launch: LaunchOptions) -> bool:
    """No data path and no --mock-data: the launch script fills in DATA_PATH."""
    return not launch.data_path and not launch.mock_data


def _data(launch: LaunchOptions) -> dict[str, object]:
    dataset = None  # nanotron's dummy data: only with --mock-data
    path = PLACEHOLDER.format("DATA_PATH") if _data_from_env(launch) else launch.data_path
    if path:
        dataset = {"hf_dataset_or_datasets": path, "hf_dataset_splits": "train",
                   "hf_dataset_config_name": None, "text_column_name": "text",
                   "dataset_processing_num_proc_per_process": 1, "dataset_overwrite_cache": False}
    return {"dataset": dataset, "seed": launch.seed, "num_loading_workers": 1}


def model_warnings(m: ModelSpec) -> list[str]:
    """What nanotron's LlamaConfig/Qwen2Config and its MoE router cannot take from the model
    (``src/nanotron/nn/moe.py``: softmax over all experts, top-k weights not renormalised, no
    balance loss, no groups, bias or scaling)."""
    warnings = []
    if m.rope_scaling:
        warnings.append(f"rope_scaling {m.rope_scaling_dict} is not applied: nanotron's models have no "
                        "RoPE scaling (rope_scaling: null)")
    if m.bos_token_id is None or m.eos_token_id is None:
        warnings.append(f"the model gives no bos/eos token id; nanotron's defaults {DEFAULT_TOKEN_IDS} are "
                        "written: set them from the tokenizer")
    if m.num_mtp_layers:
        warnings.append(f"{m.num_mtp_layers} MTP layer(s): nanotron has no multi-token prediction; the model "
                        "is trained without it")
    moe = m.moe
    if moe is not None:
        differ = [text for bad, text in [
            (moe.score_function != "softmax", f"{moe.score_function} scores"),
            (moe.normalize_topk, "renormalised top-k weights"),
            (moe.routed_scaling_factor != 1.0, f"routed scaling {moe.routed_scaling_factor}"),
            (moe.num_expert_groups > 1,
             f"group-limited routing ({moe.num_limited_groups} of {moe.num_expert_groups} groups)"),
            (moe.router_bias, "an expert bias (aux-loss-free balancing)"),
            (moe.aux_loss_coeff > 0, f"a balance loss of weight {moe.aux_loss_coeff}")] if bad]
        if differ:
            warnings.append("nanotron's router (softmax over all experts, top-k weights as they are, no "
                            "balance loss) cannot express the model's " + ", ".join(differ))
    return warnings


def _warnings(m: ModelSpec, lay: Layout) -> list[str]:
    warnings = model_warnings(m)
    order = placement_warning("nanotron", ORDERS, lay)
    if order:
        warnings.append(order)
    if lay.recompute == "selective":
        warnings.append("recompute=selective: nanotron has no selective recompute (only "
                        "recompute_layer for full); exported without recompute")
    padded = padded_vocab(m.vocab_size, lay.tp)
    if padded != m.vocab_size:
        warnings.append(f"nanotron pads the vocabulary from {m.vocab_size} to {padded} so that "
                        f"tp={lay.tp} divides it")
    return warnings
