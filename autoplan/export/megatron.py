"""Megatron-LM: a bash launch script for ``pretrain_gpt.py`` (torchrun), pinned to core_v0.15.3.

Every flag below exists in ``megatron/training/arguments.py`` at tag core_v0.15.3 (checked
against that file); every value is shell-quoted. Mapping of the layout:

=================  ===========================================================================
tp, pp, cp         --tensor-model-parallel-size, --pipeline-model-parallel-size,
                   --context-parallel-size
vpp                --num-layers-per-virtual-pipeline-stage layers/(pp·vpp)
uneven stages      --pipeline-model-parallel-layout with the cost model's split (extra layers
                   to early stages, autoplan.cost.stages.virtual_stage_layers), vpp included
ep, etp            --expert-model-parallel-size, --expert-tensor-parallel-size (always given:
                   Megatron's default etp is tp)
sp                 --sequence-parallel
zero 1             --use-distributed-optimizer
zero 3             Megatron-FSDP: --use-megatron-fsdp --data-parallel-sharding-strategy
                   optim_grads_params (+ the flags its docs require)
mbs, gbs           --micro-batch-size, --global-batch-size (grad_acc = gbs/(mbs·dp))
recompute          selective: --recompute-granularity selective (Megatron's default core_attn),
                   with recompute_modules --recompute-modules m1 m2 ...;
                   full: --recompute-granularity full --recompute-method uniform
                   --recompute-num-layers 1, with recompute_layers N --recompute-method block
                   --recompute-num-layers N (N layers of each virtual stage)
offload_layers     refused by the rules: core_v0.15.3 has no --cpu-offloading-num-layers
precision          --bf16, and --fp8-format hybrid for fp8
placement          default order tp-cp-ep-dp-pp, or --use-tp-pp-dp-mapping (tp-cp-ep-pp-dp)
=================  ===========================================================================
"""

from __future__ import annotations

import itertools

from autoplan.cost.stages import virtual_stage_layers
from autoplan.export.common import (
    ExportResult,
    LaunchOptions,
    bash_array,
    commented,
    header_lines,
    launch_shape,
    padded_vocab,
    shell_args,
)
from autoplan.export.placement import matching_order, placement_warning
from autoplan.layout import Layout
from autoplan.specs.model import ModelSpec
from autoplan.specs.training import TrainingSpec

VERSION = "Megatron-LM core_v0.15.3 (pretrain_gpt.py)"
FILE_NAME = "megatron_pretrain_gpt.sh"
ORDERS = {"default": "tp-cp-dp-pp", "--use-tp-pp-dp-mapping": "tp-cp-pp-dp"}

Args = list[tuple[str, object]]


def render(model: ModelSpec, layout: Layout, training: TrainingSpec, launch: LaunchOptions) -> ExportResult:
    """The launch script for this plan (a pure function of its inputs)."""
    per_node, nodes = launch_shape(training)
    warnings = _warnings(model, layout)
    args = (parallel_args(layout) + batch_args(layout, training) + recompute_args(layout)
            + precision_args(layout, training) + model_args(model, layout, training) + vocab_args(model, layout, launch)
            + data_args(launch) + schedule_args(launch))
    commands = [f"MEGATRON_LM=/path/to/Megatron-LM NODE_RANK=<0..{nodes - 1}> MASTER_ADDR=<node 0> "
              f"bash {FILE_NAME}  (on each of the {nodes} node(s))"]
    head = header_lines(VERSION, model, layout, training, launch=commands, warnings=warnings,
                        notes=_notes(model, layout, training, launch))
    env = ""
    if (layout.tp > 1 or layout.cp > 1) and layout.zero != 3:
        env = "export CUDA_DEVICE_MAX_CONNECTIONS=1  # required with TP or CP before Blackwell\n"
    script = ("#!/usr/bin/env bash\n" + commented(head) + "set -euo pipefail\n" + env
              + 'MEGATRON_LM="${MEGATRON_LM:-.}"\n'
              + f"NPROC_PER_NODE={per_node}\nNNODES={nodes}\n"
              + bash_array("ARGS", shell_args(args))
              + 'exec torchrun --nproc-per-node "$NPROC_PER_NODE" --nnodes "$NNODES" '
              + '--node-rank "${NODE_RANK:-0}" \\\n'
              + '    --master-addr "${MASTER_ADDR:-localhost}" --master-port "${MASTER_PORT:-6000}" \\\n'
              + '    "$MEGATRON_LM/pretrain_gpt.py" "${ARGS[@]}" "$@"\n')
    return ExportResult({FILE_NAME: script}, warnings)


