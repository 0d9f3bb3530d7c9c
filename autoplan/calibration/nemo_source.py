"""NVIDIA's NeMo performance summaries (Megatron-Core) as rows autoplan can predict.

``validation/nemo_megatron_bridge_perf.csv`` is a copy of the project's refdata file of the same
name (NeMo 24.03-25.07 performance pages: DGX-H100, DGX-B200, GB200 NVL72; every row FP8;
dense Llama/GPT-3 and Mixtral MoE). Conventions applied here, each an assumption where the
table is silent:

* tokens/s per GPU is read as published (the refdata README: prefer it over their TFLOP/s).
* Trainer: the megatron profile (NeMo runs Megatron-Core). ZeRO: ``fsdp = 1`` is Megatron-FSDP
  (zero 3), otherwise the distributed optimizer (zero 1), NeMo's default. SP with TP.
* Recompute: none (ASSUMED: the tables do not state it; NeMo's recipes of those releases decide),
  but for the NeMo 25.07 rows whose checkpointing column points to the recommended configs ("see
  nemo2_recommended_configs.csv"): those take ``recompute_layers``, ``activation_offload_layers``
  and ``recompute_modules`` from NeMo 2.4's own table of them (``validation/
  nemo_v2.4.0_recommended_model_configs.csv``, a copy of NVIDIA/NeMo v2.4.0 scripts/performance/
  recommended_model_configs/model_configs_{h100,b200,gb200}.csv, which the performance scripts
  read as their defaults), matched on model, system, FP8, GPUs, sequence, tp, pp, cp, vp,
  micro-batch and Megatron-FSDP (the global batch is left out of the match: the table's
  Llama 3.1 405B GB200 line has 256 where the page has 64, which changes no per-GPU memory).
  Llama 3.1 405B on 128 GB200 at tp 2 with Megatron-FSDP so offloads 95 of its 126 layers'
  activations to the Grace CPU (Megatron-Core ``cpu_offloading_num_layers``).
* FP8 recipe: ``tensorwise`` where the row says per-tensor current scaling, else ``delayed``
  (ASSUMED: Transformer Engine's delayed scaling is NeMo's default before 25.04).
* vp / cp / ep empty mean 1, but for a vp left blank on a page without that column (the first
  24.07 page, 2024-08-09) when a later page of the same release states it for the same run
  (model, GPUs, batch, sequence, tp, pp, cp; the tokens/s agree within 2%): that vp (Llama 2 70B
  20, Llama 3 70B 5, Llama 2 13B 10, Nemotron-3 22B 10, Nemotron-4 340B 12). The micro-batch and
  global batch are as published.
* Gradient buffers and their reduction: bf16. Every row is FP8, and NeMo's FP8 recipes reduce
  gradients in bf16 (NeMo 1 launcher ``optim.grad_sync_dtype: bf16``; NeMo 2
  scripts/performance: ``bf16_with_fp8_mixed()`` with ``plugins.grad_reduce_in_fp32 = False``
  and ``ddp.grad_reduce_in_fp32 = False``): the profile's ``grad_bytes`` and ``grad_reduce_bytes``
  become 2, bf16 gradient memory and a bf16 data-parallel reduction (what
  ``TrainingSpec.grad_reduce_in_bf16`` does for a user's setup, ``CostContext.grad_reduce_bytes``).
* TP communication overlap (Transformer Engine userbuffers, Megatron ``--tp-comm-overlap``): on
  for the NeMo 24.07 rows with tp > 1 whose model's launcher config of that release sets
  ``ub_tp_comm_overlap: true`` (NVIDIA/NeMo-Framework-Launcher @24.07
  launcher_scripts/conf/training/{gpt3/20b, llama/llama2_70b, llama/llama3_70b, nemotron/
  nemotron_8b, nemotron/nemotron_22b}.yaml; the H100 FP8 examples, examples/training/*/h100/
  *_fp8*.sh, override only batch, parallel sizes and fp8); off where it says false (gpt3/175b,
  nemotron/nemotron_340b). The NeMo 2 rows of 25.02, 25.04 and 25.07 (NeMo 2.2, 2.3, 2.4) ran the
  performance scripts (scripts/llm/performance/pretrain_<model>.py, later scripts/performance/),
  which build ``pretrain_recipe(performance_mode=True)`` and assert its MegatronCommOverlapCallback
  ("Required for performance"): ``pretrain_performance_optimizations`` in
  nemo/collections/llm/recipes/{gpt3_175b, llama3_70b, llama31_405b, nemotron4_15b, nemotron4_340b,
  nemotron3_8b, nemotron3_22b}.py sets ``tp_comm_overlap=True`` (NVIDIA/NeMo v2.2.0, v2.3.0, v2.4.0);
  on for those models' rows with tp > 1 (the Mixtral and Llama 3 8B recipes do not set it).
* The optimizer of the NeMo 24.07 rows: Apex DistributedFusedAdam (every pre-training config of
  the release sets ``optim.name: distributed_fused_adam``), which NeMo 1 gives fp32 state and,
  for bf16 weights, int16 remainders instead of a fp32 master copy (nemo/collections/nlp/models/
  language_modeling/megatron_base_model.py ``setup_optimization``: ``store_param_remainders``;
  apex/contrib/optimizers/distributed_fused_adam.py ``StateBucket``): the setting
  ``master_weights`` "remainders" (2 bytes). Nemotron-4 340B's config sets ``optim.dtype: bf16``,
  which that function passes to Apex as the state dtype; with state and weights both bf16 it keeps
  no master copy (``store_params=False``): ``optimizer_state_dtype`` bf16 and ``master_weights``
  "none". The 25.xx rows run NeMo 2 with Megatron-Core's distributed optimizer: the defaults.

Rows left out, with the reason: fine-tuning tasks (sft, lora: a frozen or partial model),
rows without a tokens/s figure (the long-sequence tables' layout-only rows), models without a
preset in ``model_db/`` (Llama 4 Scout), and rows whose batch columns cannot be a run
(micro-batch larger than the global batch).

Two sources come from the file. ``nemo`` holds the models that had presets when the shipped
profiles were fitted (a seeded 30% of its rows fitted on, the rest held out). ``nemo_added``
holds the models given presets afterwards (GPT-3 5B and 20B, Llama 2 13B, Nemotron-3 8B and 22B,
Nemotron-4 15B and 340B: squared-ReLU MLPs, H100, B200 and GB200): it is never fitted on
(``accuracy.HELD_OUT_SOURCES``), a check on runs the calibration never saw, and ``nemo``'s split
stays as it was.
"""

