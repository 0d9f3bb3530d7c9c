"""Megatron-Bridge's performance summaries (NeMo containers 25.11-26.06) as rows autoplan can
predict: runs the calibration never saw (a held-out source, ``accuracy.HELD_OUT_SOURCES``).

``validation/megatron_bridge_perf_summary.csv`` transcribes every table row of
NVIDIA-NeMo/Megatron-Bridge ``docs/performance-summary-archive.md`` and
``docs/performance-summary.md`` (commit 4ab94dfad3, 2026-08-11: DGX-H100, B200, B300, GB200 NVL72,
GB300 NVL72; BF16, FP8, MXFP8, NVFP4; dense Llama and MoE models) with its release. A cell
"FP8-CS (FP8-MX)" with "31508 (29789)" tokens/s is two runs of one layout (``cell_value`` first /
parenthesised). For the Llama 3, Qwen3 and DeepSeek-V3 rows the recipe's settings come from the
workload base config the performance scripts ran with (``scripts/performance/configs/
{llama,qwen,deepseek}/*workload_base_configs.py``, ``configs/{llama3,llama31,qwen3}/...`` at v0.2.x), found
at the Megatron-Bridge tag of the row's container (25.11 v0.2.0-v0.2.2, 26.02 v0.3.0, 26.02.01
v0.3.1, 26.04 v0.4.0, 26.04.01 v0.4.1-v0.4.2, 26.06 v0.5.0, 26.06.01 v0.5.1) by GPU, precision,
GPUs, batch, micro-batch and parallel sizes (and Megatron-FSDP where the page has the column);
``recipe_match`` says whether it was there ("release tag"; ", tags disagree" where the tags of
one release differ, the earliest taken), only at another tag ("other tag") or nowhere ("none":
no setting known, the defaults below assumed). ``validation/transcribe_megatron_bridge.py``
writes the file.

Conventions, each from the scripts of those tags (``scripts/performance/configs/
{llama,qwen,deepseek}/*_llm_pretrain.py``, ``utils/precision.py``, ``utils/overrides.py``) or an
assumption:

* Trainer: the megatron profile. ZeRO 3 where the page's FSDP column is > 0 or the recipe sets
  ``use_megatron_fsdp`` (Megatron-FSDP), else 1 (the distributed optimizer the recipes set). SP
  with TP.
* Precision: BF16 as bf16; "FP8" and "FP8-CS" as fp8 with the tensorwise recipe (the configs they
  match are the ``FP8_CS`` ones: ``bf16_with_fp8_current_scaling_mixed``), "MXFP8" and "FP8-MX" as
  fp8 with mxfp8 (``bf16_with_mxfp8_mixed``); both FP8 recipes set ``fp8_param_gather``. FP8
  attention (``fp8_attention``) where the config sets ``fp8_dot_product_attention`` (the 26.06
  DeepSeek-V3 and Qwen3 MXFP8 configs on GB200 and GB300, ``utils/overrides.py``).
* Llama 3.1 405B counts the embedding and the loss as pipeline layers (``pp_split`` embed-loss:
  ``llama31_405b_pretrain_config`` sets ``account_for_embedding_in_pipeline_split`` and
  ``account_for_loss_in_pipeline_split`` at every tag), so 126 layers run on pp·vp = 128 stages.
* Gradients reduced in bf16 (``set_llama3{,1}_common_configs``, ``set_qwen3_common_configs``,
  ``set_deepseek_v3_common_configs``: ``grad_reduce_in_fp32 = False``).
* TP communication overlap where tp > 1 (the 70B and 405B recipes' ``CommOverlapConfig(
  tp_comm_overlap=True)``, kept by the performance scripts but for NVFP4; the Qwen3 scripts set it).
* Qwen3 (MoE): routing force-balanced and dropless (``moe_router_force_load_balancing``, the
  cost model's uniform routing); expert tp from the config (1); the flex dispatcher where the
  config names a backend (``moe_flex_dispatcher_backend`` deepep or hybridep: ``moe_token_dedup``),
  else Megatron's all-to-all; ``moe_a2a_overlap`` as the config sets it (``WorkloadBaseConfig``'s
  default False: the expert all-to-all is then exposed). No recompute (the scripts' common configs
  clear the recipes' own).
* DeepSeek-V3 (MoE, as Qwen3 for routing, dispatcher and overlap): selective recompute
  (``set_deepseek_v3_common_configs``: ``recompute_granularity = "selective"``) of the config's
  ``recompute_modules``, else Megatron's default set (core_attn); one multi-token-prediction depth
  (the recipe's ``mtp_num_layers = 1``) but on the lines the page marks "w/o MTP". Its recipes lay
  the stages out by hand (``pipeline_model_parallel_layout``: the embedding with the first four
  layers, then chunks of four, the last chunk one layer, the MTP depth and the loss,
  ``recipes/deepseek/deepseek_v3.py set_deepseek_v3_pipeline_model_parallel_layout``); autoplan
  splits the 61 layers evenly and puts the MTP depth on the last stage, so the heaviest stage can
  differ by a layer.
* ``cpu_offloading_num_layers`` N: activation offload of N layers (``offload_layers``);
  ``recompute_num_layers`` N: full recompute of N layers per stage (block); ``recompute_modules``:
  selective recompute of those modules (``utils/overrides.py _set_recompute_overrides``).
* CUDA graphs (``TrainingSpec.cuda_graphs``, the host launches they replay: ``cost.host_dispatch``):
  ``cuda_graph_impl`` '' or none -> none (the scope column then means nothing: Megatron builds no
  graph); transformer_engine -> its ``cuda_graph_scope`` (attn, moe_router,moe_preprocess or both);
  full_iteration, or local with the full_iteration scope -> full_iteration.
* Not modelled, recorded: NCCL user buffers, the recipes' ``pp_layout`` strings (the
  DeepSeek-V3 layouts above).

Rows left out, with the reason: the 25.09 tables (no precision column; their parentheses mix
quantization granularities with other layouts), 26.08 (its workload configs moved into the library
recipes at v0.6.0 and are not transcribed), fine-tuning (SFT, LoRA), NVFP4 (not modelled),
DGX-B300 (no hardware preset) and models without a preset in ``model_db/``.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from autoplan.calibration.rows import Row, Source
from autoplan.calibration.nemo_source import degree, offload_overrides
from autoplan.calibration.validation import number_or_nan, rows_and_exclusions
from autoplan.profiles import load_profile
from autoplan.specs.models import load_model
from autoplan.specs.training import CUDA_GRAPHS

MEGATRON_BRIDGE_FILE = "megatron_bridge_perf_summary.csv"
SOURCE = "megatron_bridge"
_MODELS = {"LLAMA3_8B": "llama3-8b", "LLAMA3_70B": "llama3-70b", "LLAMA3.1_405B": "llama3.1-405b",
           "Qwen3_30B_a3B": "qwen3-30b-a3b", "Qwen3_235B_a22B": "qwen3-235b-a22b", "DeepSeekV3": "deepseek-v3",
           "DeepSeekV3 (w/ MTP)": "deepseek-v3", "DeepSeekV3 (w/o MTP)": "deepseek-v3"}
# The DeepSeek-V3 lines the page says ran without the multi-token-prediction depth (module doc).
_WITHOUT_MTP = ("DeepSeekV3 (w/o MTP)",)
# Models whose performance scripts set selective recompute (module doc).
_SELECTIVE = ("DeepSeekV3", "DeepSeekV3 (w/ MTP)", "DeepSeekV3 (w/o MTP)")
_TRANSCRIBED_RELEASES = ("25.11", "26.02", "26.02.01", "26.04", "26.04.01", "26.06", "26.06.01")
_FLEX_BACKENDS = ("deepep", "hybridep")
# The performance summaries' system column -> hardware_db GPU preset.
SYSTEM_HARDWARE = {"DGX-H100": "h100-sxm", "DGX-B200": "b200", "DGX-GB200": "gb200-nvl72", "DGX-GB300": "gb300-nvl72"}
# Models whose recipe counts the embedding and the loss as pipeline layers (module doc).
_EMBED_LOSS_SPLIT = ("LLAMA3.1_405B",)
_FP8_RECIPES = {"FP8": "tensorwise", "FP8-CS": "tensorwise", "MXFP8": "mxfp8", "FP8-MX": "mxfp8"}


def _exclusion(r: dict[str, str]) -> str:
    """Why a line cannot be predicted ('' when it can)."""
    if r["release"] == "25.09":
        return "release 25.09 (no precision column; parentheses mix quantization granularities and layouts)"
    if r["task"] != "Pre-Training":
        return f"task = {r['task']} (fine-tuning, not pre-training)"
    if r["model"] not in _MODELS:
        return f"model = {r['model']} (no preset in model_db)"
    if r["release"] not in _TRANSCRIBED_RELEASES:
        return f"release {r['release']} (recipe settings not transcribed)"
    if r["system"] not in SYSTEM_HARDWARE:
        return f"system = {r['system']} (no hardware preset)"
    if r["precision"] not in _FP8_RECIPES and r["precision"] != "BF16":
        return f"precision = {r['precision']} (not modelled)"
    if not math.isfinite(number_or_nan(r["tokens_per_s_per_gpu"])):
        return "no tokens/s"
    return ""


def _knobs(r: dict[str, str]) -> dict[str, Any]:
    """Recompute and offload knobs from the row's recipe (module doc)."""
    knobs: dict[str, Any] = {"offload_layers": degree(r["cpu_offloading_num_layers"], 0)}
    if degree(r["recompute_num_layers"], 0) > 0:
        knobs.update(recompute="full", recompute_layers=degree(r["recompute_num_layers"]))
    elif r["recompute_modules"].strip():
        knobs.update(recompute="selective", recompute_modules=r["recompute_modules"].strip())
    elif r["model"] in _SELECTIVE:  # the trainer's own selective set (Megatron's core_attn)
        knobs.update(recompute="selective")
    return knobs


