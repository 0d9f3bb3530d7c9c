"""Dataclasses and YAML loading for trainer profiles (see ``autoplan/profiles/*.yaml``)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import MISSING, dataclass, field, fields, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

from autoplan.errors import AutoplanError, SpecError, UnknownNameError, shown
from autoplan.profiles.capabilities import KEYS as CAPABILITY_KEYS
from autoplan.profiles.capabilities import Capabilities, capabilities_from_mapping
from autoplan.profiles.efficiency import CalibratedParameters
from autoplan.profiles.parameter_files import DEFAULTS_PATH, profile_parameters
from autoplan.profiles.trainer_options import TrainerOptions, options_from_mapping
from autoplan.profiles.transfer import transfer_parameters
from autoplan.specs.yaml_io import check_keys, is_file_stem, read_mapping

_PROFILE_DIR = Path(__file__).resolve().parent


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


@dataclass(frozen=True)
class TrainerProfile:
    """What one trainer's implementation does; see the YAML of each trainer for sources."""

    name: str
    description: str
    weight_bytes: float  # compute copy of each parameter (bf16)
    grad_bytes: float  # gradient buffer per parameter
    grad_reduce_bytes: float  # bytes per gradient element in the data-parallel reduction (its dtype)
    master_bytes: float  # fp32 master weights
    optimizer_bytes: float  # Adam moments
    fp8_weight_extra_bytes: float  # fp8 copies (and transposes) of linear weights under fp8
    zero_shards_over_cp: bool  # Megatron's distributed optimizer shards over DP×CP
    capabilities: Capabilities  # what the trainer can run (allow-lists, profiles/capabilities.py)
    pp_schedule: str  # '1f1b' (in flight: min(pp - stage, m)) or 'afab' (all m in flight)
    attention: dict[str, ActivationCoefficients]  # per recompute mode: none, selective
    mlp: dict[str, ActivationCoefficients]
    full_recompute_input_bytes_per_h: float  # layer input kept per token per h under full
    logits_bytes_per_vocab: float  # peak bytes per token per vocab entry of logits + loss
    zero3_prefetch_layers: float  # unsharded layers held by ZeRO-3 (current + prefetch)
    zero3_max_live_params: float  # cap on gathered parameters (DeepSpeed stage3_max_live_parameters)
    zero3_grad_bucket_params: float  # cap on unsharded gradients (DeepSpeed reduce_bucket_size)
    fp8_saves_quantized_inputs: bool  # TE keeps fp8 linear inputs for backward under fp8
    zero3_pp_unsharded_bytes: float  # per param kept unsharded by ZeRO-3 when pp > 1
    selective_recompute_matmul_fraction: float  # share of layer matmul FLOPs recomputed
    selective_recomputes_attention: bool  # Megatron 'core_attn': attention scores recomputed
    # Optional in a profile's YAML (these defaults otherwise):
    # gradient elements per data-parallel reduction bucket (ZeRO 0-2), at least; Megatron-Core's
    # floor of max(40M, 1M·dp) elements (megatron/core/distributed/distributed_data_parallel.py).
    dp_bucket_params: float = 4.0e7
    # elements a bucket grows by per rank of the data-parallel (dp·cp) group: 0 = a fixed bucket;
    # Megatron-Core's default bucket_size = max(40M, 1M·dp·cp) (1e6: "larger DP sizes need larger
    # buckets to ensure collectives do not become latency-bound", DistributedDataParallelConfig).
    dp_bucket_params_per_rank: float = 0.0
    # ZeRO-1/2: parameters per all-gather of the updated parameters after the optimizer step
    # (inf: one coalesced collective for the whole stage, nanotron's ZeroDistributedOptimizer
    # _all_gather_params); 0 = one per gradient bucket (dp_bucket_params: Megatron's distributed
    # optimizer gathers bucket by bucket).
    param_gather_bucket_params: float = 0.0
    # ZeRO-3: a parameter gathered for the recomputed forward is kept for the backward when at
    # most this many parameters are used in between (one layer's worth); FSDP recomputes inside
    # the backward's own unshard (inf); DeepSpeed stage3_max_reuse_distance.
    zero3_reuse_distance_params: float = float("inf")
    # HBM bytes the loss moves per logit, forward and backward (autoplan.cost.time.loss_s); 0 =
    # not stated by the profile (the term is then left out).
    loss_hbm_bytes_per_logit: float = 0.0
    # With pp > 1, whether the gradient reduction overlaps the last micro-batch's backward
    # (Megatron's and torch's pipelines reduce buckets as the backward produces them); false for
    # DeepSpeed's pipeline engine, whose TrainSchedule runs ReduceTiedGrads and ReduceGrads after
    # the last BackwardPass (deepspeed/runtime/pipe/schedule.py).
    pp_overlaps_grad_reduce: bool = True
    # Blocking metadata messages before each pipeline send (0: asynchronous sends, pp_overlap
    # applies); nanotron 2 (autoplan.cost.comm.pipeline_transfer_s).
    pp_blocking_metadata_messages: float = 0.0
    # HBM bytes per parameter that accumulating one micro-batch's gradient moves outside the GEMMs
    # (autoplan.cost.time.grad_accumulation_s); 0 = accumulated by the weight-gradient GEMM.
    grad_accumulation_bytes_per_param: float = 0.0
    # Bytes per token per KV element saved for backward on top of ``attention``'s kv coefficient
    # when the model has as many KV heads as query heads (multi-head attention): nanotron's
    # non-GQA branch keeps one permuted q|k|v copy whole (q stays a view of it) and a second k|v
    # copy for the rotary kernel (src/nanotron/models/llama.py, CausalSelfAttention.forward); 4.
    mha_kv_copy_bytes: float = 0.0
    # Bytes per parameter of ``grad_bytes`` that exist only when the trainer wraps the model in
    # DDP (dp·cp > 1): nanotron's bf16 gradients are freed after every micro-batch's backward
    # (FP32GradientAccumulator.backward), so only torch DDP's bf16 bucket buffers stay (2).
    ddp_bucket_grad_bytes: float = 0.0
    # How the trainer assigns layers to pipeline ranks: 'layout' (the layout's pp_split, the
    # options the exporters write) or 'compute_cost' (nanotron's own cost-balanced walk,
    # autoplan.cost.stages.compute_cost_rank_layers).
    pp_split_rule: str = "layout"
    # With pp > 1 and ZeRO <= 1, bytes per element of a full gradient all-reduce that replaces the
    # ZeRO-1 reduce-scatter (0: the generic ZeRO path). DeepSpeed's pipeline engine under bf16
    # all-reduces the BF16_Optimizer's fp32 gradients: 4 (autoplan.cost.data_parallel).
    pp_grad_all_reduce_bytes: float = 0.0
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
    # (actmem README, Llama sdpa breakdown; the norm's output, saved by the next linear, is kept by both). Set per run (calibration rows), as trainers choose the kernel in their config;
    # applied without recompute (a selective policy that recomputes the norms saves none of them).
    norm_saving_bytes_per_h: float = 0.0
    # How the trainer shards hybrid (Layout.hsdp, autoplan.cost.hybrid_shard): 'replicate' (FSDP2
    # HSDP, Megatron's distributed-optimizer instances), 'secondary' (DeepSpeed ZeRO++ hpZ) or
    # 'none' (its capabilities list no hybrid_shard_zero_stages).
    hybrid_shard_style: str = "none"
    # Whether the trainer's optimizer offload streams the gradients to the host, leaving no GPU
    # gradient buffer (DeepSpeed offload_optimizer, FSDP2 CPUOffloadPolicy); false where the GPU
    # gradient buffer stays (Megatron's HybridDeviceOptimizer copies main_grad to the host).
    offload_moves_gradients: bool = False
    # ZeRO-2 as FSDP1's SHARD_GRAD_OP (torch/distributed/fsdp/api.py, ShardingStrategy: "unshards
    # before the forward, does not reshard them after the forward, and only reshards them after the
    # backward computation"): every micro-batch gathers each FSDP unit's bf16 parameters once, for
    # the forward, and reduce-scatters its gradient after the backward; the whole model's unsharded
    # compute copy is held from the forward to the end of the backward. False: ZeRO-2 as the ZeRO
    # paper's (DeepSpeed), one reduce-scatter and one gather of the updated parameters per step.
    zero2_is_shard_grad_op: bool = False
    # How the trainer moves K/V under context parallelism (autoplan.cost.cp_comm): 'ring'
    # (point-to-point sends behind each block's attention, Megatron-Core / Transformer Engine) or
    # 'allgather' (one all-gather behind the first SDPA call, dK/dV permuted round the ring: PyTorch's
    # context_parallel default rotate method, which torchtitan runs).
    cp_rotate_method: str = "ring"
    # Whether the exchanged K/V carries the query heads (the model repeats K/V before attention:
    # torchtitan's Llama repeat_kv) rather than the KV heads.
    cp_kv_repeated: bool = False
    # Bytes per element of the dK/dV passed round the ring in the backward (PyTorch accumulates
    # them in float32 under convert_to_f32: 4).
    cp_grad_exchange_bytes: float = 2.0
    # Share of one pass's TP collectives that the profile's selective recompute runs again in the
    # backward (autoplan.cost.time._per_layer_comm_s): torchtitan's op-SAC saves the reduce-scatters
    # and recomputes the all-gathers, 2 of the 4 (0.5); 0 where it recomputes none.
    selective_recompute_tp_collectives: float = 0.0
    sources: tuple[str, ...] = ()
    parameters: dict[str, CalibratedParameters] = field(default_factory=dict)
    # The error band of a user's own calibration, by GPU (the ``band:`` block a ``--profile`` file
    # of ``autoplan calibrate`` holds: calibration.own_band); search.ranking.context_band reads it.
    own_bands: dict[str, dict] = field(default_factory=dict)
    options: TrainerOptions = field(default_factory=TrainerOptions)  # see trainer_options.py
    # The profiles this one inherits from, nearest first (``inherits:``, :func:`inherited_mapping`):
    # rules bound to a base trainer bind it too, and an uncalibrated GPU borrows the base's fits.
    lineage: tuple[str, ...] = ()

    @property
    def family(self) -> tuple[str, ...]:
        """This profile's name and its lineage: the trainer names a rule may bind it by."""
        return (self.name, *self.lineage)

    def parameters_for(self, gpu_name: str) -> CalibratedParameters:
        """The calibrated parameters for ``gpu_name``; for a GPU this trainer was not calibrated
        on, the efficiencies of its nearest calibrated GPU (``transfer.transfer_parameters``)."""
        if gpu_name in self.parameters:
            return self.parameters[gpu_name]
        calibrated = {name: p for name, p in self.parameters.items() if name != "default"}
        borrowed = None if calibrated else other_calibrations(self.name, self.lineage)
        return transfer_parameters(calibrated, gpu_name, self.parameters["default"], borrowed=borrowed)

    def with_parameters(self, gpu_name: str, params: CalibratedParameters) -> TrainerProfile:
        return replace(self, parameters={**self.parameters, gpu_name: params})

    def at_version(self, version: str | None) -> TrainerProfile:
        """This profile with the capabilities of trainer ``version`` (None: the pinned one,
        ``Capabilities.at_version``)."""
        known = self.capabilities.versions
        if version and version not in known:
            raise AutoplanError(f"unknown {self.name} version {shown(version)}; autoplan knows "
                                + (", ".join(known) if known else f"one {self.name} version (unnamed): drop --trainer-version"))
        return replace(self, capabilities=self.capabilities.at_version(version))

    def with_overrides(self, overrides: Iterable[tuple[str, Any]]) -> TrainerProfile:
        """This profile with a measured run's own departures from it: (field, value) pairs of
        the profile, of its capabilities (``activation_offload``, True), or ("allow_setting",
        (setting, value)) for a setting value the run's framework runs beyond this trainer's."""
        profile_values, caps = {}, self.capabilities
        for name, value in overrides:
            if name == "allow_setting":
                caps = caps.allowing(*value)
            elif name in CAPABILITY_KEYS:
                caps = replace(caps, **{name: value})
            else:
                profile_values[name] = value
        return replace(self, capabilities=caps, **profile_values)


