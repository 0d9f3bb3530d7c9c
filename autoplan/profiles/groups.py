"""The physical facts of a trainer profile, in small records by what the cost model reads together.

Each record is one block of a profile's YAML (``model_states:``, ``activations:``, ...; the
``TrainerProfile`` field that holds it names the block) and the one declaration of its keys: a
field without a default is a required key of its block, a field with one an optional key (a
block whose fields all have defaults may be left out). ``choices`` in a field's metadata lists
the values it accepts; a ``bool`` field takes only true or false; ``parse`` converts a value.

Each field keeps an earlier release's flat name, ``FLAT_PREFIX + name`` (``zero3_prefetch_layers``
is ``zero3.prefetch_layers``): ``profile.FLAT_NAMES`` maps those onto the groups, so a flat
profile mapping still loads and ``TrainerProfile.with_overrides`` takes them.
"""

from __future__ import annotations

from dataclasses import MISSING, Field, dataclass, field, fields
from typing import Any, ClassVar

from autoplan.errors import SpecError, shown
from autoplan.specs.yaml_io import check_keys

PP_SPLIT_RULES = ("layout", "compute_cost")
CP_ROTATE_METHODS = ("ring", "allgather")  # how a trainer moves K/V under CP (autoplan.cost.cp_comm)
HYBRID_STYLES = ("none", "replicate", "secondary")  # how a trainer shards hybrid (autoplan.cost.hybrid_shard)
RECOMPUTE_MODES = ("none", "selective")  # the modes ``attention`` and ``mlp`` give coefficients for


@dataclass(frozen=True)
class ActivationCoefficients:
    """Bytes saved for backward per token of one layer, as a linear form in the layer's widths.

    bytes/token = h·h_size/(tp if sp else 1) + (q·q_size + kv·kv_size + f·ffn)/tp
                  + lse·heads/tp + tok + s2·heads·seq/(tp·cp)

    where the ``s2`` term is the s×s attention matrices of non-flash attention (Korthikanti et
    al. 2022, eq. 1: 5·a·s/h per token and h). MoE blocks add ``moe_kh·k·h + moe_kf·k·f_e/etp +
    moe_e·E + moe_k·k`` per token (actmem README, Mixtral grouped_mm fit).
    """

    h: float = 0.0
    q: float = 0.0
    kv: float = 0.0
    f: float = 0.0
    lse: float = 0.0
    tok: float = 0.0
    s2: float = 0.0
    moe_kh: float = 0.0
    moe_kf: float = 0.0
    moe_e: float = 0.0
    moe_k: float = 0.0
    moe_tok: float = 0.0  # per-token bytes a MoE block saves beyond the dense MLP's ``tok``


_COEF_KEYS = [f.name for f in fields(ActivationCoefficients)]


def _coefficients_by_mode(data: Any, where: str) -> dict[str, ActivationCoefficients]:
    """``{none: {h: 4, ...}, selective: {...}}``: the coefficients of each recompute mode."""
    if not isinstance(data, dict):
        raise SpecError(where, f"expected a mapping of recompute mode: coefficients, got {shown(data)}")
    out = {}
    for mode, coefficients in data.items():
        if not isinstance(coefficients, dict):
            raise SpecError(f"{where}.{mode}", f"expected a mapping of coefficients, got {shown(coefficients)}")
        check_keys(coefficients, f"{where}.{mode}", required=[], optional=_COEF_KEYS)
        out[mode] = ActivationCoefficients(**{k: float(v) for k, v in coefficients.items()})
    if set(out) != set(RECOMPUTE_MODES):
        raise SpecError(where, f"needs coefficients for 'none' and 'selective', got {', '.join(map(str, out)) or 'none'}")
    return out


class ProfileGroup:
    """Base of the records below: marks a ``TrainerProfile`` field as a YAML block of its own."""

    FLAT_PREFIX: ClassVar[str] = ""  # prefix of the fields' flat names (an earlier release's keys)