from __future__ import annotations

import functools
import math
from dataclasses import replace
from typing import Any

from autoplan.calibration.rows import Row, Source
from autoplan.calibration.validation import number_or_nan, read_csv, rows_and_exclusions
from autoplan.profiles import load_profile
from autoplan.specs.models import load_model

NEMO_FILE = "nemo_megatron_bridge_perf.csv"
_MODELS = {"LLAMA2-7B": "llama2-7b", "LLAMA2-70B": "llama2-70b", "LLAMA3-8B": "llama3-8b",
           "LLAMA3-70B": "llama3-70b", "LLAMA3-405B": "llama3.1-405b", "LLAMA3.1-405B": "llama3.1-405b",
           "GPT3-175B": "gpt3-175b", "Mixtral-8x7B": "mixtral-8x7b", "Mixtral-8x22B": "mixtral-8x22b"}
# Models given presets after the shipped fit: their rows form the held-out source nemo_added.
_ADDED_MODELS = {"GPT3-5B": "gpt3-5b", "GPT3-20B": "gpt3-20b", "LLAMA2-13B": "llama2-13b",
                 "Nemotron-8B": "nemotron-3-8b", "Nemotron-22B": "nemotron-3-22b",
                 "Nemotron-15B": "nemotron-4-15b", "Nemotron-340B": "nemotron-4-340b"}
ADDED_SOURCE = "nemo_added"
# Models whose NeMo 24.07 launcher config sets ub_tp_comm_overlap: true (module doc).
_TP_COMM_OVERLAP_2407 = ("GPT3-20B", "LLAMA2-70B", "LLAMA3-70B", "Nemotron-8B", "Nemotron-22B")
# Models whose NeMo 2 performance recipe sets tp_comm_overlap=True (module doc), for the 25.xx rows.
_TP_COMM_OVERLAP_NEMO2 = ("GPT3-175B", "LLAMA3-70B", "LLAMA3-405B", "LLAMA3.1-405B", "Nemotron-15B",
                          "Nemotron-340B", "Nemotron-8B", "Nemotron-22B")
_NEMO2_CONTAINERS = ("NeMo 25.02", "NeMo 25.04", "NeMo 25.07")
BF16_GRADIENTS = (("grad_bytes", 2.0), ("grad_reduce_bytes", 2.0))  # module doc: NeMo's FP8 recipes reduce in bf16
# NeMo 1's Apex DistributedFusedAdam (module doc), as TrainingSpec settings: int16 master
# remainders, or for a config that sets optim.dtype bf16 bf16 moments and no master copy.
_APEX_REMAINDERS = (("master_weights", "remainders"),)
_APEX_BF16_STATE = (("optimizer_state_dtype", "bf16"), ("master_weights", "none"))
# Apex's no-master-copy storage is NeMo 1's, not the pinned Megatron-LM's (megatron.yaml
# capabilities): the rows that ran it allow it (TrainerProfile.with_overrides).
APEX_NO_MASTER = (("allow_setting", ("master_weights", "none")),)
_BF16_OPTIMIZER_DTYPE_2407 = ("Nemotron-340B",)  # launcher conf nemotron/nemotron_340b.yaml optim.dtype: bf16
_HARDWARE = {"H100-SXM5-80GB": "h100-sxm", "B200": "b200", "GB200 (NVL72)": "gb200-nvl72"}