def parallel_args(lay: Layout) -> Args:
    args: Args = [("--tensor-model-parallel-size", lay.tp), ("--pipeline-model-parallel-size", lay.pp),
                  ("--context-parallel-size", lay.cp)]
    if lay.sp:
        args.append(("--sequence-parallel", None))
    if lay.zero == 1:
        args.append(("--use-distributed-optimizer", None))
    elif lay.zero == 3:
        args += [("--use-megatron-fsdp", None), ("--data-parallel-sharding-strategy", "optim_grads_params"),
                 ("--no-gradient-accumulation-fusion", None), ("--use-distributed-optimizer", None),
                 ("--ckpt-format", "fsdp_dtensor")]
    if matching_order(ORDERS, lay) == "--use-tp-pp-dp-mapping":  # the default order is tried first
        args.append(("--use-tp-pp-dp-mapping", None))
    return args


def batch_args(lay: Layout, training: TrainingSpec) -> Args:
    return [("--micro-batch-size", lay.mbs), ("--global-batch-size", lay.gbs_seqs),
            ("--seq-length", training.seq_len)]


def recompute_args(lay: Layout) -> Args:
    if lay.recompute == "selective":
        modules: Args = [("--recompute-modules", lay.recompute_modules.split(","))] if lay.recompute_modules else []
        return [("--recompute-granularity", "selective"), *modules]
    if lay.recompute == "full" and lay.recompute_layers:
        return [("--recompute-granularity", "full"), ("--recompute-method", "block"),
                ("--recompute-num-layers", lay.recompute_layers)]
    if lay.recompute == "full":
        return [("--recompute-granularity", "full"), ("--recompute-method", "uniform"),
                ("--recompute-num-layers", 1)]
    return []


def precision_args(lay: Layout, training: TrainingSpec) -> Args:
    """bf16 with, under fp8, the setup's recipe; the memory settings the prediction assumed:
    ``--fp8-param-gather``, ``--grad-reduce-in-bf16`` and the attention backend (eager ->
    ``unfused``, Megatron's AttnBackend; flash -> ``auto``, its default: fused or flash)."""
    args: Args = [("--bf16", None)]
    if lay.precision == "fp8":
        args += [("--fp8-format", "hybrid"), ("--fp8-recipe", training.fp8_recipe)]
        if training.fp8_param_gather:
            args.append(("--fp8-param-gather", None))
    if training.grad_reduce_in_bf16:
        args.append(("--grad-reduce-in-bf16", None))
    if training.attention_kernel == "eager":
        args.append(("--attention-backend", "unfused"))
    return args


