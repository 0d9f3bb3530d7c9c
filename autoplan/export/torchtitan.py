"""torchtitan: the Python config module of torchtitan 0.3.0 and the TOML job file of 0.2.2.

torchtitan 0.3 describes a run as a function returning ``Trainer.Config``, selected with
``--module`` and ``--config`` (``torchtitan/config/README.md``); 0.2.x read a TOML job file
(``torchtitan/config/job_config.py`` at tag v0.2.2). Both name the model by a registered
*flavor*; a model autoplan knows by shape maps to torchtitan's own flavor, any other Llama-shaped
model gets a flavor registered by the exported file (0.3: inside the module; 0.2.2: a small
module loaded with ``[experimental] custom_import``). Other architectures are refused.

Mapping: zero 3 -> ``data_parallel_shard_degree = dp`` (FSDP2), zero 0 ->
``data_parallel_replicate_degree = dp``; with pp > 1 one pipeline round holds all grad_acc
micro-batches (``local_batch_size = mbs·grad_acc``, ``pipeline_parallel_microbatch_size =
mbs``), without PP ``local_batch_size = mbs`` and torchtitan accumulates
``global_batch_size/(mbs·dp)`` steps. Layers are split evenly: ``pipeline_parallel_layers_per_stage
= layers/(pp·vpp)`` with the embedding and output not counted as layers; unequal stages (vpp <= 2,
``autoplan.rules.stages``) leave ``layers_per_stage`` out and torchtitan's own split gives the
extra layers to the first stages (``generate_llm_fqn_per_model_part``).
"""

from __future__ import annotations

import dataclasses
import functools

from autoplan.export.common import (
    check_model_features,
    ExportError,
    ExportResult,
    LaunchOptions,
    commented,
    header_lines,
    launch_shape,
    toml_tables,
)
from autoplan.export.launch import Entry, LaunchShape, TrialRun, how_to_run, launch_script, required
from autoplan.export.placement import placement_warning
from autoplan.layout import Layout
from autoplan.specs.model import ModelSpec
from autoplan.specs.training import TrainingSpec

VERSION = "torchtitan 0.3.0 (Python config module)"
TOML_VERSION = "torchtitan 0.2.2 (TOML job file)"
MODULE_FILE = "torchtitan_autoplan.py"
LAUNCH_FILE = "torchtitan_launch.sh"  # runs the 0.3.0 module
# autoplan trial: a metrics line every step (MetricsProcessor.log at metrics.log_freq).
TRIAL = TrialRun(LAUNCH_FILE, ("--metrics.log_freq", "1"), lambda layout: {})
TOML_FILE = "torchtitan_job.toml"
FLAVOR_MODULE = "autoplan_torchtitan_flavor"
CUSTOM_FLAVOR = "autoplan"
ORDERS = {"mesh": "tp-cp-dp-pp"}  # ParallelDims mesh ["pp", "dp_replicate", "dp_shard", "cp", "tp"]
# autoplan preset -> (torchtitan model module, flavor, flavor exists in 0.2.2)
KNOWN_FLAVORS = {
    "llama3-8b": ("llama3", "8B", True), "llama3-70b": ("llama3", "70B", True),
    "llama3.1-405b": ("llama3", "405B", True), "llama3.2-1b": ("llama3", "1B", False),
    "qwen3-8b": ("qwen3", "8B", True), "qwen3-30b-a3b": ("qwen3", "30B-A3B", True),
    "qwen3-235b-a22b": ("qwen3", "235B-A22B", True), "deepseek-v3": ("deepseek_v3", "671B", True),
}
# Fields a torchtitan flavor need not match (RoPE scaling is checked apart: model_warnings).
_NOT_SHAPE = ("name", "aliases", "sources", "seq_len", "max_position_embeddings", "rope_scaling",
              "bos_token_id", "eos_token_id", "num_mtp_layers")
TITAN_LLAMA3_SCALING = 8.0  # every llama3 flavor: ComplexRoPE scaling='llama', scaling_factor default 8
# The eps of each model's norms in torchtitan 0.3.0: RMSNorm.Config's default 1e-5
# (torchtitan/models/common/nn_modules.py), which llama3 and deepseek_v3 keep; qwen3 sets _EPS = 1e-6.
FLAVOR_NORM_EPS = {"llama3": 1e-5, "qwen3": 1e-6, "deepseek_v3": 1e-5}
# The model fields the 0.3.0 module writes or its flavor carries (autoplan.export.model_fields);
# norm_eps: _norm_eps on every RMSNorm of the model config; num_mtp_layers: deepseek_v3's
# model_registry(num_mtp_layers=) with MTPLoss (torchtitan/models/deepseek_v3/config_registry.py
# deepseek_v3_debugmodel_mtp); expert bias: every torchtitan MoE balances with one
# (models/common/moe.py load_balance_coeff 1e-3, expert_bias_E); token ids: the tokenizer's.
MODEL_FIELDS = frozenset({"rope_theta", "rope_scaling", "norm_eps", "bos_token_id", "eos_token_id", "tied_embeddings",
                          "qk_norm", "mla", "num_mtp_layers", "moe.router_bias", "moe.score_function",
                          "moe.normalize_topk", "moe.routed_scaling_factor", "moe.num_expert_groups"})