def degree(text: str | None, default: int = 1) -> int:
    """A parallel degree or layer count column of a published performance table: empty or 'n/a' (not
    stated) means ``default``."""
    text = (text or "").strip()
    return default if text in ("", "n/a") else int(float(text))


def _source_of(r: dict[str, str]) -> str:
    """The source a line's run belongs to (module doc): nemo_added for the models given presets
    after the shipped fit, nemo for the others (those without a preset are left out there)."""
    return ADDED_SOURCE if r["model"] in _ADDED_MODELS else "nemo"


def _exclusion(r: dict[str, str]) -> str:
    """Why a line cannot be predicted ('' when it can)."""
    if r["model"] not in _MODELS and r["model"] not in _ADDED_MODELS:
        return f"model = {r['model']} (no preset in model_db)"
    if not r["task"].startswith("pretrain"):
        return f"task = {r['task']} (fine-tuning, not pre-training)"
    if not math.isfinite(number_or_nan(r["tokens_per_s_per_gpu"])):
        return "no tokens/s"
    if number_or_nan(r["mbs"]) > number_or_nan(r["gbs"]):
        return f"mbs = {r['mbs']} > gbs = {r['gbs']} (batch columns cannot be a run)"
    return ""


def _run_key(r: dict[str, str]) -> tuple[str, ...]:
    """What makes two lines the same run of one release (module doc: vp left blank)."""
    return tuple(r[k] for k in ("container", "gpu_type", "model", "task", "num_gpus", "gbs", "mbs", "seq_len", "tp", "pp")) + (
        str(degree(r["cp"])),)


@functools.cache
def _stated_vp() -> dict[tuple[str, ...], str]:
    """The vp a page states for each run (module doc), from every line of the file."""
    return {_run_key(r): r["vp"].strip() for r in read_csv(NEMO_FILE) if (r["vp"] or "").strip()}


RECIPES_FILE = "nemo_v2.4.0_recommended_model_configs.csv"
_SEE_RECIPES = "see nemo2_recommended_configs.csv"
_RECIPE_RELEASE = "NeMo 25.07"  # the container of NeMo 2.4, whose table RECIPES_FILE copies
_RECIPE_MODELS = {"LLAMA3-8B": ("llama3", "8b"), "LLAMA3-70B": ("llama3", "70b"), "LLAMA3.1-405B": ("llama31", "405b"),
                  "LLAMA3-405B": ("llama31", "405b"), "GPT3-175B": ("gpt3", "175b"),
                  "Mixtral-8x7B": ("mixtral", "8x7b"), "Mixtral-8x22B": ("mixtral", "8x22b")}
_RECIPE_SYSTEMS = {"H100-SXM5-80GB": "h100", "B200": "b200", "GB200 (NVL72)": "gb200"}
_RECIPE_MATCH = (("num_gpus", "num_gpus"), ("seq_len", "seq_len"), ("tp_size", "tp"), ("pp_size", "pp"),
                 ("cp_size", "cp"), ("vp_size", "vp"), ("mbs", "mbs"))


def _recipe_key(model: tuple[str, str] | None, system: str | None, fsdp: int, degrees) -> tuple:
    """What a NeMo line and a recommended config are matched on (module doc)."""
    return (model, system, fsdp, *degrees)


@functools.cache
def _recipes() -> dict[tuple, dict[str, str]]:
    """The recommended configs of FP8 pre-training, by ``_recipe_key`` (the first line of a key)."""
    out: dict[tuple, dict[str, str]] = {}
    for c in read_csv(RECIPES_FILE):
        if c["dtype"] == "fp8":
            out.setdefault(_recipe_key((c["model"], c["size"]), c["system"], degree(c["use_mcore_fsdp"] or "0"),
                                       (degree(c[theirs]) for theirs, _ in _RECIPE_MATCH)), c)
    return out