def _layout(r: dict[str, str]) -> dict[str, Any]:
    fsdp = degree(r["fsdp"], 0) > 0 or r["use_megatron_fsdp"].strip() == "True"
    return {"gpus": int(r["num_gpus"]), "tp": degree(r["tp"]), "pp": degree(r["pp"]), "cp": degree(r["cp"]),
            "vpp": degree(r["vp"]), "ep": degree(r["ep"]), "etp": degree(r["expert_tensor_parallel_size"]),
            "zero": 3 if fsdp else 1, "mbs": int(r["mbs"]),
            "seq_len": int(r["seq_len"]), "gbs_seqs": int(r["gbs"]), "recompute": "none",
            "precision": "bf16" if r["precision"] == "BF16" else "fp8",
            "pp_split": "embed-loss" if r["model"] in _EMBED_LOSS_SPLIT else "balanced", **_knobs(r)}


def _fp8_attention(r: dict[str, str], layout: dict[str, Any]) -> bool:
    """The recipe runs FP8 attention (``fp8_dot_product_attention``; fp8 layouts only)."""
    return layout["precision"] == "fp8" and r["fp8_dot_product_attention"].strip() == "True"


def _overrides(r: dict[str, str], layout: dict[str, Any], moe: bool) -> tuple[tuple[str, Any], ...]:
    """The trainer options the recipe sets (TP communication overlap where tp > 1; for MoE models
    the dispatcher and the all-to-all overlap), the profile fact that lets a recipe's activation
    offload through (``nemo_source.offload_overrides``), FP8 attention (Bridge sets
    ``fp8_dot_product_attention``, which Megatron-LM's own flags cannot: profiles/megatron.yaml), and
    the CUDA-graph scopes of the megatron-core the release ran (>= 0.16: moe_router, moe_preprocess)
    that the megatron profile's pinned core_v0.15.3 does not list."""
    profile = load_profile("megatron")
    graphs = cuda_graphs(r)
    allowed = (() if profile.capabilities.allows_setting("cuda_graphs", graphs)
               else (("allow_setting", ("cuda_graphs", graphs)),))
    profile_options = options = profile.options
    if moe:
        options = replace(options, moe_token_dedup=r["moe_flex_dispatcher_backend"] in _FLEX_BACKENDS,
                          moe_a2a_overlap=r["moe_a2a_overlap"] == "True")
    if layout["tp"] > 1:
        options = replace(options, tp_comm_overlap=True)
    changed = (("options", options),) if options != profile_options else ()
    fp8_attention = (("allow_setting", ("fp8_attention", True)),) if _fp8_attention(r, layout) else ()
    return changed + offload_overrides(layout) + fp8_attention + allowed