def render(model: ModelSpec, layout: Layout, training: TrainingSpec, launch: LaunchOptions,
           profile: object = None) -> ExportResult:
    per_node, nodes = launch_shape(training)
    family, flavor, in_v02 = model_flavor(model)
    warnings = (check_model_features(model, training, "torchtitan") + _warnings(model, layout)
                + model_warnings(model, family, flavor) + launch.no_checkpoint_warning("torchtitan"))
    toml_flavor = flavor if in_v02 else CUSTOM_FLAVOR
    toml_warnings = list(warnings) + toml_model_warnings(model, family, toml_flavor)
    if layout.precision == "fp8" and training.fp8_recipe == "tensorwise":
        warnings.append("fp8_recipe=tensorwise: torchtitan 0.3.0's Float8LinearConverter has no tensorwise "
                        "recipe (rowwise, rowwise_with_gw_hp); this module runs rowwise, whose GEMMs keep 0.81 "
                        "of the tensorwise gain (measured on an H100 and an H200, validation/*_fp8_recipes.csv) and which the "
                        "plan was not costed with: plan with --fp8-recipe rowwise, or run the 0.2.2 TOML "
                        "(recipe_name tensorwise)")
    if not launch.tokenizer and not launch.synthetic:
        toml_warnings.append(f"no --tokenizer: {TOML_FILE}'s hf_assets_path is torchtitan's test tokenizer "
                             f"({TEST_TOKENIZER}); give --tokenizer, or override --model.hf_assets_path")
    if not launch.data_path and not launch.synthetic:
        toml_warnings.append(f"no --data-path: {TOML_FILE}'s dataset 'c4' streams allenai/c4 from the Hugging Face "
                             "Hub; give --data-path (a local copy), or override --training.dataset_path")
    if toml_flavor == CUSTOM_FLAVOR and model.tied_embeddings:
        toml_warnings.append("torchtitan 0.2.2's llama3 has no weight tying: the exported flavor "
                             f"has a separate output layer (+{model.vocab_size * model.hidden_size} "
                             "parameters)")
    commands = [how_to_run(LAUNCH_FILE, launch.launcher, nodes),
                f"dry run without GPUs: NGPU={training.gpus} COMM_MODE=fake_backend MODULE=torchtitan_autoplan "
                "CONFIG=autoplan_config ./run_train.sh   (with this folder on PYTHONPATH)"]
    files = {MODULE_FILE: _module(model, layout, training, launch, family, flavor, commands, warnings)}
    head = header_lines(VERSION, model, layout, training, launch=commands[:1], warnings=warnings,
                        prediction=launch.prediction)
    setup = 'export PYTHONPATH="${EXPORT_DIR:-$PWD}${PYTHONPATH:+:$PYTHONPATH}"\n'
    if not launch.data_path and not launch.synthetic:  # read by the module's _required
        setup += required("DATA_PATH", "a local copy of allenai/c4 (or export with --mock-data)") + "export DATA_PATH\n"
    if not launch.tokenizer and not launch.synthetic:
        setup += required("TOKENIZER", "the Hugging Face tokenizer folder (or export with --tokenizer)") + "export TOKENIZER\n"
    entry = Entry("-m torchtitan.train", setup, '--module torchtitan_autoplan --config autoplan_config "$@"')
    files[LAUNCH_FILE] = launch_script(LaunchShape(per_node, nodes), entry, launch.launcher, head, "autoplan-torchtitan")
    toml_launch = [f"torchrun --nproc-per-node {per_node} --nnodes {nodes} -m torchtitan.train "
                   f"--job.config_file {TOML_FILE}"]
    if family == "deepseek_v3" and layout.cp > 1:  # 0.2.2's deepseek_v3 attends with flex attention
        warnings.append(f"no {TOML_FILE}: torchtitan 0.2.2's deepseek_v3 uses flex attention, which its "
                        "context parallelism refuses ('Context Parallel only supports SDPA attention')")
        files[MODULE_FILE] = _module(model, layout, training, launch, family, flavor, commands, warnings)
        return ExportResult(files, warnings)
    files[TOML_FILE] = _toml(model, layout, training, launch, family, toml_flavor, toml_launch, toml_warnings)
    if toml_flavor == CUSTOM_FLAVOR:
        files[f"{FLAVOR_MODULE}.py"] = _v02_flavor_module(model, layout, training)
    return ExportResult(files, toml_warnings)