PP_SPLIT_RULES = ("layout", "compute_cost")
CP_ROTATE_METHODS = ("ring", "allgather")  # how a trainer moves K/V under CP (autoplan.cost.cp_comm)
HYBRID_STYLES = ("none", "replicate", "secondary")  # how a trainer shards hybrid (autoplan.cost.hybrid_shard)
_COEF_KEYS = [f.name for f in fields(ActivationCoefficients)]
# (own_bands: from a --profile file; lineage: from ``inherits:``)
_PROFILE_KEYS = [f.name for f in fields(TrainerProfile) if f.name not in ("own_bands", "lineage")]
# Optional in a profile's YAML: the fields with a default (the dataclass is the one declaration);
# sources, parameters and options are read apart.
_OPTIONAL_KEYS = [f.name for f in fields(TrainerProfile) if f.name in _PROFILE_KEYS
                  and (f.default is not MISSING or f.default_factory is not MISSING)
                  and f.name not in ("sources", "parameters", "options")]
INHERITS = "inherits"  # a built-in profile's base: its YAML holds only what differs from the base's
_MERGED_BLOCKS = ("capabilities", "options")  # merged key by key with the base's; other keys replace
_NOT_INHERITED = ("calibrated",)  # fits belong to the trainer measured: a child borrows them only by transfer