def cuda_graphs(r: dict[str, str]) -> str:
    """The row's CUDA graphs as ``TrainingSpec.cuda_graphs`` spells them (module doc)."""
    impl, scope = r["cuda_graph_impl"].strip(), r["cuda_graph_scope"].strip()
    if impl in ("", "none"):
        return "none"
    if impl == "full_iteration" or scope == "full_iteration":
        return "full_iteration"
    if impl == "transformer_engine" and scope in CUDA_GRAPHS:
        return scope
    raise ValueError(f"{MEGATRON_BRIDGE_FILE}: cuda_graph_impl {impl!r} with cuda_graph_scope {scope!r} has no "
                     f"cuda_graphs value (one of {', '.join(CUDA_GRAPHS)})")


def _row(line: int, r: dict[str, str]) -> Row:
    hardware = SYSTEM_HARDWARE[r["system"]]
    layout = _layout(r)
    model = load_model(_MODELS[r["model"]])
    if r["model"] in _WITHOUT_MTP:
        model = replace(model, num_mtp_layers=0)
    settings: tuple[tuple[str, Any], ...] = (("grad_reduce_in_bf16", True),)
    if layout["precision"] == "fp8":
        settings += (("fp8_param_gather", True),) + ((("fp8_attention", True),) if _fp8_attention(r, layout) else ())
    if cuda_graphs(r) != "none":
        settings += (("cuda_graphs", cuda_graphs(r)),)
    cell = f"{r['model']}/{hardware}/{r['num_gpus']}gpus/{r['precision']}"
    return Row(source=SOURCE, row_id=f"{SOURCE}:{line}", model=model, hardware=hardware,
               trainer="megatron", layout=layout, tokens_per_s_per_gpu=number_or_nan(r["tokens_per_s_per_gpu"]),
               cell=cell, allow_uneven=True, fp8_recipe=_FP8_RECIPES.get(r["precision"], "tensorwise"),
               profile_overrides=_overrides(r, layout, model.is_moe), settings=settings)


def load_megatron_bridge() -> Source:
    """The Megatron-Bridge rows autoplan can reproduce (see the module doc): never fitted on."""
    rows, excluded = rows_and_exclusions(SOURCE, MEGATRON_BRIDGE_FILE, _exclusion, _row)
    return Source(SOURCE, MEGATRON_BRIDGE_FILE, rows, excluded,
                  notes="Megatron-Bridge 25.11-26.06 Llama 3, Qwen3 and DeepSeek-V3 rows (recipe settings from "
                        "the workload configs); bf16 gradients, fp8 param gather, fp8 attention where set; "
                        "never fitted on")
