"""The model of a Megatron-LM script: shape, RoPE, norm, MLA and MoE flags from the ModelSpec.

Every flag exists in ``megatron/training/arguments.py`` at core_v0.15.3. Mapping of the fields
that size nothing but change the model:

=====================  =====================================================================
rope_theta             --rotary-base (an int in Megatron; a fractional base is a warning)
rope_scaling llama3    --use-rope-scaling --rope-scaling-factor F (Megatron fixes low/high
                       frequency factors 1/4 and the original length 8192: others warn)
rope_scaling yarn      MLA: --rotary-scaling-factor, --mscale, --mscale-all-dim (YaRN is MLA's
                       default rope type); beta_fast/beta_slow/original length are
                       MLATransformerConfig's defaults 32/1/4096 (others warn)
norm_eps               --norm-epsilon
MLA norms              --qk-layernorm (MLA's compressed q/kv RMSNorms; without it identity)
MoE routing            --moe-router-score-function, --moe-router-pre-softmax (softmax without
                       renormalised top-k), --moe-router-topk-scaling-factor,
                       --moe-router-num-groups/--moe-router-group-topk, load balancing type
                       (aux_loss, seq_aux_loss, none) and --moe-aux-loss-coeff from the model
sliding window         --window-size (w-1,0), --window-attn-skip-freq n (:func:`window_args`)
MTP                    --mtp-num-layers (on the last stage, as the prediction counts it)
token ids              taken from the tokenizer by Megatron; not flags
=====================  =====================================================================
"""

from __future__ import annotations

import itertools

from autoplan.cost.stages import virtual_stage_layers
from autoplan.layout import Layout
from autoplan.specs.model import ModelSpec
from autoplan.specs.training import TrainingSpec

Args = list[tuple[str, object]]
# The model fields these flags write (autoplan.export.model_fields); token ids: the tokenizer's.
MODEL_FIELDS = frozenset({
    "rope_theta", "rope_scaling", "rotary_percent", "norm_eps", "bos_token_id", "eos_token_id", "tied_embeddings",
    "activation", "norm", "position_embedding", "qk_norm", "qkv_bias", "linear_bias", "attention_window",
    "num_mtp_layers", "mla", "moe.router_bias", "moe.score_function", "moe.normalize_topk",
    "moe.routed_scaling_factor", "moe.num_expert_groups", "moe.aux_loss_coeff", "moe.aux_loss_per_sequence"})