def model_flavor(model: ModelSpec) -> tuple[str, str, bool]:
    """(torchtitan model, flavor, flavor exists in 0.2.2) or ExportError for other architectures."""
    key = _shape_key(model)
    for preset, (family, flavor, in_v02) in KNOWN_FLAVORS.items():
        if _preset_keys().get(preset) == key:
            return family, flavor, in_v02
    why = _not_llama_shaped(model)
    if why:
        raise ExportError(f"torchtitan has no model builder for {model.name!r} ({why}); it has "
                          f"flavors for {', '.join(KNOWN_FLAVORS)} and any Llama-shaped dense model")
    return "llama3", CUSTOM_FLAVOR, False


def _shape_key(model: ModelSpec) -> tuple:
    return tuple((f.name, getattr(model, f.name)) for f in dataclasses.fields(model)
                 if f.name not in _NOT_SHAPE)


@functools.cache
def _preset_keys() -> dict[str, tuple]:
    from autoplan.specs.models import load_model

    return {name: _shape_key(load_model(name)) for name in KNOWN_FLAVORS}


def _not_llama_shaped(m: ModelSpec) -> str:
    checks = [(m.moe is not None, "mixture of experts"), (m.mla is not None, "latent attention"),
              (m.activation != "swiglu", f"{m.activation} MLP"), (m.norm != "rmsnorm", m.norm),
              (m.position_embedding != "rope", f"{m.position_embedding} positions"),
              (m.qk_norm, "q/k norms"), (m.qkv_bias or m.linear_bias, "linear biases"),
              (m.head_dim * m.num_attention_heads != m.hidden_size, "head_dim·heads != hidden")]
    return ", ".join(reason for bad, reason in checks if bad)


# autoplan's pp_schedule -> torch.distributed.pipelining get_schedule_class names (the rule table,
# autoplan.rules.schedules, refuses the others before export).
TORCH_SCHEDULES = {"default": "1F1B", "1f1b": "1F1B", "interleaved": "Interleaved1F1B", "afab": "GPipe",
                   "zb-h1": "InterleavedZeroBubble", "zb-v": "ZBVZeroBubble", "dualpipev": "DualPipeV"}


