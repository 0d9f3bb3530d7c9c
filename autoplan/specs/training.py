"""The training setup: the cluster, the sequence length, the global batch and how FLOPs count.

A ``TrainingSpec`` is what every layout of one plan shares (calculon's "application" beside its
"execution" and "system"); the parallel knobs live in :class:`autoplan.layout.Layout`. Precision
is not here: it is a layout knob, because the search explores bf16 and fp8.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from autoplan.errors import AutoplanError, shown
from autoplan.specs.hardware import Cluster

# How model FLOPs (for MFU) are counted (TrainingSpec.flops_convention, docs/conventions.md).
FLOPS_CONVENTIONS = ("causal", "megatron", "playbook")
DEFAULT_FLOPS_CONVENTION = "causal"
# How attention is computed: "flash" (fused kernels that keep only Q, K, V, the output and the
# softmax log-sum-exp: FlashAttention-2, Transformer Engine's FusedAttention, PyTorch SDPA),
# "eager" (the s×s scores are materialised and saved: Megatron's non-fused softmax of 2021-22) or
# "triton" (FlashAttention in Triton, llm-foundry's attn_impl triton of 2023: saves what flash
# saves, runs at its published speed, cost.attention_kernels).
ATTENTION_KERNELS = ("flash", "eager", "triton")
# FP8 scaling recipes (Transformer Engine transformer_engine/common/recipe/__init__.py):
# per-tensor ("tensorwise": DelayedScaling or Float8CurrentScaling), "blockwise"
# (Float8BlockScaling, 1x128 activations / 128x128 weights) and "mxfp8" (MXFP8BlockScaling);
# Megatron's --fp8-recipe choices. "rowwise": torchao's Float8 recipe of one scale per row of
# each GEMM operand (torchao/float8/config.py Float8LinearRecipeName.ROWWISE), the only Float8
# linear recipe of torchtitan 0.3 (torchtitan/components/quantization/float8.py).
FP8_RECIPES = ("tensorwise", "delayed", "blockwise", "mxfp8", "rowwise")
# Bytes per element of each AdamW moment (exp_avg, exp_avg_sq) by storage dtype: Megatron
# --exp-avg-dtype / --exp-avg-sq-dtype under --use-precision-aware-optimizer (Transformer Engine
# FusedAdam; fp8 moments carry one fp32 scale per tensor, negligible), Apex DistributedFusedAdam
# ``dtype`` (NeMo 1 ``optim.dtype``; apex/contrib/optimizers/distributed_fused_adam.py StateBucket).
OPTIMIZER_STATE_BYTES = {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0}
# The optimizer's copy of the weights it updates, bytes per parameter (None: the profile's
# master_bytes, fp32): "fp16" (Megatron --main-params-dtype fp16), "remainders" (the 16 low bits
# of the fp32 value beside the bf16 weight, an int16 per parameter: Transformer Engine FusedAdam
# ``store_param_remainders``, on by default under Megatron's precision-aware optimizer with bf16,
# megatron/core/optimizer/optimizer_config.py; Apex DistributedFusedAdam, which NeMo 1 turns on
# for bf16 weights with fp32 state, nemo/collections/nlp/models/language_modeling/
# megatron_base_model.py setup_optimization), "none" (the bf16 weights are the master: Apex
# ``store_params=False``, NeMo 1's choice when the optimizer dtype equals the weights').
MASTER_WEIGHT_BYTES = {"fp32": None, "fp16": 2.0, "remainders": 2.0, "none": 0.0}
# CUDA graphs, as Megatron-Core captures them (--cuda-graph-impl, --cuda-graph-scope): "none"
# (eager: every kernel launched from Python, Megatron's default --cuda-graph-impl none); "attn"
# (Transformer Engine make_graphed_callables of each layer's attention, forward and backward:
# --cuda-graph-impl transformer_engine --cuda-graph-scope attn); "moe_router,moe_preprocess" (the
# MoE router and the dispatcher's preprocessing up to its device-to-host copy; core_v0.16.0 and
# later) and "attn,moe_router,moe_preprocess" (both); "full_iteration" (Megatron-Core's own
# capture of the whole forward-backward: --cuda-graph-impl local --cuda-graph-scope
# full_iteration). What each removes from the host's launch time: autoplan.cost.host_dispatch.
CUDA_GRAPHS = ("none", "attn", "moe_router,moe_preprocess", "attn,moe_router,moe_preprocess", "full_iteration")
# The largest values accepted, one bound per quantity: the options of every command use these too.
# Far above any real job; they keep counts exact in float64 (STYLE.md §2) and int64 casts safe.
MAX_GPUS = 10**7
MAX_SEQ_LEN = 10**8
MAX_GBS_SEQS = 2**40
# The global batch a layout may reach by default, as a fraction of the one asked for: ±5 %, so a
# GPU count whose data-parallel degrees do not divide the batch (96 GPUs and 512 sequences) still
# gets plans, each at its nearest reachable batch (a layout that reaches it exactly keeps it).
# 0 demands the batch exactly.
DEFAULT_GBS_TOLERANCE = 0.05


@dataclass(frozen=True)
class Setting:
    """One trainer setting of a setup (a ``TrainingSpec`` field beside the cluster and the batch),
    declared once: its default, its values, its command-line option and help. ``trainer``: a
    setting a trainer runs or not (its profile's ``capabilities: settings`` lists the other values
    it runs; the rule table refuses the rest); False for a counting convention of the MFU. The
    commands' options (``cli.options``), what a search records in plans.json, the capability
    lists and the setup's validation read this table; the field itself is on ``TrainingSpec``."""

    name: str
    default: object
    choices: tuple  # the values (False, True for a flag; () for a capacity factor, a number or None)
    help: str
    trainer: bool = True
    negatable: bool = False  # a flag spelled --x/--no-x (default on)
    option: str = ""  # the command-line spelling where it is not --<name with dashes>
    fp8_only: bool = False  # counts for fp8 layouts only (ignored under bf16, by the cost model and the rules)

    @property
    def flag(self) -> str:
        return self.option or "--" + self.name.replace("_", "-")