@dataclass(frozen=True)
class ModelStates(ProfileGroup):
    """Bytes per parameter of each model state and how they are sharded (cost/model_states.py,
    cost/optimizer.py, cost/context.py)."""

    weight_bytes: float  # compute copy of each parameter (bf16)
    grad_bytes: float  # gradient buffer per parameter
    grad_reduce_bytes: float  # bytes per gradient element in the data-parallel reduction (its dtype)
    master_bytes: float  # fp32 master weights
    optimizer_bytes: float  # Adam moments
    fp8_weight_extra_bytes: float  # fp8 copies (and transposes) of linear weights under fp8
    zero_shards_over_cp: bool  # Megatron's distributed optimizer shards over DP×CP
    # Bytes per parameter of ``grad_bytes`` that exist only when the trainer wraps the model in
    # DDP (dp·cp > 1): nanotron's bf16 gradients are freed after every micro-batch's backward
    # (FP32GradientAccumulator.backward), so only torch DDP's bf16 bucket buffers stay (2).
    ddp_bucket_grad_bytes: float = 0.0
    # HBM bytes per parameter that accumulating one micro-batch's gradient moves outside the GEMMs
    # (autoplan.cost.time.grad_accumulation_s); 0 = accumulated by the weight-gradient GEMM.
    grad_accumulation_bytes_per_param: float = 0.0
    # Whether the trainer's optimizer offload streams the gradients to the host, leaving no GPU
    # gradient buffer (DeepSpeed offload_optimizer, FSDP2 CPUOffloadPolicy); false where the GPU
    # gradient buffer stays (Megatron's HybridDeviceOptimizer copies main_grad to the host).
    offload_moves_gradients: bool = False


@dataclass(frozen=True)
class Activations(ProfileGroup):
    """Bytes a layer and the loss save for backward, and the HBM traffic of the loss and of eager
    attention's dropout (cost/memory.py, cost/mlp_coefficients.py, cost/stage_memory.py,
    cost/time.py)."""

    attention: dict[str, ActivationCoefficients] = field(metadata={"parse": _coefficients_by_mode})  # per recompute mode: none, selective
    mlp: dict[str, ActivationCoefficients] = field(metadata={"parse": _coefficients_by_mode})
    logits_bytes_per_vocab: float  # peak bytes per token per vocab entry of logits + loss
    fp8_saves_quantized_inputs: bool  # TE keeps fp8 linear inputs for backward under fp8
    # HBM bytes the loss moves per logit, forward and backward (autoplan.cost.time.loss_s); 0 =
    # not stated by the profile (the term is then left out).
    loss_hbm_bytes_per_logit: float = 0.0
    # Bytes per token per KV element saved for backward on top of ``attention``'s kv coefficient
    # when the model has as many KV heads as query heads (multi-head attention): nanotron's
    # non-GQA branch keeps one permuted q|k|v copy whole (q stays a view of it) and a second k|v
    # copy for the rotary kernel (src/nanotron/models/llama.py, CausalSelfAttention.forward); 4.
    mha_kv_copy_bytes: float = 0.0
    # HBM bytes per s×s score element that the attention dropout of eager attention moves in each
    # of forward and backward (autoplan.cost.time.attention_s); 0: no dropout on the scores.
    eager_attention_dropout_bytes: float = 0.0
    # Bytes per hidden element of the residual dropout mask each block of a GPT-style (GELU) layer
    # saves (cost.memory GPT_ATTENTION_*, cost.mlp_coefficients GPT_MLP: Korthikanti et al. 2022's
    # 34sbh counts one 1-byte mask after the attention and one after the MLP): 1 where the
    # trainer's GPT recipes train with dropout (Megatron --hidden-dropout 0.1, NeMo's GPT-3), 0
    # without (MosaicGPT's resid_pdrop 0.0: no mask is drawn).
    gpt_residual_dropout_mask_bytes: float = 1.0
    # Bytes per hidden element per norm (two per layer) that the run's normalisation kernel saves
    # for backward less than the profile's coefficients count; 0: the coefficients' own norm. A
    # fused RMSNorm kernel keeps its bf16 input and the fp32 rstd (torchtitan 2024's
    # fused_rmsnorm, torchtitan/models/norms.py TritonFusedRMSNorm.forward: save_for_backward(x,
    # weight, rstd)) where the eager RMSNorm that torchtitan's coefficients measure keeps the fp32
    # upcast of its input (4) and the bf16 normalised x (2) instead of the bf16 input (2): 4 less
    # (actmem README, Llama sdpa breakdown; the norm's output, saved by the next linear, is kept
    # by both). Set per run (calibration rows), as trainers choose the kernel in their config;
    # applied without recompute (a selective policy that recomputes the norms saves none of them).
    norm_saving_bytes_per_h: float = 0.0