def model_args(m: ModelSpec, lay: Layout, training: TrainingSpec) -> Args:
    """The model shape as Megatron flags (and the virtual-stage size, which needs the layers)."""
    args: Args = [("--num-layers", m.num_layers), ("--hidden-size", m.hidden_size),
                  ("--ffn-hidden-size", m.ffn_hidden_size), ("--num-attention-heads", m.num_attention_heads)]
    if lay.pp_split == "embed-loss":
        args.append(("--pipeline-model-parallel-layout", embed_loss_layout(m.num_layers, lay.pp, lay.vpp)))
    elif m.num_layers % (lay.pp * lay.vpp):
        args.append(("--pipeline-model-parallel-layout", pipeline_layout(m.num_layers, lay.pp, lay.vpp)))
    elif lay.vpp > 1:
        args.append(("--num-layers-per-virtual-pipeline-stage", m.num_layers // (lay.pp * lay.vpp)))
    if m.num_kv_heads < m.num_attention_heads and m.mla is None:
        args += [("--group-query-attention", None), ("--num-query-groups", m.num_kv_heads)]
    if m.mla is None and m.head_dim * m.num_attention_heads != m.hidden_size:
        args.append(("--kv-channels", m.head_dim))
    args.append(("--max-position-embeddings", max(m.max_position_embeddings, training.seq_len)))
    args += _architecture_args(m) + _mla_args(m) + _moe_args(m, lay, training)
    return args


def pipeline_layout(num_layers: int, pp: int, vpp: int) -> str:
    """Megatron's layout string for unequal stages, e.g. 'E(t*4|)*2t*3|t*3L' for 14 layers on 4
    stages: stages split by '|', E the embedding, t a decoder layer, L the loss, 'x*n' and
    '(...)*n' repeat (``megatron/core/transformer/pipeline_parallel_layer_layout.py``,
    ``parse_str_to_list``, at core_v0.15.3); virtual stage k·pp + r runs on rank r."""
    *head, last = virtual_stage_layers(num_layers, pp, vpp)
    runs = [(count, len(list(group))) for count, group in itertools.groupby(head)]
    text = "".join(f"(t*{count}|)*{n}" if n > 1 else f"t*{count}|" for count, n in runs)
    return f"E{text}t*{last}L"


def embed_loss_layout(num_layers: int, pp: int, vpp: int) -> str:
    """The layout string of ``pp_split = embed-loss`` (the embedding and the loss count as one
    layer each, ``virtual_stage_layers(..., embed_loss=True)``), e.g. 'E|(t|)*126L' for Llama 3
    405B's 126 layers on pp 16 × vpp 8; same syntax as ``pipeline_layout``."""
    stages = [f"t*{n}" if n else "" for n in virtual_stage_layers(num_layers, pp, vpp, embed_loss=True)]
    runs = [(text, len(list(group))) for text, group in itertools.groupby(stages[1:-1])]
    middle = "".join(f"({text}|)*{n}" if n > 1 else f"{text}|" for text, n in runs)
    return f"E{stages[0]}|{middle}{stages[-1]}L"


def _architecture_args(m: ModelSpec) -> Args:
    args: Args = [("--normalization", "RMSNorm" if m.norm == "rmsnorm" else "LayerNorm"),
                  ("--position-embedding-type", "rope" if m.position_embedding == "rope" else "learned_absolute")]
    if m.activation == "swiglu":
        args.append(("--swiglu", None))
    if not m.linear_bias:
        args.append(("--disable-bias-linear", None))
    if m.qkv_bias and not m.linear_bias:
        args.append(("--add-qkv-bias", None))
    if m.qk_norm:
        args.append(("--qk-layernorm", None))
    if not m.tied_embeddings:
        args.append(("--untie-embeddings-and-output-weights", None))
    return args + [("--attention-dropout", 0.0), ("--hidden-dropout", 0.0)]


def _mla_args(m: ModelSpec) -> Args:
    if m.mla is None:
        return []
    mla = m.mla
    args: Args = [("--multi-latent-attention", None)]
    if mla.q_lora_rank > 0:
        args.append(("--q-lora-rank", mla.q_lora_rank))
    return args + [("--kv-lora-rank", mla.kv_lora_rank), ("--qk-head-dim", mla.qk_nope_head_dim),
                   ("--qk-pos-emb-head-dim", mla.qk_rope_head_dim), ("--v-head-dim", mla.v_head_dim)]


def _moe_args(m: ModelSpec, lay: Layout, training: TrainingSpec) -> Args:
    if m.moe is None:
        return []
    moe = m.moe
    args: Args = [("--num-experts", moe.num_experts), ("--moe-router-topk", moe.num_experts_per_token),
                  ("--moe-ffn-hidden-size", moe.expert_ffn_hidden_size),
                  ("--expert-model-parallel-size", lay.ep), ("--expert-tensor-parallel-size", lay.etp),
                  ("--moe-grouped-gemm", None), ("--moe-token-dispatcher-type", "alltoall"),
                  ("--moe-router-load-balancing-type", "aux_loss"), ("--moe-aux-loss-coeff", 0.001)]
    if moe.num_shared_experts:
        args.append(("--moe-shared-expert-intermediate-size",
                     moe.num_shared_experts * moe.shared_expert_ffn_hidden_size))
    if moe.num_dense_layers:
        args.append(("--moe-layer-freq",
                     f"([0]*{moe.num_dense_layers}+[1]*{m.num_layers - moe.num_dense_layers})"))
    if moe.router_bias:
        args += [("--moe-router-enable-expert-bias", None), ("--moe-router-score-function", "sigmoid")]
    if training.moe_capacity_factor is not None:  # the cost model pads to capacity (memory.py)
        args += [("--moe-expert-capacity-factor", float(training.moe_capacity_factor)),
                 ("--moe-pad-expert-input-to-capacity", None)]
    return args


def vocab_args(m: ModelSpec, lay: Layout, launch: LaunchOptions) -> Args:
    """Tokenizer flags and ``--padded-vocab-size`` (the embedding rows; tp must divide them)."""
    padded = padded_vocab(m.vocab_size, lay.tp)
    if launch.tokenizer:
        args: Args = [("--tokenizer-type", "HuggingFaceTokenizer"), ("--tokenizer-model", launch.tokenizer)]
    else:  # NullTokenizer adds one EOD id to --vocab-size
        args = [("--tokenizer-type", "NullTokenizer"), ("--vocab-size", m.vocab_size - 1)]
    return args + [("--padded-vocab-size", padded)]


def data_args(launch: LaunchOptions) -> Args:
    if launch.data_path:
        return [("--data-path", launch.data_path), ("--split", "99,1,0")]
    return [("--mock-data", None)]


def schedule_args(launch: LaunchOptions) -> Args:
    return [("--train-iters", launch.train_steps), ("--lr", launch.lr), ("--min-lr", launch.min_lr),
            ("--lr-warmup-iters", launch.warmup_steps), ("--lr-decay-style", "cosine"),
            ("--weight-decay", launch.weight_decay), ("--clip-grad", launch.grad_clip),
            ("--seed", launch.seed), ("--log-interval", 1)]


def _warnings(m: ModelSpec, lay: Layout) -> list[str]:
    warnings = []
    order = placement_warning("Megatron-LM", ORDERS, lay)
    if order:
        warnings.append(order)
    padded = padded_vocab(m.vocab_size, lay.tp)
    if padded != m.vocab_size:
        warnings.append(f"the embedding and output layer are padded from {m.vocab_size} to {padded} rows "
                        f"so that tp={lay.tp} divides them (+{(padded - m.vocab_size) * m.hidden_size} "
                        "parameters per matrix)")
    return warnings


def _notes(m: ModelSpec, lay: Layout, training: TrainingSpec, launch: LaunchOptions) -> list[str]:
    notes = []
    if not launch.tokenizer:
        notes.append(f"NullTokenizer adds one EOD token: --vocab-size {m.vocab_size - 1} gives "
                     f"{m.vocab_size} token ids; pass a real tokenizer for real data")
    if m.position_embedding == "rope":
        notes.append("RoPE base and scaling are Megatron's defaults (autoplan's model spec does not "
                     "record them); add --rotary-base for the real model")
    if training.seq_len > m.max_position_embeddings:
        notes.append(f"--max-position-embeddings raised to seq_len {training.seq_len} "
                     f"(the model's is {m.max_position_embeddings})")
    return notes