def _coefficients(data: Any, where: str) -> ActivationCoefficients:
    if not isinstance(data, dict):
        raise SpecError(where, f"expected a mapping of coefficients, got {shown(data)}")
    check_keys(data, where, required=[], optional=_COEF_KEYS)
    return ActivationCoefficients(**{k: float(v) for k, v in data.items()})


def inherited_mapping(data: dict, base: dict, where: str) -> dict:
    """A child profile's mapping (``inherits: <base>``) completed from its base's: the child's
    keys replace the base's, but ``capabilities:`` and ``options:`` merge key by key (the child
    states what it runs beyond or instead of the base), ``sources`` are the base's then the
    child's, and the base's ``calibrated:`` fits are not carried (the child's GPUs borrow them by
    transfer, ``transfer.transfer_parameters``, saying so)."""
    for key in ("name", "description"):
        if key not in data:
            raise SpecError(where, f"{key}: a profile that inherits ({INHERITS}: {base.get('name')}) needs its own {key}")
    out = {k: v for k, v in base.items() if k not in _NOT_INHERITED and k != INHERITS}
    for key, value in data.items():
        if key == INHERITS:
            continue
        if key in _MERGED_BLOCKS and isinstance(value, dict) and isinstance(base.get(key), dict):
            out[key] = {**base[key], **value}
        elif key == "sources":
            out[key] = [*base.get("sources", ()), *value]
        else:
            out[key] = value
    return out


