"""Megatron-LM: a bash launch script for ``pretrain_gpt.py`` (torchrun), pinned to core_v0.15.3.

Every flag below exists in ``megatron/training/arguments.py`` at tag core_v0.15.3 (checked
against that file), but those the megatron profile's ``later_versions`` give to a newer tag
(``--optimizer muon``: core_v0.16.0), which the rules refuse unless the export names that version
(``--trainer-version``, written in the header); every value is shell-quoted. Mapping of the layout:

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
hsdp               --num-distributed-optimizer-instances dp·cp/hsdp (under zero 3 Megatron-FSDP
                   HSDP: replicated across instances, its outer_dp_sharding_strategy default
                   no_shard; core_v0.15.3 has no flag for it, mcore_fsdp_adapter.py enable_hsdp)
zero 3             Megatron-FSDP: --use-megatron-fsdp --data-parallel-sharding-strategy
                   optim_grads_params (+ the flags its docs require) and
                   --init-model-with-meta-device (each rank builds only its shard: a 70B at
                   tp=1 would not fit while being built)
overlap            from the megatron profile's overlap fractions (the time model's assumptions,
                   autoplan/profiles/defaults.yaml): dp_overlap (fsdp_overlap under ZeRO-3) > 0
                   -> --overlap-grad-reduce, + --overlap-param-gather with zero >= 1;
                   tp_overlap > 0 with sp -> --tp-comm-overlap (each only where the profile's
                   options: switch it on, autoplan/profiles/trainer_options.py); what cannot be switched on
                   (tp overlap without sp, expert all-to-all overlap, p2p overlap without vpp)
                   is a header warning
model              autoplan.export.megatron_model (RoPE base/scaling, norm epsilon, MLA, MoE
                   routing from the model)
mbs, gbs           --micro-batch-size, --global-batch-size (grad_acc = gbs/(mbs·dp))
recompute          selective: --recompute-granularity selective (Megatron's default core_attn),
                   with recompute_modules --recompute-modules m1 m2 ...;
                   full: --recompute-granularity full --recompute-method uniform
                   --recompute-num-layers 1, with recompute_layers N --recompute-method block
                   --recompute-num-layers N (N layers of each virtual stage)
offload_layers     refused by the rules: core_v0.15.3 has no --cpu-offloading-num-layers
optimizer          --optimizer sgd|muon|lion (adam, Megatron's AdamW, is the default; muon needs
                   core_v0.16.0, lion core_v0.17.0: the profile's later_versions; muon runs
                   without the distributed optimizer and the overlapped reduction, so the rules
                   refuse it with zero >= 1 or dp·cp > 1: megatron_muon_data_parallel)
offload            optimizer: --optimizer-cpu-offload --optimizer-offload-fraction 1.0
                   --overlap-cpu-optimizer-d2h-h2d --use-precision-aware-optimizer
precision          --bf16, and --fp8-format hybrid for fp8
data               --data-path: a blend 'w1 prefix1 w2 prefix2' becomes its words
placement          default order tp-cp-ep-dp-pp, or --use-tp-pp-dp-mapping (tp-cp-ep-pp-dp)
=================  ===========================================================================
"""

from __future__ import annotations

from dataclasses import replace

from autoplan.cost.overlap import overlap_of
from autoplan.export.common import (
    ExportResult,
    LaunchOptions,
    bash_array,
    check_model_features,
    header_lines,
    launch_shape,
    megatron_checkpoint_args,
    padded_vocab,
    shell_args,
)
from autoplan.export import optimizer_precision
from autoplan.export.launch import Entry, LaunchShape, TrialRun, how_to_run, launch_script, required
from autoplan.export.megatron_model import LOCAL_ATTENTION, model_args, model_warnings
from autoplan.export.megatron_model import MODEL_FIELDS as MODEL_FIELDS  # (the declaration, model_fields.py)
from autoplan.export.placement import matching_order, placement_warning
from autoplan.layout import Layout
from autoplan.profiles import TrainerProfile, load_profile
from autoplan.profiles.efficiency import PhysicalEfficiency
from autoplan.specs.model import ModelSpec
from autoplan.specs.training import TrainingSpec

