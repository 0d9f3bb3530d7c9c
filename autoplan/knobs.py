"""The layout knobs, declared once: every command's options, the search space and the columns
read this table.

A ``Knob`` is one field of :class:`autoplan.layout.Layout`: its kind, its allowed values (named
constants for the categorical ones), the value a layout that leaves it out takes, the help of
its one-layout option (estimate, explain, export, calibrate) and of its search option (a list
of values), its column in plans.csv, compare and calibrate CSVs (unit and meaning), and the
names other tools give that column. ``autoplan.space`` (what a search space holds),
``autoplan.cli.layout_options`` and ``autoplan.cli.search`` (the options),
``autoplan.report.columns`` (the column dictionary), ``autoplan.layout`` (the codes of the
categorical knobs) and ``autoplan.layout_records`` (the CSV spellings it refuses) are generated
from ``KNOBS``. Adding a knob is one entry here plus its field on ``Layout`` and the formula that
reads it.

The order of ``KNOBS`` is the order of a search space's product (the exhaustive enumeration and
its tie-breaking sort): append, do not reorder.
"""

from __future__ import annotations

from dataclasses import dataclass

from autoplan.recompute_modules import RECOMPUTE_MODULES

RECOMPUTE = ("none", "selective", "full")
PRECISIONS = ("bf16", "fp8")
# Rank orders, innermost (fastest-varying rank index) first. Experts live inside the dp·cp
# ranks of a stage (Megatron's expert grid: etp, ep, expert-dp, pp).
PLACEMENTS = ("tp-cp-dp-pp", "tp-dp-cp-pp", "tp-pp-cp-dp", "cp-tp-dp-pp")
DEFAULT_PLACEMENT = PLACEMENTS[0]
# Pipeline schedules (autoplan.cost.schedule): 'default' is the trainer's own, 1F1B or, with
# vpp > 1, interleaved 1F1B (nanotron's profile may say AFAB).
PP_SCHEDULES = ("default", "1f1b", "interleaved", "afab", "zb-h1", "zb-v", "dualpipe", "dualpipev")
# How layers fall on pipeline stages (autoplan.cost.stages): 'balanced' splits the transformer
# layers as evenly as possible; 'embed-loss' counts the embedding and the loss as one layer each
# (Megatron --account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split;
# Llama 3's one layer fewer on the first and the last stage).
PP_SPLITS = ("balanced", "embed-loss")
# The optimizer (autoplan.cost.optimizer; 'adamw' = the trainer's Adam, as before) and what goes to
# host memory (autoplan.cost.offload): nothing, the optimizer states with the fp32 master weights
# (ZeRO-Offload), or also the ZeRO-3 parameter shards (ZeRO-Infinity offload_param).
OPTIMIZERS = ("adamw", "adamw8bit", "adafactor", "sgd", "lion", "muon")
OFFLOADS = ("none", "optimizer", "params")
MAX_DEGREE = 2**20  # the largest parallel degree or micro-batch accepted (options, space files)

# Kinds: 'degree' (an integer >= 1), 'count' (an integer >= 0), 'stage' (a ZeRO stage 0-3),
# 'choice' (one of ``choices``), 'modules' (a comma-separated set of recompute modules), 'flag'.
KINDS = ("degree", "count", "stage", "choice", "modules", "flag")


@dataclass(frozen=True)
class Knob:
    """One layout knob: what it is, what it may be, how every command spells it."""

    name: str
    kind: str
    default: object  # the value of a layout that leaves it out (None: derived from the others)
    help: str  # the one-layout option (estimate, explain, export, calibrate)
    list_help: str  # the search option, a list of values ('' for a derived knob: not searched)
    unit: str  # of its column (plans.csv, compare)
    meaning: str
    choices: tuple = ()
    aliases: tuple[str, ...] = ()  # other tools' names for its column, refused with this one's

    def __post_init__(self) -> None:
        assert self.kind in KINDS, f"knob {self.name}: kind {self.kind!r} is not one of {KINDS}"
        assert (self.kind == "choice") == bool(self.choices), f"knob {self.name}: choices go with kind 'choice'"

    @property
    def flag(self) -> str:
        """Its command-line option, '--pp-schedule'."""
        return "--" + self.name.replace("_", "-")

    @property
    def searched(self) -> bool:
        """Whether a search space lists values of it (dp, grad_acc and sp are derived)."""
        return bool(self.list_help)

    @property
    def column_kind(self) -> str:
        """'count', 'code' or 'flag' in the column dictionary."""
        return {"degree": "count", "count": "count", "flag": "flag"}.get(self.kind, "code")

    @property
    def minimum(self) -> int:
        return 1 if self.kind == "degree" else 0