def profile_from_mapping(data: dict, where: str, lineage: tuple[str, ...] = ()) -> TrainerProfile:
    """Build a ``TrainerProfile`` from a parsed YAML mapping (``lineage``: the profiles it was
    completed from, :func:`inherited_mapping`)."""
    required = [k for k in _PROFILE_KEYS if k not in ("sources", "parameters", "options", *_OPTIONAL_KEYS)]
    parameters = profile_parameters(data, where)  # first: it names the sections that replace 'efficiency:'
    check_keys(data, where, required=required, optional=["sources", "defaults", "calibrated", *_OPTIONAL_KEYS, "options"])
    values = {k: v for k, v in data.items() if k not in ("defaults", "calibrated")}
    values["lineage"] = lineage
    values["parameters"] = parameters
    for key in ("attention", "mlp"):
        values[key] = {mode: _coefficients(c, f"{where}: {key}.{mode}") for mode, c in data[key].items()}
        if set(values[key]) != {"none", "selective"}:
            raise SpecError(where, f"{key}: needs coefficients for 'none' and 'selective'")
    values["capabilities"] = capabilities_from_mapping(data["capabilities"], where)
    if values.get("hybrid_shard_style", "none") not in HYBRID_STYLES:
        raise SpecError(where, f"hybrid_shard_style must be one of {', '.join(HYBRID_STYLES)}, "
                               f"got {shown(values['hybrid_shard_style'])}")
    if (values.get("hybrid_shard_style", "none") == "none") != (not values["capabilities"].hybrid_shard_zero_stages):
        raise SpecError(where, "hybrid_shard_style says how the trainer shards hybrid exactly where its capabilities "
                               f"list hybrid_shard_zero_stages, got {shown(values.get('hybrid_shard_style', 'none'))} "
                               f"and {list(values['capabilities'].hybrid_shard_zero_stages)}")
    for key in ("offload_moves_gradients", "zero2_is_shard_grad_op", "cp_kv_repeated"):
        if not isinstance(values.get(key, False), bool):
            raise SpecError(where, f"{key} must be true or false, got {shown(values[key])}")
    if values.get("cp_rotate_method", "ring") not in CP_ROTATE_METHODS:
        raise SpecError(where, f"cp_rotate_method must be one of {', '.join(CP_ROTATE_METHODS)}, "
                               f"got {shown(values['cp_rotate_method'])}")
    if values.get("pp_split_rule", "layout") not in PP_SPLIT_RULES:
        raise SpecError(where, f"pp_split_rule must be one of {', '.join(PP_SPLIT_RULES)}, "
                               f"got {shown(values['pp_split_rule'])}")
    values["sources"] = tuple(data.get("sources", ()))
    values["options"] = options_from_mapping(data.get("options"), where)
    return TrainerProfile(**values)