SETTINGS: tuple[Setting, ...] = (
    Setting("attention_kernel", "flash", ATTENTION_KERNELS,
            "Attention kernel: flash/fused (no s² scores saved), eager (scores saved) or triton (llm-foundry's "
            "Triton FlashAttention of 2023, at its published speed)."),
    Setting("fp8_recipe", "tensorwise", FP8_RECIPES,
            "FP8 scaling recipe of fp8 layouts: GEMM gain, casts, memory of FP8 tensors and scales (delayed: "
            "Transformer Engine's amax-history scaling, Megatron's default, no amax pass; rowwise: torchao's, "
            "torchtitan 0.3's only Float8 recipe)."),
    Setting("fp8_param_gather", False, (False, True), "FP8 primary weights, no bf16 copy (Megatron --fp8-param-gather).",
            fp8_only=True),
    Setting("fp8_attention", False, (False, True),
            "QK^T and PV of fp8 layouts in FP8 (cuDNN fused attention, Transformer Engine fp8_dpa; Megatron-Bridge "
            "mixed_precision.fp8_dot_product_attention), at the GPU's FP8 tensor rate.", fp8_only=True),
    Setting("grad_reduce_in_bf16", False, (False, True),
            "bf16 gradient buffers instead of fp32 (Megatron --grad-reduce-in-bf16)."),
    Setting("shard_gradients", False, (False, True),
            "Gradients sharded over DP with the optimizer states from zero 1 on (FSDP-style DP with a pipeline, "
            "as Llama 3's trainer)."),
    Setting("optimizer_state_dtype", "fp32", tuple(OPTIMIZER_STATE_BYTES),
            "Dtype of AdamW's two moments (Megatron --exp-avg-dtype with --use-precision-aware-optimizer; NeMo 1 "
            "optim.dtype)."),
    Setting("master_weights", "fp32", tuple(MASTER_WEIGHT_BYTES),
            "The optimizer's master copy of the weights: fp32, fp16 (Megatron --main-params-dtype fp16), "
            "remainders (int16 low bits beside bf16 weights) or none (the bf16 weights themselves, NeMo 1's Apex "
            "optimizer)."),
    Setting("moe_capacity_factor", None, (), "Expert capacity factor with padding [default: dropless]."),
    Setting("cuda_graphs", "none", CUDA_GRAPHS,
            "CUDA graphs (Megatron --cuda-graph-impl/--cuda-graph-scope): which launches replay from a graph "
            "instead of one Python launch each. Default none: every trainer's default (Megatron's "
            "--cuda-graph-impl none), so the host's launch time is costed wherever it exceeds the GPU's work "
            "(small models, small micro-batches, MoE layers with their host sync)."),
    Setting("compile_loss", False, (False, True),
            "The cross-entropy loss under torch.compile (torchtitan compile.components 'loss'): the fused loss keeps "
            "the bf16 logits, 4 B per logit at its peak instead of eager PyTorch's 12."),
    Setting("mtp_in_model_flops", True, (False, True),
            "Count multi-token-prediction modules in the model FLOPs of MFU (Megatron counts them).",
            trainer=False, negatable=True, option="--mtp-in-mfu"),
)
# What the commands take as options (cli.options) and a search records in its plans.json for export.
SETTING_FIELDS = tuple(s.name for s in SETTINGS)
# The settings a trainer runs (or does not), each with its default: a trainer profile's
# capabilities (autoplan.profiles.capabilities) list the other values it can run, and the rule
# table refuses the rest. fp8_recipe is checked against the profile's fp8_recipes list (for fp8
# layouts only), so it is not among these.
TRAINER_SETTINGS = {s.name: s.default for s in SETTINGS if s.trainer and s.name != "fp8_recipe"}
# The settings that count for fp8 layouts only (``Setting.fp8_only``).
FP8_ONLY_SETTINGS = frozenset(s.name for s in SETTINGS if s.fp8_only)