@dataclass(frozen=True)
class Recompute(ProfileGroup):
    """What full recompute keeps and what selective recompute runs again (cost/memory.py,
    cost/stage_memory.py, cost/flops.py, cost/time.py)."""

    full_recompute_input_bytes_per_h: float  # layer input kept per token per h under full
    selective_recompute_matmul_fraction: float  # share of layer matmul FLOPs recomputed
    selective_recomputes_attention: bool  # Megatron 'core_attn': attention scores recomputed
    # Share of one pass's TP collectives that the profile's selective recompute runs again in the
    # backward (autoplan.cost.time._per_layer_comm_s): torchtitan's op-SAC saves the reduce-scatters
    # and recomputes the all-gathers, 2 of the 4 (0.5); 0 where it recomputes none.
    selective_recompute_tp_collectives: float = 0.0
    # Full recompute stops before a dense block's last linear (the MLP down projection, fc2/w2):
    # PyTorch's non-reentrant checkpoint (torch >= 2.1, torch/utils/checkpoint.py: early stop,
    # on by default, set_checkpoint_early_stop) ends the recomputation once every tensor the
    # backward needs is saved again, and that linear saves its input before it runs, with only a
    # bias/dropout and the residual add after it. torch.compile's partitioner likewise recomputes
    # only what the backward reads. A reentrant checkpoint (Megatron-Core's CheckpointFunction,
    # DeepSpeed's) reruns the whole forward. tests/unit/cost/test_checkpoint_early_stop.py
    # measures it on the installed torch.
    full_recompute_skips_last_linear: bool = False  # full recompute stops before the MLP down projection


@dataclass(frozen=True)
class Zero3(ProfileGroup):
    """What ZeRO-3 / FSDP holds unsharded and when it gathers again (cost/model_states.py,
    cost/data_parallel.py)."""

    FLAT_PREFIX: ClassVar[str] = "zero3_"

    prefetch_layers: float  # unsharded layers held by ZeRO-3 (current + prefetch)
    max_live_params: float  # cap on gathered parameters (DeepSpeed stage3_max_live_parameters)
    grad_bucket_params: float  # cap on unsharded gradients (DeepSpeed reduce_bucket_size)
    pp_unsharded_bytes: float  # per param kept unsharded by ZeRO-3 when pp > 1
    # A parameter gathered for the recomputed forward is kept for the backward when at most this
    # many parameters are used in between (one layer's worth); FSDP recomputes inside the
    # backward's own unshard (inf); DeepSpeed stage3_max_reuse_distance.
    reuse_distance_params: float = float("inf")


@dataclass(frozen=True)
class DataParallel(ProfileGroup):
    """How the trainer buckets, gathers and shards over the data-parallel group
    (cost/data_parallel.py, cost/hybrid_shard.py, cost/model_states.py)."""

    # Gradient elements per data-parallel reduction bucket (ZeRO 0-2), at least; Megatron-Core's
    # floor of max(40M, 1M·dp) elements (megatron/core/distributed/distributed_data_parallel.py).
    dp_bucket_params: float = 4.0e7
    # Elements a bucket grows by per rank of the data-parallel (dp·cp) group: 0 = a fixed bucket;
    # Megatron-Core's default bucket_size = max(40M, 1M·dp·cp) (1e6: "larger DP sizes need larger
    # buckets to ensure collectives do not become latency-bound", DistributedDataParallelConfig).
    dp_bucket_params_per_rank: float = 0.0
    # ZeRO-1/2: parameters per all-gather of the updated parameters after the optimizer step
    # (inf: one coalesced collective for the whole stage, nanotron's ZeroDistributedOptimizer
    # _all_gather_params); 0 = one per gradient bucket (dp_bucket_params: Megatron's distributed
    # optimizer gathers bucket by bucket).
    param_gather_bucket_params: float = 0.0
    # How the trainer shards hybrid (Layout.hsdp, autoplan.cost.hybrid_shard): 'replicate' (FSDP2
    # HSDP, Megatron's distributed-optimizer instances), 'secondary' (DeepSpeed ZeRO++ hpZ) or
    # 'none' (its capabilities list no hybrid_shard_zero_stages).
    hybrid_shard_style: str = field(default="none", metadata={"choices": HYBRID_STYLES})
    # ZeRO-2 as FSDP1's SHARD_GRAD_OP (torch/distributed/fsdp/api.py, ShardingStrategy: "unshards
    # before the forward, does not reshard them after the forward, and only reshards them after the
    # backward computation"): every micro-batch gathers each FSDP unit's bf16 parameters once, for
    # the forward, and reduce-scatters its gradient after the backward; the whole model's unsharded
    # compute copy is held from the forward to the end of the backward. False: ZeRO-2 as the ZeRO
    # paper's (DeepSpeed), one reduce-scatter and one gather of the updated parameters per step.
    zero2_is_shard_grad_op: bool = False