def _degree(name: str, what: str, unit: str, meaning: str, aliases: tuple[str, ...] = ()) -> Knob:
    return Knob(name, "degree", 1, f"{what} size.", f"{what} degree(s), e.g. 8 or 4,8 (replaces the space's list).",
                unit, meaning, aliases=aliases)


KNOBS: tuple[Knob, ...] = (
    _degree("tp", "Tensor-parallel", "ranks", "tensor-parallel degree",
            ("tensor_parallel", "tensor_model_parallel_size", "tp_size")),
    _degree("pp", "Pipeline-parallel", "stages", "pipeline-parallel stages",
            ("pipeline_parallel", "pipeline_model_parallel_size", "pp_size")),
    Knob("vpp", "degree", 1, "Virtual stages per pipeline rank.",
         "Virtual pipeline (interleaved) degree(s), e.g. 2 or 1,2,4 (replaces the space's list).", "chunks",
         "virtual pipeline chunks per rank (interleaved 1F1B)",
         aliases=("virtual_pipeline", "virtual_pipeline_model_parallel_size", "vp")),
    _degree("cp", "Context-parallel", "ranks", "context-parallel degree",
            ("context_parallel", "context_parallel_size", "cp_size")),
    _degree("ep", "Expert-parallel", "ranks", "expert-parallel degree",
            ("expert_parallel", "expert_model_parallel_size", "ep_size")),
    _degree("etp", "Expert tensor-parallel", "ranks", "expert tensor-parallel degree",
            ("expert_tensor_parallel_size",)),
    Knob("zero", "stage", 1, "ZeRO stage: 0 none, 1 optimizer, 2 +gradients, 3 +weights (FSDP).",
         "ZeRO stage(s): 0, 1, 2, 3.", "stage", "ZeRO stage (0 none, 1 optimizer, 2 + gradients, 3 + weights)",
         aliases=("zero_stage", "zero_optimization")),
    Knob("mbs", "degree", 1, "Micro-batch size in sequences.", "Micro-batch size(s) in sequences.", "sequences",
         "micro-batch size", aliases=("micro_batch", "micro_batch_size", "mbs_per_gpu")),
    Knob("recompute_layers", "count", 0, "Full recompute of this many layers per (virtual) stage (0 = every layer).",
         "Full recompute of N layers per stage, e.g. 0,4,8 (0 = every layer).", "layers",
         "full recompute of this many layers per (virtual) stage (0: every layer; Megatron --recompute-method block)",
         aliases=("recompute_num_layers",)),
    Knob("offload_layers", "count", 0, "Layers per stage whose activations are offloaded to host memory.",
         "Layers per stage whose activations are offloaded to the host, e.g. 0,8.", "layers",
         "layers per stage whose activations go to host memory (0: none)"),
    Knob("hsdp", "count", 0, "Hybrid sharding: ZeRO shards the model states inside groups of this many "
         "data-parallel ranks, replicated across groups (0 = over the whole group).",
         "Hybrid-sharding group size(s), e.g. 0,8,16 (0 = ZeRO shards over the whole data-parallel group).",
         "ranks", "hybrid sharding: ZeRO shards the model states inside groups of this many ranks, replicated "
         "across groups (0: over the whole ZeRO group)"),
    Knob("recompute", "choice", "none", "Activation recomputation.",
         f"Activation recompute mode(s): {', '.join(RECOMPUTE)}.", "mode",
         "activation recomputation: none, selective or full", RECOMPUTE,
         aliases=("activation_checkpointing", "recompute_granularity")),
    Knob("precision", "choice", "bf16", "Matmul precision: bf16, or fp8 (needs FP8 tensor cores).",
         f"Precision(s): {', '.join(PRECISIONS)}.", "format", "matmul precision: bf16 or fp8", PRECISIONS,
         aliases=("dtype",)),
    Knob("placement", "choice", DEFAULT_PLACEMENT, "Rank order, innermost first.", "Rank order(s), innermost first.",
         "order", "rank order of the parallel dimensions, innermost first", PLACEMENTS),
    Knob("recompute_modules", "modules", "", f"Selective recompute of these modules: {', '.join(RECOMPUTE_MODULES)} "
         "[default: the trainer's own selective recompute].",
         "A set of selective-recompute modules; repeat for several sets ('' = the trainer's own selective recompute).",
         "modules", "selective recompute of these modules, comma-separated (empty: the trainer's own; "
         "Megatron --recompute-modules)"),
    Knob("pp_schedule", "choice", "default", "Pipeline schedule (default: the trainer's own, 1F1B or interleaved "
         "with vpp > 1); zb-v and dualpipev run two chunks per rank (vpp 2).",
         f"Pipeline schedule(s): {', '.join(PP_SCHEDULES)} (default = the trainer's own).", "schedule",
         "pipeline schedule: default (the trainer's own), 1f1b, interleaved, afab, zb-h1, zb-v, dualpipe, "
         "dualpipev (autoplan.cost.schedule)", PP_SCHEDULES, aliases=("schedule",)),
    Knob("pp_split", "choice", "balanced", "Layers on pipeline stages: balanced, or embed-loss (the embedding "
         "and the loss count as one layer each, Llama 3's split).",
         "Stage split(s): balanced, embed-loss (the embedding and loss count as a layer each).", "split",
         "layers on pipeline stages: balanced, or embed-loss (the embedding and the loss count as one layer each)",
         PP_SPLITS),
    Knob("optimizer", "choice", "adamw", "Optimizer: adamw, adamw8bit (bitsandbytes), adafactor, sgd (momentum), "
         "lion, muon (AdamW for embeddings, head and norms).",
         f"Optimizer(s): {', '.join(OPTIMIZERS)} [default: adamw].", "optimizer",
         "optimizer: adamw, adamw8bit, adafactor, sgd, lion, muon (autoplan.cost.optimizer)", OPTIMIZERS),
    Knob("offload", "choice", "none", "Model states in host memory: none; optimizer (optimizer states and fp32 "
         "master weights, CPU optimizer step); params (also the ZeRO-3 weight shards).",
         "Model states in host memory: none, optimizer (states + fp32 master), params (also ZeRO-3 weight "
         "shards) [default: none].", "states",
         "model states in host memory: none, optimizer (states + fp32 master weights), params (also the ZeRO-3 "
         "weight shards) (autoplan.cost.offload)", OFFLOADS),
    # Derived from the others unless given (autoplan.layout.derive_batch_knobs): not searched.
    Knob("dp", "degree", None, "Data-parallel size (default gpus/(tp·pp·cp)).", "", "ranks", "data-parallel degree",
         aliases=("data_parallel", "dp_size")),
    Knob("grad_acc", "degree", None, "Micro-batches per step (default from the batch).", "", "micro-batches",
         "micro-batches per step and data-parallel rank",
         aliases=("grad_accum", "gradient_accumulation", "gradient_accumulation_steps", "ga")),
    Knob("sp", "flag", None, "Sequence parallel (default: on when tp > 1).", "", "bool",
         "sequence parallelism on (with tp > 1)", aliases=("sequence_parallel",)),
)
BY_NAME = {knob.name: knob for knob in KNOBS}
SEARCHED = tuple(knob for knob in KNOBS if knob.searched)
CHOICES = {knob.name: knob.choices for knob in KNOBS if knob.kind == "choice"}  # name -> its codes' names