def setting_choices(name: str) -> tuple:
    """The values a capability may list for setting ``name`` (``moe_capacity_factor``: dropless
    or capacity, the latter for any factor)."""
    choices = next(s.choices for s in SETTINGS if s.name == name)
    return choices or ("dropless", "capacity")


def setting_choice(name: str, value: object) -> object:
    """``value`` of setting ``name`` as a capability lists it (a capacity factor -> 'capacity')."""
    if name == "moe_capacity_factor":
        return "dropless" if value is None else "capacity"
    return value


class TrainingSpecError(AutoplanError):
    """A training setup whose values break an invariant (the message names it and the values)."""


@dataclass(frozen=True)
class TrainingSpec:
    """The cluster, sequence length and global batch every layout must train with.

    ``gbs_tolerance`` is a fraction: 0 demands ``gbs_seqs`` exactly; 0.05 (the default,
    :data:`DEFAULT_GBS_TOLERANCE`) accepts the nearest batch ``dp·mbs·grad_acc`` within ±5 % of it. ``flops_convention`` decides how *model*
    FLOPs (for MFU) are counted; time always uses the work the kernels really do (causal
    attention does half the score FLOPs):

    * ``causal`` (default, :data:`DEFAULT_FLOPS_CONVENTION`): 6·N·T + 3·L·s·a·(d_qk + d_v)·T, N =
      the matmul parameters (no embedding lookup; a tied LM head counted once, as the head's
      matmul), the attention scores halved for causal masking: the work a causal model needs
      (PaLM, Chowdhery et al. 2022, App. B: 6N + 12·L·H·Q·T with N the non-embedding
      parameters; halved as the kernels run it), so MFU equals HFU without recompute (up to the
      norm weights).
    * ``megatron``: Megatron's ``num_floating_point_operations`` (megatron/training/training.py:
      N without the embedding lookup, attention not halved).
    * ``playbook``: 6·N·T + 6·L·s·a·(d_qk + d_v)·T, N = every parameter with a tied LM head
      counted twice, attention not halved; reproduces the Ultra-Scale Playbook's and
      Megatron-Core's published MFU (refdata README).

    ``attention_kernel`` is the attention kernel (:data:`ATTENTION_KERNELS`; ``eager``
    saves the s×s score activations and moves them through HBM, ``triton`` runs at its published
    speed, ``cost.time.attention_s``). ``fp8_recipe`` and ``fp8_param_gather`` say how layouts
    with precision fp8 keep their tensors (:data:`FP8_RECIPES`; Megatron's
    ``--fp8-recipe`` and ``--fp8-param-gather``); both only change memory.
    ``fp8_attention`` runs the attention's two matmuls (QKᵀ, PV) of fp8 layouts in FP8
    (Transformer Engine ``DotProductAttention`` under a recipe with ``fp8_dpa``: cuDNN's fused FP8
    attention; Megatron-Core ``TransformerConfig.fp8_dot_product_attention``): time only
    (``cost.fp8.attention_speedup``, ``cost.time.attention_s``).
    ``grad_reduce_in_bf16`` keeps the gradient buffers in bf16 instead of the profile's fp32
    (Megatron ``--grad-reduce-in-bf16``, NeMo 1 ``optim.grad_sync_dtype: bf16``, NeMo 2
    ``grad_reduce_in_fp32=False``): the gradient memory and the data-parallel reduction, which moves
    the bf16 buffer (``CostContext.grad_reduce_bytes``).
    ``shard_gradients`` shards the gradients over the data-parallel group together with the
    optimizer states from ZeRO stage 1 on (ZeRO-2 semantics under a pipeline): the FSDP-style data
    parallelism of Meta's Llama 3 trainer ("shards optimizer states and gradients, but ... does not
    reshard [parameters] after forward", Llama 3 Herd of Models, arXiv 2407.21783, Sec. 3.3.2),
    which no exported trainer runs with a pipeline (Megatron's distributed optimizer keeps the
    whole gradient buffer); memory only.
    ``optimizer_state_dtype`` stores AdamW's two moments in that dtype
    (:data:`OPTIMIZER_STATE_BYTES`; fp32 by default, other optimizers keep theirs) and
    ``master_weights`` says what master copy of the weights the optimizer keeps
    (:data:`MASTER_WEIGHT_BYTES`): memory of the sharded optimizer states and the bytes the
    optimizer step moves (``CostContext.adam_state_bytes``, ``CostContext.master_bytes``).
    ``moe_capacity_factor`` is None for dropless MoE (Megatron's default) or the capacity factor
    c of a trainer that drops tokens and pads each expert to capacity (Megatron
    ``--moe-expert-capacity-factor c --moe-pad-expert-input-to-capacity``); memory, and no host
    sync in the token dispatcher (``cost.host_dispatch``).
    ``cuda_graphs`` says which kernel launches replay from CUDA graphs (:data:`CUDA_GRAPHS`, Megatron
    ``--cuda-graph-impl`` / ``--cuda-graph-scope``): the host's launch time they remove
    (``cost.host_dispatch``); "none", the default, is eager launching.
    ``compile_loss`` runs the cross-entropy under ``torch.compile`` (torchtitan's
    ``compile.components`` "loss"): the memory of the logits and the loss and the HBM bytes the
    loss moves (``cost.loss_kernel``).
    """

    cluster: Cluster
    seq_len: int
    gbs_seqs: int
    gbs_tolerance: float = DEFAULT_GBS_TOLERANCE
    flops_convention: str = DEFAULT_FLOPS_CONVENTION
    # Multi-token-prediction modules in the model FLOPs (MFU): Megatron-LM counts them
    # (training.py num_floating_point_operations); False leaves them to the hardware FLOPs only.
    mtp_in_model_flops: bool = True
    attention_kernel: str = "flash"
    fp8_recipe: str = "tensorwise"
    fp8_param_gather: bool = False
    fp8_attention: bool = False
    grad_reduce_in_bf16: bool = False
    shard_gradients: bool = False
    optimizer_state_dtype: str = "fp32"
    master_weights: str = "fp32"
    moe_capacity_factor: float | None = None
    cuda_graphs: str = "none"
    compile_loss: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.cluster, Cluster):
            raise TrainingSpecError(f"cluster must be a Cluster, got {type(self.cluster).__name__}")
        for name, maximum in (("seq_len", MAX_SEQ_LEN), ("gbs_seqs", MAX_GBS_SEQS)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise TrainingSpecError(f"{name} >= 1 must hold for an integer {name}, got {name}={shown(value)}")
            if value > maximum:
                raise TrainingSpecError(f"{name} <= {maximum:,} must hold, got {name}={shown(value)}")
        if self.cluster.num_gpus > MAX_GPUS:
            raise TrainingSpecError(f"gpus <= {MAX_GPUS:,} must hold, got gpus={self.cluster.num_gpus}")
        tolerance = self.gbs_tolerance
        if isinstance(tolerance, bool) or not isinstance(tolerance, (int, float)) or not 0.0 <= tolerance < 1.0:
            raise TrainingSpecError(f"0 <= gbs_tolerance < 1 must hold, got gbs_tolerance={shown(tolerance)}")
        if self.flops_convention not in FLOPS_CONVENTIONS:
            raise TrainingSpecError(f"flops_convention must be one of {', '.join(FLOPS_CONVENTIONS)}, "
                                    f"got {shown(self.flops_convention)}")
        for setting in SETTINGS:  # the choice settings; flags below, the capacity factor after
            if setting.choices and not isinstance(setting.default, bool) and getattr(self, setting.name) not in setting.choices:
                raise TrainingSpecError(f"{setting.name} must be one of {', '.join(setting.choices)}, "
                                        f"got {shown(getattr(self, setting.name))}")
        factor = self.moe_capacity_factor
        if factor is not None and (isinstance(factor, bool) or not isinstance(factor, (int, float)) or factor <= 0):
            raise TrainingSpecError(f"moe_capacity_factor must be None (dropless) or > 0, got {shown(factor)}")
        for name in (s.name for s in SETTINGS if isinstance(s.default, bool)):
            if not isinstance(getattr(self, name), bool):
                raise TrainingSpecError(f"{name} must be true or false, got {shown(getattr(self, name))}")

    @property
    def gpus(self) -> int:
        """The GPU count of the job (the cluster's)."""
        return self.cluster.num_gpus

    @property
    def fp32_optimizer(self) -> bool:
        """fp32 AdamW moments and fp32 master weights: what every trainer stores unless told
        otherwise (``optimizer_state_dtype``, ``master_weights``)."""
        return self.optimizer_state_dtype == "fp32" and self.master_weights == "fp32"

    @property
    def gbs_tokens(self) -> int:
        return self.gbs_seqs * self.seq_len

    def describe(self) -> str:
        """'512 x h100-sxm, gbs 512 x 8192 tokens' for titles and messages."""
        return (f"{self.gpus} x {self.cluster.gpu.name}, gbs {self.gbs_seqs} x {self.seq_len} tokens"
                + (f" (±{self.gbs_tolerance:g})" if self.gbs_tolerance else ""))


def resolve_batch(seq_len: int | None, gbs_seqs: int | None, gbs_tokens: float | None,
                  model_seq_len: int, *, required: bool = True) -> tuple[int, int | None]:
    """(seq_len, gbs_seqs) from the options: ``seq_len`` (default ``model_seq_len``) and the
    batch as ``gbs_seqs`` or ``gbs_tokens``, which must be a whole number of sequences."""
    seq = seq_len or model_seq_len
    if gbs_seqs is not None and gbs_tokens is not None:
        raise TrainingSpecError("--gbs-tokens and --gbs-seqs are mutually exclusive: give one, not both "
                                f"(got --gbs-seqs {gbs_seqs} and --gbs-tokens {gbs_tokens:.0f})")
    if gbs_tokens is not None:
        if gbs_tokens > MAX_GBS_SEQS * seq:
            raise TrainingSpecError(f"--gbs-tokens ({gbs_tokens:.4g}) must be at most {MAX_GBS_SEQS:,} sequences "
                                    f"of {seq} tokens ({MAX_GBS_SEQS * seq:.4g})")
        if gbs_tokens != int(gbs_tokens):
            raise TrainingSpecError(f"--gbs-tokens must be a whole number of tokens, got {gbs_tokens:g}")
        if gbs_tokens % seq:
            raise TrainingSpecError(f"--gbs-tokens ({gbs_tokens:.0f}) must be a multiple of the sequence "
                                    f"length ({seq}); nearest: {max(1, round(gbs_tokens / seq)) * seq}")
        gbs_seqs = int(gbs_tokens // seq)
    if gbs_seqs is None and required:
        raise TrainingSpecError("the global batch is missing: give --gbs-tokens (e.g. 4M) or --gbs-seqs")
    return seq, gbs_seqs