LOCAL_ATTENTION = ("sliding",)  # the local attentions window_args writes
LLAMA3_FIXED = {"low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
YARN_FIXED = {"beta_fast": 32, "beta_slow": 1, "original_max_position_embeddings": 4096}


def model_args(m: ModelSpec, lay: Layout, training: TrainingSpec) -> Args:
    """The model shape as Megatron flags (and the virtual-stage size, which needs the layers)."""
    args: Args = [("--num-layers", m.num_layers), ("--hidden-size", m.hidden_size),
                  ("--ffn-hidden-size", m.ffn_hidden_size), ("--num-attention-heads", m.num_attention_heads)]
    if lay.pp_split == "embed-loss":
        args.append(("--pipeline-model-parallel-layout",
                     embed_loss_layout(m.num_layers, lay.pp, lay.vpp, m.num_mtp_layers)))
    elif m.num_layers % (lay.pp * lay.vpp):
        args.append(("--pipeline-model-parallel-layout",
                     pipeline_layout(m.num_layers, lay.pp, lay.vpp, m.num_mtp_layers)))
    elif lay.vpp > 1:
        args.append(("--num-layers-per-virtual-pipeline-stage", m.num_layers // (lay.pp * lay.vpp)))
    if m.num_kv_heads < m.num_attention_heads and m.mla is None:
        args += [("--group-query-attention", None), ("--num-query-groups", m.num_kv_heads)]
    if m.mla is None and m.head_dim * m.num_attention_heads != m.hidden_size:
        args.append(("--kv-channels", m.head_dim))
    args.append(("--max-position-embeddings", max(m.max_position_embeddings, training.seq_len)))
    if m.num_mtp_layers:  # multi-token prediction on the last stage (the cost model counts it there)
        args.append(("--mtp-num-layers", m.num_mtp_layers))
    return args + architecture_args(m) + rope_args(m) + mla_args(m) + moe_args(m, lay, training)


def pipeline_layout(num_layers: int, pp: int, vpp: int, mtp: int = 0) -> str:
    """Megatron's layout string for unequal stages, e.g. 'E(t*4|)*2t*3|t*3L' for 14 layers on 4
    stages: stages split by '|', E the embedding, t a decoder layer, m a multi-token-prediction
    layer (``mtp`` of them before the loss, on the last stage), L the loss, 'x*n' and
    '(...)*n' repeat (``megatron/core/transformer/pipeline_parallel_layer_layout.py``,
    ``parse_str_to_list``, at core_v0.15.3); virtual stage k·pp + r runs on rank r."""
    *head, last = virtual_stage_layers(num_layers, pp, vpp)
    runs = [(count, len(list(group))) for count, group in itertools.groupby(head)]
    text = "".join(f"(t*{count}|)*{n}" if n > 1 else f"t*{count}|" for count, n in runs)
    return f"E{text}t*{last}{'m' * mtp}L"


def embed_loss_layout(num_layers: int, pp: int, vpp: int, mtp: int = 0) -> str:
    """The layout string of ``pp_split = embed-loss`` (the embedding and the loss count as one
    layer each, ``virtual_stage_layers(..., embed_loss=True)``), e.g. 'E|(t|)*126L' for Llama 3
    405B's 126 layers on pp 16 × vpp 8; same syntax as ``pipeline_layout``."""
    stages = [f"t*{n}" if n else "" for n in virtual_stage_layers(num_layers, pp, vpp, embed_loss=True)]
    runs = [(text, len(list(group))) for text, group in itertools.groupby(stages[1:-1])]
    middle = "".join(f"({text}|)*{n}" if n > 1 else f"{text}|" for text, n in runs)
    return f"E{stages[0]}|{middle}{stages[-1]}{'m' * mtp}L"


def architecture_args(m: ModelSpec) -> Args:
    args: Args = [("--normalization", "RMSNorm" if m.norm == "rmsnorm" else "LayerNorm"),
                  ("--norm-epsilon", m.norm_eps),
                  ("--position-embedding-type", "rope" if m.position_embedding == "rope" else "learned_absolute")]
    if m.norm == "layernorm1p":  # zero-centred gain (TransformerConfig.layernorm_zero_centered_gamma)
        args.append(("--apply-layernorm-1p", None))
    if m.rotary_percent < 1.0:
        args.append(("--rotary-percent", m.rotary_percent))
    if m.activation == "swiglu":
        args.append(("--swiglu", None))
    elif m.activation == "relu2":
        args.append(("--squared-relu", None))
    if not m.linear_bias:
        args.append(("--disable-bias-linear", None))
    if m.qkv_bias and not m.linear_bias:
        args.append(("--add-qkv-bias", None))
    if m.qk_norm:
        args.append(("--qk-layernorm", None))
    if not m.tied_embeddings:
        args.append(("--untie-embeddings-and-output-weights", None))
    return args + window_args(m) + [("--attention-dropout", 0.0), ("--hidden-dropout", 0.0)]


def window_args(m: ModelSpec) -> Args:
    """A sliding window of w keys (query i attends keys i − w + 1 … i, HF's ``sliding_window``) is
    Transformer Engine's window_size (left, right) = (w − 1, 0): --window-size; full attention on
    every n-th layer (``layer_number % n == 0``, 1-based: megatron/core/transformer/utils.py
    ``is_layer_window_attention``) is --window-attn-skip-freq n. Chunked attention has no flag
    (refused by export.common.check_model_features when the chunks are shorter than the sequence)."""
    if not m.num_local_attention_layers or m.local_attention != "sliding":
        return []
    args: Args = [("--window-size", f"({m.attention_window - 1},0)")]
    if m.full_attention_every:
        args.append(("--window-attn-skip-freq", m.full_attention_every))
    return args


def rope_args(m: ModelSpec) -> Args:
    if m.position_embedding != "rope":
        return []
    args: Args = [("--rotary-base", round(m.rope_theta))]
    scaling = m.rope_scaling_dict
    kind = scaling.get("rope_type", scaling.get("type"))
    if kind == "llama3":
        args += [("--use-rope-scaling", None), ("--rope-scaling-factor", float(scaling["factor"]))]
    elif kind == "yarn" and m.mla is not None:
        args += [("--rotary-scaling-factor", float(scaling["factor"])),
                 ("--mscale", float(scaling.get("mscale", 1.0))),
                 ("--mscale-all-dim", float(scaling.get("mscale_all_dim", 0.0)))]
    return args


def mla_args(m: ModelSpec) -> Args:
    if m.mla is None:
        return []
    mla = m.mla
    args: Args = [("--multi-latent-attention", None)]
    # MLA's RMSNorms on the compressed q and kv (DeepSeek-V2/V3 q_a_layernorm, kv_a_layernorm) exist in
    # Megatron only with --qk-layernorm: core_v0.15.3 gpt_layer_specs.py fuses them into the up
    # projections (LayerNormLinear) if qk_layernorm, else plain linears (the norms become identity).
    if not m.qk_norm:
        args.append(("--qk-layernorm", None))
    if mla.q_lora_rank > 0:
        args.append(("--q-lora-rank", mla.q_lora_rank))
    return args + [("--kv-lora-rank", mla.kv_lora_rank), ("--qk-head-dim", mla.qk_nope_head_dim),
                   ("--qk-pos-emb-head-dim", mla.qk_rope_head_dim), ("--v-head-dim", mla.v_head_dim)]


def moe_args(m: ModelSpec, lay: Layout, training: TrainingSpec) -> Args:
    if m.moe is None:
        return []
    moe = m.moe
    args: Args = [("--num-experts", moe.num_experts), ("--moe-router-topk", moe.num_experts_per_token),
                  ("--moe-ffn-hidden-size", moe.expert_ffn_hidden_size),
                  ("--expert-model-parallel-size", lay.ep), ("--expert-tensor-parallel-size", lay.etp),
                  ("--moe-grouped-gemm", None), ("--moe-token-dispatcher-type", "alltoall")]
    args += router_args(m)
    if moe.num_shared_experts:
        args.append(("--moe-shared-expert-intermediate-size",
                     moe.num_shared_experts * moe.shared_expert_ffn_hidden_size))
    if moe.num_dense_layers:
        args.append(("--moe-layer-freq",
                     f"([0]*{moe.num_dense_layers}+[1]*{m.num_layers - moe.num_dense_layers})"))
    if training.moe_capacity_factor is not None:  # the cost model pads to capacity (memory.py)
        args += [("--moe-expert-capacity-factor", float(training.moe_capacity_factor)),
                 ("--moe-pad-expert-input-to-capacity", None)]
    return args


def router_args(m: ModelSpec) -> Args:
    """The router of the model (``megatron/core/transformer/moe/router.py`` and ``moe_utils.py``
    ``topk_routing_with_score_function``: softmax after top-k renormalises the chosen weights,
    --moe-router-pre-softmax does not; sigmoid scores are renormalised when top-k > 1;
    ``transformer_config.py`` requires pre-softmax for a softmax top-1 router)."""
    moe = m.moe
    assert moe is not None
    args: Args = [("--moe-router-score-function", moe.score_function)]
    if moe.score_function == "softmax" and (not moe.normalize_topk or moe.num_experts_per_token == 1):
        args.append(("--moe-router-pre-softmax", None))
    if moe.routed_scaling_factor != 1.0:
        args.append(("--moe-router-topk-scaling-factor", moe.routed_scaling_factor))
    if moe.num_expert_groups > 1:
        args += [("--moe-router-num-groups", moe.num_expert_groups),
                 ("--moe-router-group-topk", moe.num_limited_groups)]
    if moe.router_bias:
        args.append(("--moe-router-enable-expert-bias", None))
    balancing = "none" if moe.aux_loss_coeff == 0 else "seq_aux_loss" if moe.aux_loss_per_sequence else "aux_loss"
    args.append(("--moe-router-load-balancing-type", balancing))
    if moe.aux_loss_coeff:
        args.append(("--moe-aux-loss-coeff", moe.aux_loss_coeff))
    return args


def model_warnings(m: ModelSpec) -> list[str]:
    """The model's fields the Megatron flags cannot carry."""
    warnings = []
    scaling = m.rope_scaling_dict
    kind = scaling.get("rope_type", scaling.get("type"))
    fixed = LLAMA3_FIXED if kind == "llama3" else YARN_FIXED if kind == "yarn" and m.mla is not None else None
    if scaling and fixed is None:
        warnings.append(f"rope_scaling {scaling} has no Megatron flag here; RoPE is left unscaled")
    elif fixed is not None:
        differ = {k: scaling[k] for k, v in fixed.items() if k in scaling and float(scaling[k]) != v}
        if differ:
            warnings.append(f"rope_scaling {differ} differs from what Megatron fixes ({fixed}); not expressed")
    if m.position_embedding == "rope" and m.rope_theta != round(m.rope_theta):
        warnings.append(f"--rotary-base is an integer: rope_theta {m.rope_theta} is rounded")
    if m.num_mtp_layers:
        warnings.append(f"--mtp-num-layers {m.num_mtp_layers}: a --pipeline-model-parallel-layout, where one is "
                        "written, places the MTP layer(s) as 'm' before the loss; Megatron versions whose layout "
                        "parser predates 'm' refuse that layout")
    return warnings