@dataclass(frozen=True)
class Pipeline(ProfileGroup):
    """How the trainer runs and splits its pipeline (cost/step_time.py, cost/shared_terms.py,
    cost/comm.py, cost/data_parallel.py, rules/schedules.py)."""

    FLAT_PREFIX: ClassVar[str] = "pp_"

    schedule: str  # '1f1b' (in flight: min(pp - stage, m)) or 'afab' (all m in flight)
    # With pp > 1, whether the gradient reduction overlaps the last micro-batch's backward
    # (Megatron's and torch's pipelines reduce buckets as the backward produces them); false for
    # DeepSpeed's pipeline engine, whose TrainSchedule runs ReduceTiedGrads and ReduceGrads after
    # the last BackwardPass (deepspeed/runtime/pipe/schedule.py).
    overlaps_grad_reduce: bool = True
    # Blocking metadata messages before each pipeline send (0: asynchronous sends, pp_overlap
    # applies); nanotron 2 (autoplan.cost.comm.pipeline_transfer_s).
    blocking_metadata_messages: float = 0.0
    # How the trainer assigns layers to pipeline ranks: 'layout' (the layout's pp_split, the
    # options the exporters write) or 'compute_cost' (nanotron's own cost-balanced walk,
    # autoplan.cost.stages.compute_cost_rank_layers).
    split_rule: str = field(default="layout", metadata={"choices": PP_SPLIT_RULES})
    # With pp > 1 and ZeRO <= 1, bytes per element of a full gradient all-reduce that replaces the
    # ZeRO-1 reduce-scatter (0: the generic ZeRO path). DeepSpeed's pipeline engine under bf16
    # all-reduces the BF16_Optimizer's fp32 gradients: 4 (autoplan.cost.data_parallel).
    grad_all_reduce_bytes: float = 0.0


@dataclass(frozen=True)
class ContextParallel(ProfileGroup):
    """How the trainer moves K/V under context parallelism (cost/cp_comm.py)."""

    FLAT_PREFIX: ClassVar[str] = "cp_"

    # 'ring' (point-to-point sends behind each block's attention, Megatron-Core / Transformer
    # Engine) or 'allgather' (one all-gather behind the first SDPA call, dK/dV permuted round the
    # ring: PyTorch's context_parallel default rotate method, which torchtitan runs).
    rotate_method: str = field(default="ring", metadata={"choices": CP_ROTATE_METHODS})
    # Whether the exchanged K/V carries the query heads (the model repeats K/V before attention:
    # torchtitan's Llama repeat_kv) rather than the KV heads.
    kv_repeated: bool = False
    # Bytes per element of the dK/dV passed round the ring in the backward (PyTorch accumulates
    # them in float32 under convert_to_f32: 4).
    grad_exchange_bytes: float = 2.0


def is_required(f: Field) -> bool:
    return f.default is MISSING and f.default_factory is MISSING


def group_from_mapping(cls: type, data: Any, where: str) -> ProfileGroup:
    """One block of a profile's YAML as its record ``cls``: keys checked against the fields (with
    a 'did you mean'), ``bool`` fields true or false, ``choices`` enforced, ``parse`` applied."""
    if not isinstance(data, dict):
        raise SpecError(where, f"expected a mapping of {', '.join(f.name for f in fields(cls))}, got {shown(data)}")
    check_keys(data, where, required=[f.name for f in fields(cls) if is_required(f)],
               optional=[f.name for f in fields(cls) if not is_required(f)])
    values = {}
    for f in fields(cls):
        if f.name not in data:
            continue
        value = data[f.name]
        if "parse" in f.metadata:
            value = f.metadata["parse"](value, f"{where}: {f.name}")
        if f.type == "bool" and not isinstance(value, bool):
            raise SpecError(where, f"{f.name} must be true or false, got {shown(value)}")
        choices = f.metadata.get("choices")
        if choices is not None and value not in choices:
            raise SpecError(where, f"{f.name} must be one of {', '.join(choices)}, got {shown(value)}")
        values[f.name] = value
    return cls(**values)