@lru_cache(maxsize=None)
def _builtin_profiles() -> dict[str, TrainerProfile]:
    profiles = {}
    for path in sorted(p for p in _PROFILE_DIR.glob("*.yaml") if p != DEFAULTS_PATH):
        profile = _profile_file(path)
        profiles[profile.name] = profile
    return profiles


@lru_cache(maxsize=None)
def _profile_file(path: Path) -> TrainerProfile:
    """One built-in profile file, read once (the same object whether looked up alone or listed)."""
    data, lineage = _file_mapping(path, ())
    return profile_from_mapping(data, str(path), lineage)


def _file_mapping(path: Path, seen: tuple[str, ...]) -> tuple[dict, tuple[str, ...]]:
    """A built-in profile file's mapping with its ``inherits:`` chain resolved (the base is the
    file ``<base>.yaml`` beside it), and the base names, nearest first."""
    data = read_mapping(path)
    base_name = data.get(INHERITS)
    if base_name is None:
        return data, ()
    base_path = _PROFILE_DIR / f"{base_name}.yaml"
    if not isinstance(base_name, str) or not is_file_stem(base_name) or not base_path.is_file():
        raise SpecError(str(path), f"{INHERITS}: expected a built-in profile's name, got {shown(base_name)}")
    if base_name in seen or base_path == path:
        raise SpecError(str(path), f"{INHERITS}: a cycle ({' -> '.join((*seen, path.stem, base_name))})")
    base, lineage = _file_mapping(base_path, (*seen, path.stem))
    return inherited_mapping(data, base, str(path)), (str(base.get("name", base_name)), *lineage)


def _own_file_profile(key: str) -> TrainerProfile | None:
    """The built-in profile named ``key`` read from its own file ``<key>.yaml`` alone, the
    others unread (~1 ms each); None where no such file holds a profile of that name."""
    path = _PROFILE_DIR / f"{key}.yaml"
    if not is_file_stem(key) or path == DEFAULTS_PATH or not path.is_file():
        return None
    profile = _profile_file(path)
    return profile if profile.name == key else None


def other_calibrations(trainer: str, lineage: tuple[str, ...] = ()) -> dict[tuple[str, str], CalibratedParameters]:
    """(trainer, GPU) -> calibrated parameters of every built-in trainer but ``trainer``: where a
    trainer calibrated on no GPU starts from (``transfer.transfer_parameters``). A trainer that
    inherits (``lineage``, nearest base first) starts from its nearest calibrated base's only: it
    runs that base's code, so that base's fits are the closest measured ones."""
    profiles = _builtin_profiles()
    for base in lineage:
        own = {(base, gpu): params for gpu, params in profiles[base].parameters.items() if gpu != "default"} \
            if base in profiles else {}
        if own:
            return own
    return {(name, gpu): params for name, profile in profiles.items() if name != trainer
            for gpu, params in profile.parameters.items() if gpu != "default"}


def list_trainers() -> list[str]:
    return sorted(_builtin_profiles())


def builtin_trainer_names() -> list[str]:
    """The built-in trainers' names without reading their files (each file is named after its
    trainer, ``<name>.yaml``: tests/unit/profiles): what ``--help`` lists, at no start-up cost."""
    return sorted(p.stem for p in _PROFILE_DIR.glob("*.yaml") if p != DEFAULTS_PATH)


def load_profile(name: str) -> TrainerProfile:
    """A built-in trainer profile by name (:func:`list_trainers`), or a profile file's own name."""
    key = name.strip().lower()
    own = _own_file_profile(key)
    if own is not None:
        return own
    profiles = _builtin_profiles()
    if key not in profiles:
        raise UnknownNameError("trainer", name, profiles)
    return profiles[key]