def _recipe_knobs(r: dict[str, str]) -> dict[str, Any]:
    """The recompute and offload knobs of a NeMo 25.07 row whose checkpointing column points to
    NeMo's recommended configs (module doc); {} for any other row or where no config matches."""
    if r["container"] != _RECIPE_RELEASE or r["activation_checkpointing"].strip() != _SEE_RECIPES:
        return {}
    fsdp = degree(r["fsdp"]) if (r["fsdp"] or "").strip() else 0
    c = _recipes().get(_recipe_key(_RECIPE_MODELS.get(r["model"]), _RECIPE_SYSTEMS.get(r["gpu_type"]), fsdp,
                                   (degree(r[ours]) for _, ours in _RECIPE_MATCH)))
    if c is None:
        return {}
    knobs: dict[str, Any] = {"offload_layers": degree(c["activation_offload_layers"] or "0")}
    if degree(c["recompute_layers"] or "0") > 0:
        knobs.update(recompute="full", recompute_layers=degree(c["recompute_layers"]))
    elif (c["recompute_modules"] or "").strip():
        knobs.update(recompute="selective", recompute_modules=c["recompute_modules"].strip())
    return knobs


def _layout(r: dict[str, str]) -> dict[str, Any]:
    tp, pp, cp = degree(r["tp"]), degree(r["pp"]), degree(r["cp"])
    fsdp = degree(r["fsdp"]) if (r["fsdp"] or "").strip() else 0
    vp = r["vp"] if (r["vp"] or "").strip() else _stated_vp().get(_run_key(r), "")
    return {"gpus": int(r["num_gpus"]), "tp": tp, "pp": pp, "cp": cp, "vpp": degree(vp),
            "ep": degree(r["ep"]), "zero": 3 if fsdp == 1 else 1, "mbs": int(float(r["mbs"])),
            "seq_len": int(r["seq_len"]), "gbs_seqs": int(float(r["gbs"])), "recompute": "none",
            "precision": "fp8", **_recipe_knobs(r)}


def _row(line: int, r: dict[str, str]) -> Row:
    recipe = "tensorwise" if "current scaling" in r["precision"] else "delayed"
    hardware = _HARDWARE[r["gpu_type"]]
    cell = f"{r['model']}/{hardware}/{r['num_gpus']}gpus/seq{r['seq_len']}"
    source = _source_of(r)
    layout = _layout(r)
    return Row(source=source, row_id=f"{source}:{line}", model=load_model({**_MODELS, **_ADDED_MODELS}[r["model"]]),
               hardware=hardware, trainer="megatron", layout=layout,
               tokens_per_s_per_gpu=number_or_nan(r["tokens_per_s_per_gpu"]), cell=cell,
               allow_uneven=True, fp8_recipe=recipe, profile_overrides=BF16_GRADIENTS + _options(r) + offload_overrides(layout)
               + (APEX_NO_MASTER if ("master_weights", "none") in _optimizer_settings(r) else ()),
               settings=_optimizer_settings(r))


def _load(source: str, notes: str) -> Source:
    rows, excluded = rows_and_exclusions(source, NEMO_FILE, _exclusion, _row, belongs=lambda r: _source_of(r) == source)
    return Source(source, NEMO_FILE, rows, excluded, notes=notes)


def load_nemo() -> Source:
    """The NeMo rows autoplan can reproduce (see the module doc for the conventions)."""
    return _load("nemo", "Megatron-Core FP8 (delayed unless stated); recompute none and zero 1 assumed")


def load_nemo_added() -> Source:
    """The NeMo rows of the models given presets after the shipped fit (module doc): held out."""
    return _load(ADDED_SOURCE, "as nemo; models given presets after the shipped fit: never fitted on")


def _options(r: dict[str, str]) -> tuple[tuple[str, Any], ...]:
    """The row's trainer options where its recipe departs from the profile's (module doc)."""
    overlap = ((r["container"] == "NeMo 24.07" and r["model"] in _TP_COMM_OVERLAP_2407)
               or (r["container"] in _NEMO2_CONTAINERS and r["model"] in _TP_COMM_OVERLAP_NEMO2))
    if overlap and degree(r["tp"]) > 1:
        return (("options", replace(load_profile("megatron").options, tp_comm_overlap=True)),)
    return ()


def offload_overrides(layout: dict[str, Any]) -> tuple[tuple[str, Any], ...]:
    """NeMo 2 sets Megatron-Core's cpu_offloading_num_layers itself (module doc): the profile fact
    that lets the row's activation offload through rules/capabilities.py's trainer_offload."""
    return (("activation_offload", True),) if layout.get("offload_layers", 0) > 0 else ()


def _optimizer_settings(r: dict[str, str]) -> tuple[tuple[str, Any], ...]:
    """How the row's optimizer stores its state (module doc): Apex's on NeMo 24.07, else the defaults."""
    if r["container"] != "NeMo 24.07":
        return ()
    return _APEX_BF16_STATE if r["model"] in _BF16_OPTIMIZER_DTYPE_2407 else _APEX_REMAINDERS