def hsdp_degrees(lay: Layout) -> dict[str, int]:
    """FSDP2 HSDP (``Layout.hsdp``): the shard mesh dp_shard × cp holds hsdp ranks, the rest of
    the dp·cp ranks replicate (torchtitan/distributed/parallel_dims.py); empty without it."""
    if not lay.hsdp:
        return {}
    return {"data_parallel_replicate_degree": lay.dp * lay.cp // lay.hsdp,
            "data_parallel_shard_degree": lay.hsdp // lay.cp}


def parallelism(lay: Layout) -> dict[str, object]:
    """The ``parallelism`` section (field names shared by 0.2.2 and 0.3.0)."""
    values: dict[str, object] = {
        "data_parallel_replicate_degree": 1 if lay.zero == 3 else lay.dp,
        "data_parallel_shard_degree": lay.dp if lay.zero == 3 else 1,
        **hsdp_degrees(lay),
        "tensor_parallel_degree": lay.tp, "enable_sequence_parallel": lay.sp,
        "pipeline_parallel_degree": lay.pp, "context_parallel_degree": lay.cp,
        "expert_parallel_degree": lay.ep}
    if lay.pp > 1:
        values.update(pipeline_parallel_schedule=TORCH_SCHEDULES.get(lay.pp_schedule, "1F1B") if lay.vpp == 1
                      or lay.pp_schedule != "default" else "Interleaved1F1B",
                      pipeline_parallel_layers_per_stage=None,  # filled by the caller (needs layers)
                      pipeline_parallel_first_stage_less_layers=0,
                      pipeline_parallel_last_stage_less_layers=0,
                      pipeline_parallel_microbatch_size=lay.mbs)
    return values


def _parallelism(model: ModelSpec, lay: Layout) -> dict[str, object]:
    """With unequal stages (rules.stages: vpp <= 2) ``layers_per_stage`` is left out: torchtitan
    then makes pp·vpp stages and gives the extra layers to the first ones, as the cost model."""
    values = parallelism(lay)
    if lay.pp > 1:
        if model.num_layers % (lay.pp * lay.vpp):
            del values["pipeline_parallel_layers_per_stage"]
        else:
            values["pipeline_parallel_layers_per_stage"] = model.num_layers // (lay.pp * lay.vpp)
    return values


def batch(lay: Layout, training: TrainingSpec) -> dict[str, object]:
    """TrainingConfig (0.3) / [training] (0.2.2) fields: the batch, and under offload=params
    ``enable_cpu_offload`` (FSDP2 CPUOffloadPolicy: parameters, gradients and optimizer states
    on the CPU; torchtitan/config/configs.py, job_config.py at v0.2.2)."""
    local = lay.mbs * lay.grad_acc if lay.pp > 1 else lay.mbs
    values: dict[str, object] = {"local_batch_size": local, "global_batch_size": lay.gbs_seqs,
                                 "seq_len": training.seq_len}
    if lay.offload == "params":
        values["enable_cpu_offload"] = True
    return values


def compile_components(training) -> list[str]:
    """What the exported job compiles: always the model's blocks, as in the runs the torchtitan
    profile is calibrated on (``calibration.validation``: its compile=False rows are left out), so
    a bf16 plan runs at the speed predicted for it; the loss too under ``compile_loss``
    (``cost.loss_kernel``: the loss memory costed is the compiled one)."""
    return ["model", "loss"] if training.compile_loss else ["model"]


def _module(model, lay, training, launch, family, flavor, commands, warnings) -> str:
    head = header_lines(VERSION, model, lay, training, launch=commands, warnings=warnings,
                        prediction=launch.prediction, notes=[
        "the model is torchtitan's own flavor" if flavor != CUSTOM_FLAVOR else
        f"the model is a Llama-3 flavor registered below (RoPE theta {model.rope_theta:g}, "
        f"{'Llama-3 scaling' if _llama3_scaling(model) else 'no RoPE scaling'} from the model)"])
    ac = {"none": "None", "selective": "SelectiveAC.Config()", "full": "FullAC.Config()"}[lay.recompute]
    fp8 = lay.precision == "fp8"
    keep_bf16 = ["lm_head", *(["router.gate"] if model.moe is not None else [])]  # as torchtitan's recipes
    converters = "None"
    if fp8 and training.fp8_recipe == "mxfp8":  # MXFP8LinearConverter converts the Linears whose FQN matches
        converters = "[MXFP8LinearConverter.Config(model_compile_enabled=True, fqns=['layers'])]"
    elif fp8:
        converters = (f"[Float8LinearConverter.Config(model_compile_enabled=True, recipe_name='rowwise', "
                      f"filter_fqns={keep_bf16!r})]")
    parallel = ",\n".join(f"            {k}={v!r}" for k, v in _parallelism(model, lay).items())
    train = ",\n".join(f"            {k}={v!r}" for k, v in batch(lay, training).items())
    registry = f"_{family}.model_registry"
    mtp = f", num_mtp_layers={model.num_mtp_layers}" if _writes_mtp(model, family) else ""
    loss = ("MTPLoss.Config(global_vocab_size=decoder_vocab_size(model_spec))" if mtp else
            "ChunkedLossWrapper.Config(loss_fn=CrossEntropyLoss.Config(\n"
            "            global_vocab_size=decoder_vocab_size(model_spec)))")
    return (commented(head) + '"""torchtitan Trainer.Config for this plan: --config autoplan_config."""\n\n'
            + _imports(family, flavor, fp8, training.fp8_recipe, _writes_mtp(model, family),
                       _sets_norm_eps(model, family), bool(launch.checkpoint_dir))
            + _required_helper(launch) + (NORM_EPS_HELPER if _sets_norm_eps(model, family) else "")
            + (_v03_flavor(model, lay, training) if flavor == CUSTOM_FLAVOR else "")
            + f"\nPLAN = {lay.to_record(training)!r}\n\n\n"
            + "def autoplan_config() -> Trainer.Config:\n"
            + f"    model_spec = {registry}({flavor!r}, converters={converters}{mtp})\n"
            + (f"    _norm_eps(model_spec.model, {model.norm_eps!r})\n" if _sets_norm_eps(model, family) else "")
            + "    return Trainer.Config(\n"
            + "        model_spec=model_spec,\n"
            + f"        loss={loss},\n"
            + f"        hf_assets_path={_module_path(launch.tokenizer, 'TOKENIZER', launch)},\n"
            + f"        optimizer=default_adamw(lr={launch.lr!r}, weight_decay={launch.weight_decay!r}),\n"
            + f"        lr_scheduler=LRSchedulersContainer.Config(warmup_steps={launch.warmup_steps!r}, "
            + f"decay_type='cosine', min_lr_factor={launch.min_lr / launch.lr!r}),\n"
            + f"        training=TrainingConfig(\n{train},\n"
            + f"            steps={launch.train_steps!r}, max_norm={launch.grad_clip!r},\n"
            + f"            disable_cuda_graphs={lay.pp > 1 or lay.ep > 1!r}),\n"
            + f"        dataloader=HuggingFaceTextDataLoader.Config({_module_data(launch)}),\n"
            + f"        parallelism=ParallelismConfig(\n{parallel}),\n"
            + f"        activation_checkpoint={ac},\n"
            + (f"        checkpoint=CheckpointManager.Config(enable=True, folder={launch.checkpoint_dir!r}, "
               f"interval={launch.train_steps!r}),\n" if launch.checkpoint_dir else "")
            + f"        compile=CompileConfig(enable=True, components={compile_components(training)!r}),\n"
            + f"        debug=DebugConfig(seed={launch.seed!r}),\n"
            + "    )\n")


# Data: torchtitan's registered data sets (torchtitan/hf_datasets/text_datasets.py DATASETS):
# 'c4' streams allenai/c4 (load_dataset(path, name='en', split='train', streaming=True)) from
# ``dataset_path`` when given (a local copy), 'c4_test' is the sample a torchtitan checkout holds in
# tests/assets/c4_test; ``dataset`` must be a registered name (_validate_dataset).
DATA_SET, DEMO_DATA_SET, TEST_TOKENIZER = "c4", "c4_test", "./tests/assets/tokenizer"


def _module_data(launch: LaunchOptions) -> str:
    """The dataloader's arguments: the export's data path, the demo set with --mock-data, else
    the required environment variable DATA_PATH."""
    if launch.synthetic:
        return f"dataset={DEMO_DATA_SET!r}"
    return f"dataset={DATA_SET!r}, dataset_path={_module_path(launch.data_path, 'DATA_PATH', launch)}"


def _module_path(given: str | None, name: str, launch: LaunchOptions) -> str:
    """A path literal: the export's, the test tokenizer with --mock-data, else ``_required(name)``."""
    if given:
        return repr(given)
    if launch.synthetic and name == "TOKENIZER":
        return repr(TEST_TOKENIZER)
    return f"_required({name!r})"


def _required_helper(launch: LaunchOptions) -> str:
    """``_required``: the module stops with what to set, before torchtitan builds anything."""
    if not ("_required(" in _module_data(launch) or "_required(" in _module_path(launch.tokenizer, "TOKENIZER", launch)):
        return ""
    return ("\nimport os\n\n\ndef _required(name: str) -> str:\n"
            "    if not os.environ.get(name):\n"
            "        raise SystemExit(f'set {name}: DATA_PATH a local copy of allenai/c4, TOKENIZER the Hugging Face '\n"
            "                         'tokenizer folder (or export with --data-path, --tokenizer or --mock-data)')\n"
            "    return os.environ[name]\n")


def _toml_data(launch: LaunchOptions) -> list[tuple[str, object]]:
    """0.2.2's [training] dataset (and dataset_path); without a path, 'c4' streams allenai/c4
    from the Hugging Face Hub (a header note)."""
    if launch.synthetic:
        return [("dataset", DEMO_DATA_SET)]
    return [("dataset", DATA_SET)] + ([("dataset_path", launch.data_path)] if launch.data_path else [])


def _writes_mtp(m: ModelSpec, family: str) -> bool:
    return bool(m.num_mtp_layers) and family == "deepseek_v3"


def _sets_norm_eps(m: ModelSpec, family: str) -> bool:
    """Whether the flavor's norms (FLAVOR_NORM_EPS) need the model's eps written over them."""
    return m.norm_eps != FLAVOR_NORM_EPS[family]


# Sets eps on every RMSNorm.Config of a model config (torchtitan 0.3.0's configs are dataclasses).
NORM_EPS_HELPER = (
    "\n\ndef _norm_eps(config, eps: float) -> None:\n"
    "    \"\"\"The model's norm eps on every RMSNorm of the flavor (built at RMSNorm's default).\"\"\"\n"
    "    if isinstance(config, RMSNorm.Config):\n"
    "        config.eps = eps\n"
    "    elif dataclasses.is_dataclass(config) and not isinstance(config, type):\n"
    "        for field in dataclasses.fields(config):\n"
    "            _norm_eps(getattr(config, field.name), eps)\n"
    "    elif isinstance(config, (list, tuple)):\n"
    "        for item in config:\n"
    "            _norm_eps(item, eps)\n\n")


def _imports(family: str, flavor: str, fp8: bool, recipe: str, mtp: bool = False, norm_eps: bool = False,
             checkpoint: bool = False) -> str:
    lines = ["from torchtitan.components.loss import ChunkedLossWrapper, CrossEntropyLoss",
             "from torchtitan.components.optimizer import LRSchedulersContainer, default_adamw",
             "from torchtitan.config import CompileConfig, ParallelismConfig, TrainingConfig",
             "from torchtitan.config.configs import DebugConfig",
             "from torchtitan.distributed.activation_checkpoint import FullAC, SelectiveAC",
             "from torchtitan.hf_datasets.text_datasets import HuggingFaceTextDataLoader",
             f"from torchtitan.models import {family} as _{family}",
             "from torchtitan.models.common.config_utils import decoder_vocab_size",
             "from torchtitan.trainer import Trainer"]
    if fp8:
        converter = "MXFP8LinearConverter" if recipe == "mxfp8" else "Float8LinearConverter"
        lines.insert(2, f"from torchtitan.components.quantization import {converter}")
    if checkpoint:  # (as torchtitan's own config_registry modules import it)
        lines.insert(0, "from torchtitan.components.checkpoint import CheckpointManager")
    if mtp:
        lines.append("from torchtitan.models.deepseek_v3.mtp import MTPLoss")
    if flavor == CUSTOM_FLAVOR:
        lines.append("from torchtitan.models.common import ComplexRoPE, Embedding, Linear, RMSNorm")
    elif norm_eps:
        lines.append("from torchtitan.models.common import RMSNorm")
    return ("import dataclasses\n\n" if norm_eps else "") + "".join(line + "\n" for line in lines)


def _v03_flavor(m: ModelSpec, lay: Layout, training: TrainingSpec) -> str:
    """Register a Llama-3 flavor of this shape, written like torchtitan 0.3.0's own ``_8b``."""
    embed_init = "_llama3._EMBEDDING_SKIP_INIT" if m.tied_embeddings else "_llama3._EMBEDDING_INIT"
    tying = "        enable_weight_tying=True,\n" if m.tied_embeddings else ""
    max_seq = max(training.seq_len, m.max_position_embeddings)
    return (f"\n\ndef _autoplan_flavor(attn_backend: str, tp_gemm_backend: str = 'default'):\n"
            f"    dim, n_heads, n_kv_heads = {m.hidden_size}, {m.num_attention_heads}, {m.num_kv_heads}\n"
            f"    n_layers, hidden_dim, vocab_size = {m.num_layers}, {m.ffn_hidden_size}, {m.vocab_size}\n"
            "    return _llama3.Llama3Model.Config(\n"
            "        dim=dim,\n        vocab_size=vocab_size,\n" + tying
            + f"        tok_embeddings=Embedding.Config(num_embeddings=vocab_size, embedding_dim=dim, "
            f"param_init={embed_init}),\n"
            f"        norm=RMSNorm.Config(normalized_shape=dim, eps={m.norm_eps!r}, param_init=_llama3._NORM_INIT),\n"
            "        lm_head=Linear.Config(in_features=dim, out_features=vocab_size,\n"
            "                              param_init=_llama3._output_linear_init(dim)),\n"
            "        layers=_llama3._build_llama3_layers(\n"
            "            fuse_qkv=True, n_layers=n_layers, dim=dim, n_heads=n_heads, n_kv_heads=n_kv_heads,\n"
            "            hidden_dim=hidden_dim,\n"
            f"            rope=ComplexRoPE.Config(dim=dim // n_heads, max_seq_len={max_seq}, theta={m.rope_theta!r},\n"
            f"                                    {_v03_scaling(m)}),\n"
            "            attn_backend=attn_backend, tp_gemm_backend=tp_gemm_backend),\n"
            "    )\n\n\n"
            f"_llama3.llama3_configs[{CUSTOM_FLAVOR!r}] = _autoplan_flavor\n")


def _toml(model, lay, training, launch, family, flavor, commands, warnings) -> str:
    head = header_lines(TOML_VERSION, model, lay, training, launch=commands, warnings=warnings,
                        prediction=launch.prediction)
    model_items: list[tuple[str, object]] = [
        ("name", family), ("flavor", flavor),
        ("hf_assets_path", launch.tokenizer or TEST_TOKENIZER)]
    mx = lay.precision == "fp8" and training.fp8_recipe == "mxfp8"
    if lay.precision == "fp8":
        model_items.append(("converters", ["quantize.linear.mx" if mx else "quantize.linear.float8"]))
    par = [(k, v) for k, v in _parallelism(model, lay).items() if k != "enable_sequence_parallel"]
    par.append(("disable_loss_parallel", False))
    ac: list[tuple[str, object]] = [("mode", lay.recompute)]
    if lay.recompute == "selective":
        ac.append(("selective_ac_option", "op"))
    tables = [("job", [("dump_folder", "./outputs"), ("description", f"autoplan plan for {model.name}")]),
              ("model", model_items),
              ("optimizer", [("name", "AdamW"), ("lr", launch.lr), ("weight_decay", launch.weight_decay)]),
              ("lr_scheduler", [("warmup_steps", launch.warmup_steps), ("decay_type", "cosine"),
                                ("min_lr_factor", launch.min_lr / launch.lr)]),
              ("training", list(batch(lay, training).items()) + [
                  ("steps", launch.train_steps), ("max_norm", launch.grad_clip),
                  *_toml_data(launch)]),
              ("parallelism", par + [("expert_tensor_parallel_degree", lay.etp)]),
              ("activation_checkpoint", ac),
              *([("checkpoint", [("enable", True), ("folder", launch.checkpoint_dir),
                                 ("interval", launch.train_steps)])] if launch.checkpoint_dir else []),
              ("compile", [("enable", True), ("components", compile_components(training))]),
              ("debug", [("seed", launch.seed)])]
    if lay.precision == "fp8":  # 0.2.2's job_config.py: Float8Linear.recipe_name, MXLinear.recipe_name
        keep_bf16 = ["output", *(["router.gate"] if model.moe is not None else [])]
        tables.append(("quantize.linear.mx", [("recipe_name", "mxfp8_cublas"), ("filter_fqns", keep_bf16)]) if mx else
                      ("quantize.linear.float8", [("recipe_name", training.fp8_recipe), ("filter_fqns", keep_bf16)]))
    if flavor == CUSTOM_FLAVOR:
        tables.append(("experimental", [("custom_import", FLAVOR_MODULE)]))
    return commented(head) + toml_tables(tables)


def _v02_flavor_module(m: ModelSpec, lay: Layout, training: TrainingSpec) -> str:
    """Registers the 'autoplan' llama3 flavor for torchtitan 0.2.2 (loaded by custom_import).

    0.2.2's FeedForward computes ``int(2·4·dim/3)``, scales it by ``ffn_dim_multiplier`` and
    rounds up to ``multiple_of``; with ``multiple_of = ffn`` and a multiplier <= ffn/int(8·dim/3)
    the result is exactly ``ffn``.
    """
    base = int(2 * 4 * m.hidden_size / 3)
    multiplier = None if base <= m.ffn_hidden_size else m.ffn_hidden_size / base
    head = header_lines(TOML_VERSION, m, lay, training, notes=["imported by [experimental] custom_import; keep "
                                                     "this file on PYTHONPATH"])
    return (commented(head) + '"""Registers the autoplan llama3 flavor for torchtitan 0.2.2."""\n\n'
            "from torchtitan.models.llama3 import TransformerModelArgs, llama3_args\n"
            "from torchtitan.models.llama3.model.args import RoPEScalingArgs\n\n"
            f"llama3_args[{CUSTOM_FLAVOR!r}] = TransformerModelArgs(\n"
            f"    dim={m.hidden_size}, n_layers={m.num_layers}, n_heads={m.num_attention_heads}, "
            f"n_kv_heads={m.num_kv_heads},\n"
            f"    vocab_size={m.vocab_size}, multiple_of={m.ffn_hidden_size}, "
            f"ffn_dim_multiplier={multiplier!r},\n"
            f"    norm_eps={m.norm_eps!r}, rope_theta={m.rope_theta!r}, rope_scaling_args={_v02_scaling(m)},\n"
            f"    max_seq_len={max(training.seq_len, m.max_position_embeddings)},\n)\n")


_LLAMA3_KEYS = ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")


def _llama3_scaling(m: ModelSpec) -> dict[str, float | str]:
    """The model's Llama-3 RoPE scaling ({} when it has another or none)."""
    scaling = m.rope_scaling_dict
    return scaling if scaling.get("rope_type", scaling.get("type")) == "llama3" else {}


def _llama3_arguments(scaling: dict[str, float | str]) -> str:
    """``scaling_factor=..., low_freq_factor=..., high_freq_factor=...,
    original_max_position_embeddings=...`` (the names of both torchtitan versions)."""
    factor, low, high, original = (scaling.get(key) for key in _LLAMA3_KEYS)
    return (f"scaling_factor={float(factor or 8.0)!r}, low_freq_factor={float(low or 1.0)!r}, "
            f"high_freq_factor={float(high or 4.0)!r}, original_max_position_embeddings={int(original or 8192)}")


def _v03_scaling(m: ModelSpec) -> str:
    """``ComplexRoPE.Config`` scaling arguments (``torchtitan/models/common/rope.py``)."""
    scaling = _llama3_scaling(m)
    return f"scaling='llama', {_llama3_arguments(scaling)}" if scaling else "scaling='none'"


def _v02_scaling(m: ModelSpec) -> str:
    """0.2.2's ``RoPEScalingArgs``: it always applies Llama-3 scaling, which a factor of 1 turns
    into the identity (``precompute_freqs_cis`` in ``torchtitan/models/llama3/model/model.py``)."""
    scaling = _llama3_scaling(m)
    return f"RoPEScalingArgs({_llama3_arguments(scaling)})" if scaling else "RoPEScalingArgs(scaling_factor=1.0)"


def model_warnings(m: ModelSpec, family: str, flavor: str) -> list[str]:
    """What the exported flavor cannot take from the model. torchtitan's own flavors match the
    model's shape, theta and norm eps; its llama3 flavors all apply Llama-3.1 RoPE scaling x8
    (``torchtitan/models/llama3/__init__.py``), which may differ from the model's."""
    warnings = moe_warnings(m)
    if m.num_mtp_layers and family != "deepseek_v3":
        warnings.append(f"{m.num_mtp_layers} MTP layer(s): only torchtitan's deepseek_v3 has multi-token "
                        "prediction; the model is trained without it")
    if flavor != CUSTOM_FLAVOR:
        factor = float(_llama3_scaling(m).get("factor", 0.0))
        if family == "llama3" and factor != TITAN_LLAMA3_SCALING:
            have = f"x{factor:g}" if factor else "none"
            warnings.append(f"torchtitan's {flavor} flavor applies Llama-3 RoPE scaling x{TITAN_LLAMA3_SCALING:g}; "
                            f"the model's is {have}")
        return warnings
    if m.rope_scaling and not _llama3_scaling(m):
        warnings.append(f"rope_scaling {m.rope_scaling_dict} is not Llama-3 scaling; the flavor has none")
    return warnings


def moe_warnings(m: ModelSpec) -> list[str]:
    """torchtitan's MoE balances load with an expert bias only (models/common/moe.py:
    load_balance_coeff 1e-3 updates expert_bias_E; there is no balance loss)."""
    moe = m.moe
    if moe is None:
        return []
    warnings = []
    if moe.aux_loss_coeff:
        warnings.append(f"torchtitan's MoE has no balance loss: the model's aux loss of weight "
                        f"{moe.aux_loss_coeff:g} is not applied (it balances with an expert bias, load_balance_coeff 1e-3)")
    if not moe.router_bias:
        warnings.append("torchtitan's MoE adds an expert bias (aux-loss-free balancing, load_balance_coeff 1e-3) "
                        "that the model does not have")
    return warnings


def toml_model_warnings(m: ModelSpec, family: str, flavor: str) -> list[str]:
    """What 0.2.2's TOML job cannot set that the 0.3.0 module writes: the norm eps of its own
    flavors and multi-token prediction."""
    warnings = []
    if flavor != CUSTOM_FLAVOR and _sets_norm_eps(m, family):
        warnings.append(f"the 0.2.2 TOML keeps the {flavor} flavor's norm eps {FLAVOR_NORM_EPS[family]:g} "
                        f"(the model's {m.norm_eps:g}: the 0.3.0 module writes it)")
    if _writes_mtp(m, family):
        warnings.append(f"the 0.2.2 TOML has no MTP: the model's {m.num_mtp_layers} multi-token prediction "
                        "layer(s) are left out (the 0.3.0 module writes them)")
    return warnings


def _warnings(m: ModelSpec, lay: Layout) -> list[str]:
    warnings = []
    if lay.precision == "fp8" and m.moe is not None:
        warnings.append("precision=fp8: torchtitan 0.3.0's Float8 converter covers nn.Linear layers only; "
                        "the MoE experts (grouped GEMMs) stay BF16 while the prediction speeds them up")
    order = placement_warning("torchtitan", ORDERS, lay)
    if order:
        warnings.append(order)
    if lay.zero == 0 and lay.cp > 1:
        warnings.append(f"torchtitan shards parameters over the cp group (FSDP over dp_shard·cp = "
                        f"{lay.cp}) even with zero=0; memory is lower than predicted")
    if lay.tp > 1 and not lay.sp:
        warnings.append("sp=false: the 0.3 module sets enable_sequence_parallel=False, but the 0.2.2 "
                        "TOML cannot (0.2.2 always uses sequence parallel with TP)")
    return warnings