TRAINER = "Megatron-LM"
LAUNCH_FILE = "megatron_pretrain_gpt.sh"
# autoplan trial: the export logs every iteration (--log-interval 1) and report_memory after the
# first; --log-throughput adds the TFLOP/s line (megatron/training/training.py training_log).
TRIAL = TrialRun(LAUNCH_FILE, ("--log-throughput",), lambda layout: {"MEGATRON_LM": "your Megatron-LM checkout"})
ORDERS = {"default": "tp-cp-dp-pp", "--use-tp-pp-dp-mapping": "tp-cp-pp-dp"}

Args = list[tuple[str, object]]


def render(model: ModelSpec, layout: Layout, training: TrainingSpec, launch: LaunchOptions,
           profile: TrainerProfile | None = None) -> ExportResult:
    """The launch script for this plan (a pure function of its inputs); ``profile``: the megatron
    profile the plan was priced with (default the built-in), whose overlap the flags follow."""
    per_node, nodes = launch_shape(training)
    profile = profile or load_profile("megatron")
    efficiency = assumed_efficiency(training, profile)
    warnings = (check_model_features(model, training, "Megatron-LM", local_attention=LOCAL_ATTENTION)
                + _warnings(model, layout) + overlap_warnings(layout, efficiency)
                + launch.no_checkpoint_warning("Megatron-LM"))
    args = (parallel_args(layout) + overlap_args(layout, efficiency, profile) + batch_args(layout, training)
            + recompute_args(layout) + optimizer_args(layout, training)
            + precision_args(layout, training) + cuda_graph_args(training) + model_args(model, layout, training)
            + vocab_args(model, layout, launch)
            + data_args(launch) + schedule_args(launch) + megatron_checkpoint_args(launch))
    commands = [how_to_run(LAUNCH_FILE, launch.launcher, nodes, "MEGATRON_LM=/path/to/Megatron-LM")]
    version = f"{TRAINER} {profile.capabilities.version} (pretrain_gpt.py)"
    head = header_lines(version, model, layout, training, launch=commands, warnings=warnings,
                        prediction=launch.prediction,
                        notes=_notes(model, layout, training, launch))
    env = ""
    if (layout.tp > 1 or layout.cp > 1) and layout.zero != 3:
        env = "export CUDA_DEVICE_MAX_CONNECTIONS=1  # required with TP or CP before Blackwell\n"
    words = shell_args(args) + path_words(launch)
    setup = (env + 'MEGATRON_LM="${MEGATRON_LM:-.}"\n' + path_lines(launch) + bash_array("ARGS", words))
    entry = Entry('"$MEGATRON_LM/pretrain_gpt.py"', setup, '"${ARGS[@]}" "$@"')
    script = launch_script(LaunchShape(per_node, nodes), entry, launch.launcher, head, "autoplan-megatron")
    return ExportResult({LAUNCH_FILE: script}, warnings)


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
                 ("--ckpt-format", "fsdp_dtensor"), ("--init-model-with-meta-device", None)]
    if lay.hsdp:  # hybrid sharding: G/hsdp optimizer instances; Megatron-FSDP replicates across them
        args.append(("--num-distributed-optimizer-instances", lay.dp * lay.cp // lay.hsdp))
    if matching_order(ORDERS, lay) == "--use-tp-pp-dp-mapping":  # the default order is tried first
        args.append(("--use-tp-pp-dp-mapping", None))
    return args


# autoplan's optimizer -> Megatron --optimizer (arguments.py; the tag that has each: the profile's
# capabilities and later_versions).
MEGATRON_OPTIMIZERS = {"adamw": "adam", "sgd": "sgd", "muon": "muon", "lion": "lion"}


def optimizer_args(lay: Layout, training: TrainingSpec) -> Args:
    """``--optimizer`` where it is not Megatron's default adam (AdamW: decoupled weight decay);
    under offload=optimizer the hybrid CPU optimizer: ``--optimizer-cpu-offload`` with the
    ``--use-precision-aware-optimizer`` validate_args requires, all of it on the CPU
    (``--optimizer-offload-fraction 1.0``) and its copies overlapped with the CPU step
    (``--overlap-cpu-optimizer-d2h-h2d``); the stored dtypes of the setup
    (``optimizer_precision.megatron_args``), the precision-aware flag once."""
    args: Args = []
    if lay.optimizer != "adamw":
        args.append(("--optimizer", MEGATRON_OPTIMIZERS[lay.optimizer]))
    if lay.offload == "optimizer":
        args += [("--optimizer-cpu-offload", None), ("--optimizer-offload-fraction", 1.0),
                 ("--overlap-cpu-optimizer-d2h-h2d", None), ("--use-precision-aware-optimizer", None)]
    return args + [arg for arg in optimizer_precision.megatron_args(training) if arg not in args]


def assumed_efficiency(training: TrainingSpec, profile: TrainerProfile) -> PhysicalEfficiency:
    """The overlap fractions the time model assumed: ``profile``'s, for this GPU, with those its
    ``options:`` switch off set to 0 (``autoplan.cost.overlap.overlap_fractions``)."""
    eff = profile.parameters_for(training.cluster.gpu.name).efficiency
    hidden = overlap_of(eff, profile.options)
    return replace(eff, tp_overlap=hidden.tp, ep_overlap=hidden.ep, dp_overlap=hidden.grad_reduce)


def overlap_args(lay: Layout, eff: PhysicalEfficiency, profile: TrainerProfile) -> Args:
    """The overlap flags of what the time model hides (``autoplan.cost.time``, after the
    profile's options): ``dp_overlap`` (``fsdp_overlap`` under ZeRO-3) of the gradient reduction
    -> ``--overlap-grad-reduce``, with the distributed optimizer's / Megatron-FSDP's parameter
    all-gather -> ``--overlap-param-gather`` (validate_args: needs the distributed optimizer or
    Megatron-FSDP, and --overlap-grad-reduce); ``tp_overlap`` -> ``--tp-comm-overlap``
    (validate_args: needs sequence parallel; Transformer Engine layers, Megatron's default
    --transformer-impl)."""
    args: Args = []
    dp_hidden = eff.fsdp_overlap if lay.zero == 3 else eff.dp_overlap
    if lay.dp * lay.cp > 1 and dp_hidden > 0:
        args.append(("--overlap-grad-reduce", None))
        if lay.zero >= 1 and profile.options.overlap_param_gather:
            args.append(("--overlap-param-gather", None))
    if eff.tp_overlap > 0 and lay.tp > 1 and lay.sp:
        args.append(("--tp-comm-overlap", None))
    return args


def overlap_warnings(lay: Layout, eff: PhysicalEfficiency) -> list[str]:
    """Overlap the prediction assumed that the script cannot switch on."""
    warnings = []
    if eff.tp_overlap > 0 and lay.tp > 1 and not lay.sp:
        warnings.append(f"the prediction hides {eff.tp_overlap:.0%} of TP communication, but "
                        "--tp-comm-overlap needs sequence parallel (sp=false here); it stays exposed")
    if eff.ep_overlap > 0 and lay.ep > 1:
        warnings.append(f"the prediction hides {eff.ep_overlap:.0%} of the expert all-to-all; the script "
                        "does not turn on --overlap-moe-expert-parallel-comm")
    if eff.pp_overlap > 0 and lay.pp > 1 and lay.vpp == 1:
        warnings.append(f"the prediction hides {eff.pp_overlap:.0%} of pipeline sends, but Megatron overlaps "
                        "them only with the interleaved schedule (vpp > 1)")
    return warnings


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


def cuda_graph_impl_and_scope(training: TrainingSpec) -> tuple[str, list[str]]:
    """(``--cuda-graph-impl``, ``--cuda-graph-scope`` words) of the setup's ``cuda_graphs``
    (megatron/training/arguments.py): Transformer Engine graphs of the named scopes, Megatron-Core's
    own ('local') capture of the full iteration, or none."""
    if training.cuda_graphs == "none":
        return "none", []
    if training.cuda_graphs == "full_iteration":
        return "local", ["full_iteration"]
    return "transformer_engine", training.cuda_graphs.split(",")


def cuda_graph_args(training: TrainingSpec) -> Args:
    """The CUDA-graph flags the prediction assumed (``cost.host_dispatch``); the full-iteration
    graph also needs ``--no-check-for-nan-in-loss-and-grad`` (arguments.py asserts it)."""
    impl, scope = cuda_graph_impl_and_scope(training)
    if impl == "none":
        return []
    args: Args = [("--cuda-graph-impl", impl), ("--cuda-graph-scope", scope)]
    return args + ([("--no-check-for-nan-in-loss-and-grad", None)] if impl == "local" else [])


def vocab_args(m: ModelSpec, lay: Layout, launch: LaunchOptions) -> Args:
    """Tokenizer flags and ``--padded-vocab-size`` (the embedding rows; tp must divide them): a
    Hugging Face tokenizer (the export's, else the script's required ``TOKENIZER``:
    ``path_words``), NullTokenizer only with mock data and no tokenizer."""
    padded = padded_vocab(m.vocab_size, lay.tp)
    if launch.tokenizer:
        args: Args = [("--tokenizer-type", "HuggingFaceTokenizer"), ("--tokenizer-model", launch.tokenizer)]
    elif launch.synthetic:  # NullTokenizer adds one EOD id to --vocab-size
        args = [("--tokenizer-type", "NullTokenizer"), ("--vocab-size", m.vocab_size - 1)]
    else:
        args = [("--tokenizer-type", "HuggingFaceTokenizer")]
    return args + [("--padded-vocab-size", padded)]


def data_args(launch: LaunchOptions) -> Args:
    """``--data-path`` takes several words (``nargs='*'``; a blend is 'weight prefix weight
    prefix ...'), so a blend given as one string becomes its words; any other value (a path with
    spaces) stays one word. ``--mock-data`` only when asked; else the script's required
    ``DATA_PATH`` (``path_words``)."""
    if launch.data_path:
        return [("--data-path", data_words(launch.data_path)), ("--split", "99,1,0")]
    if launch.synthetic:
        return [("--mock-data", None)]
    return [("--split", "99,1,0")]


def path_lines(launch: LaunchOptions) -> str:
    """The script's required paths that the export was not given (``launch.required``)."""
    lines = ""
    if not launch.data_path and not launch.synthetic:
        lines += required("DATA_PATH", "a Megatron .bin/.idx prefix or blend (or export with --mock-data)")
    if not launch.tokenizer and not launch.synthetic:
        lines += required("TOKENIZER", "a Hugging Face tokenizer name or path (or export with --tokenizer)")
    return lines


def path_words(launch: LaunchOptions) -> list[str]:
    """The ARGS words that read ``path_lines``' variables (a blend in DATA_PATH splits on spaces)."""
    words = []
    if not launch.data_path and not launch.synthetic:
        words.append("--data-path $DATA_PATH")
    if not launch.tokenizer and not launch.synthetic:
        words.append('--tokenizer-model "$TOKENIZER"')
    return words


def data_words(data_path: str) -> list[str]:
    """A blend 'w1 p1 w2 p2 ...' (weights that are numbers) as its words, else [data_path]."""
    words = data_path.split()
    weights = words[0::2]
    if len(words) < 2 or len(words) % 2:
        return [data_path]
    try:
        [float(weight) for weight in weights]
    except ValueError:
        return [data_path]
    return words


def schedule_args(launch: LaunchOptions) -> Args:
    return [("--train-iters", launch.train_steps), ("--lr", launch.lr), ("--min-lr", launch.min_lr),
            ("--lr-warmup-iters", launch.warmup_steps), ("--lr-decay-style", "cosine"),
            ("--weight-decay", launch.weight_decay), ("--clip-grad", launch.grad_clip),
            ("--seed", launch.seed), ("--log-interval", 1)]


def _warnings(m: ModelSpec, lay: Layout) -> list[str]:
    warnings = model_warnings(m)
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
    if not launch.tokenizer and launch.synthetic:
        notes.append(f"--mock-data: synthetic tokens, as asked at export; NullTokenizer adds one EOD token: "
                     f"--vocab-size {m.vocab_size - 1} gives {m.vocab_size} token ids")
    if training.seq_len > m.max_position_embeddings:
        notes.append(f"--max-position-embeddings raised to seq_len {training.seq_len} "
                     f"(the model's is {m.max_position_embeddings})")
    return notes
