"""More published runs as rows: llm-foundry's MPT tables and other trainers' published runs.

* ``mpt``: the llm-foundry MPT training benchmark (``validation/mpt_llm_foundry.csv``, shapes in
  ``mpt_model_arch.csv``). Pure FSDP data parallelism (dp = GPUs, FULL_SHARD = ZeRO-3,
  SHARD_GRAD_OP = ZeRO-2) with Composer's FSDP1 on A100 40GB/80GB and H100 80GB (the H100 tables
  of scripts/train/benchmarking/README.md, 2023-10 and 2024-01; the FP8 table is left out: the
  profile runs bf16 only), trainer profile ``llmfoundry``. Only the rows of the
  README that is current (``in_current_readme=True``) are used; the older tables measured the
  same configurations with older torch/Composer/flash-attention releases and were replaced
  (the refdata README: "the same configuration may appear with two throughputs"), and the
  oldest ones lack the GPU count. Every row left out says why.
* ``other_runs`` (``validation/other_published_runs.csv``): torchtitan's 2024 performance page
  (A100 80GB and the 405B on the 96 GB H100) and BLOOM-176B; the rows that repeat another
  validation file, or whose FLOP convention, sequence length or recompute policy is not stated,
  are left out with the reason.
"""

from __future__ import annotations

import math
from dataclasses import replace

from autoplan.calibration.rows import Row, Source
from autoplan.calibration.validation import (
    TORCHTITAN_RUNS_EARLY_STOP,
    gpt_model,
    number_or_nan,
    read_csv,
    rows_and_exclusions,
)
from autoplan.cost.params import count_params
from autoplan.specs.model import ModelSpec
from autoplan.specs.models import load_model

# --- llm-foundry MPT (Composer FSDP1, A100) ---------------------------------------------------

_MPT_GPUS = {"A100-SXM4-40GB": "a100-40gb", "A100-SXM4-80GB": "a100-80gb", "H100-SXM5-80GB": "h100-sxm"}
# Composer's fsdp_config.sharding_strategy (FSDP1 ShardingStrategy) -> the ZeRO stage it is.
_MPT_ZERO = {"FULL_SHARD": 3, "SHARD_GRAD_OP": 2}
# Composer's FSDP mixed precision (composer/distributed/mosaic_parallelism.py,
# get_mixed_precision): DEFAULT reduces gradients in fp32, PURE in the training dtype (bf16).
_MPT_REDUCE_BYTES = {"DEFAULT": 4.0, "PURE": 2.0}
# llm-foundry's model.attn_config.attn_impl as the benchmark ran it (the csv's attn_impl column,
# validation/README.md) -> the attention kernel: 'triton' is llmfoundry/models/layers/
# flash_attn_triton.py (cost/attention_kernels.py); 'flash' on a current row is flash-attn 2.4.2's
# CUDA kernel (5e85bd6's sweep.py installs the gpu-flash2 extra), a FlashAttention-2.
_MPT_ATTENTION_KERNEL = {"triton": "triton", "flash": "flash"}
# The torch each README table's runs used (its sweep.sh IMAGE): 9fa3ceb's examples/llm/throughput/
# sweep.sh mosaicml/pytorch:1.13.1_cu117; b2a43a1's and 5e85bd6's scripts/train/benchmarking/
# sweep.sh mosaicml/pytorch:2.1.0_cu121 (5e85bd6's setup.py pins torch>=2.1,<2.1.1). From torch
# 2.1 a non-reentrant checkpoint stops before a block's last linear (groups.Recompute).
_MPT_TORCH = {"9fa3ceb9a49cc28a91deee5e9166eab6b3122c8b": (1, 13), "b2a43a1477a45f40f4086a1c72f851b0ab42d0ac": (2, 1),
              "5e85bd62d4ec9e13353ca95877477602ab538e5b": (2, 1)}
CHECKPOINT_EARLY_STOP_TORCH = (2, 1)  # pytorch/pytorch #96866, "Make early stop the default", first in 2.1


def _mpt_torch(r: dict[str, str]) -> tuple[int, int]:
    """The torch (major, minor) of a row's table, from the README commit its source names."""
    commit = r["source"].split("@", 1)[1].split()[0]
    if commit not in _MPT_TORCH:
        raise ValueError(f"mpt row: no torch version known for README commit {commit} (published_runs._MPT_TORCH)")
    return _MPT_TORCH[commit]


def _mpt_models() -> dict[str, dict[str, str]]:
    return {r["model"]: r for r in read_csv("mpt_model_arch.csv")}


def mpt_model(arch: dict[str, str], seq_len: int) -> ModelSpec:
    """An MPT model as llm-foundry benchmarked it (``mpt_model_arch.csv``: MPTConfig defaults of
    llmfoundry/models/mpt/configuration_mpt.py): learned position embeddings (their count, which
    grows with seq_len, reproduces the tables' NumParams), biases, LayerNorm, GELU MLP of
    expansion_ratio·d, MHA, tied embeddings, vocab 50368."""
    if int(arch["expansion_ratio"]) != 4 or arch["tie_word_embeddings"] != "True":
        raise ValueError(f"mpt_model: expected expansion 4 and tied embeddings, got {arch}")
    return gpt_model(arch["model"], hidden=int(arch["d_model"]), layers=int(arch["n_layers"]),
                     heads=int(arch["n_heads"]), vocab=int(arch["vocab_size"]), seq_len=seq_len, tied=True)


def _mpt_exclusion(r: dict[str, str]) -> str:
    if r["in_current_readme"] != "True":
        return "superseded table (older torch/Composer release, later replaced in the README)"
    if not r["num_gpus"] or not r["micro_batch"]:
        return "GPU count or micro-batch not given"
    if r["fsdp_sharding_strategy"] not in _MPT_ZERO or r["activation_cpu_offload"].lower() == "true":
        return f"sharding {r['fsdp_sharding_strategy']} / CPU offload not modelled"
    if r["precision"] not in ("amp_bf16", "bf16"):
        return f"precision {r['precision']} (Transformer Engine FP8 under Composer) is not in the llmfoundry profile's precisions"
    if int(r["num_gpus"]) * int(r["micro_batch"]) * int(r["grad_accum"]) != int(r["global_batch_seqs"]):
        return "gpus·micro_batch·grad_accum != global batch"
    return ""


def _mpt_row(line: int, r: dict[str, str], arch: dict[str, str]) -> Row:
    seq, gpus = int(r["seq_len"]), int(r["num_gpus"])
    recompute = "full" if r["activation_checkpointing"].lower() in ("full", "true") else "none"
    layout = {"gpus": gpus, "dp": gpus, "tp": 1, "pp": 1, "zero": _MPT_ZERO[r["fsdp_sharding_strategy"]],
              "mbs": int(r["micro_batch"]),
              "grad_acc": int(r["grad_accum"]), "seq_len": seq, "gbs_seqs": int(r["global_batch_seqs"]),
              "recompute": recompute}
    hardware = _MPT_GPUS[r["gpu_type"]]
    return Row(source="mpt", row_id=f"mpt:{line}", model=mpt_model(arch, seq), hardware=hardware,
               trainer="llmfoundry", layout=layout, tokens_per_s_per_gpu=number_or_nan(r["tokens_per_s_per_gpu"]),
               mfu=number_or_nan(r["mfu_pct"]) / 100.0, cell=f"{r['model']}/{hardware}/{gpus}",
               attention_kernel=_MPT_ATTENTION_KERNEL[r["attn_impl"]],
               profile_overrides=(("grad_reduce_bytes", _MPT_REDUCE_BYTES[r["fsdp_mixed_precision_mode"]]),
                                  ("full_recompute_skips_last_linear", _mpt_torch(r) >= CHECKPOINT_EARLY_STOP_TORCH)))


def load_mpt() -> Source:
    """llm-foundry's MPT throughput tables (current README rows; see the module doc)."""
    file = "mpt_llm_foundry.csv"
    arch = _mpt_models()
    rows, excluded = rows_and_exclusions("mpt", file, _mpt_exclusion,
                                         lambda line, r: _mpt_row(line, r, arch[r["model"]]))
    return Source("mpt", file, rows, excluded,
                  notes="llmfoundry (Composer FSDP1 FULL_SHARD = ZeRO-3, SHARD_GRAD_OP = ZeRO-2), A100 40/80GB "
                        "and H100 80GB, current README rows")


# --- other published runs ---------------------------------------------------------------------

_DUPLICATES = {
    "torchtitan_202412": "repeats torchtitan_benchmarks.csv (source torchtitan)",
    "torchtitan_asynctp_202506": "repeats torchtitan_benchmarks.csv (source torchtitan)",
    "torchtitan_h200_trainy_202506": "repeats torchtitan_benchmarks.csv (source torchtitan)",
    "megatron_lm_2021_table1": "repeats megatron_sc21_table1_weak_scaling.csv (source sc21)",
    "opt_175b": "'up to 147 TFLOP/s' with no FLOP convention stated",
    "gpt_neox_20b": "TFLOP/s convention not stated in the stored sources",
}
_OTHER_GPUS = {"A100 80GB": "a100-80gb", "H100 SXM 94/95GB HBM2e (lower TDP)": "h100-96gb-500w"}


def _llama2_13b() -> ModelSpec:
    """torchtitan's Llama 2 13B of April 2024 (torchtitan/models/llama/__init__.py@395a52627):
    dim 5120, 40 layers, 40 heads (MHA), FFN 13824 (multiple_of 256 of 8/3·dim), vocab 32000."""
    base = load_model("llama2-7b")
    return replace(base, name="llama2-13b", num_layers=40, hidden_size=5120, ffn_hidden_size=13824,
                   num_attention_heads=40, num_kv_heads=40, head_dim=128)


def _torchtitan_docs_model(name: str) -> ModelSpec:
    presets = {"Llama 2 70B": "llama2-70b", "Llama 3 8B": "llama3-8b", "Llama 3 70B": "llama3-70b",
               "Llama 3.1 405B": "llama3.1-405b"}
    return _llama2_13b() if name == "Llama 2 13B" else load_model(presets[name])


def _other_exclusion(r: dict[str, str]) -> str:
    if r["source_id"] in _DUPLICATES:
        return _DUPLICATES[r["source_id"]]
    if r["activation_checkpointing"].startswith("selective (layer)"):
        return "layer-wise selective AC (every other layer) is not a modelled recompute mode"
    if r["status"] == "OOM":
        return "OOM outcome (no throughput)"
    return ""


# The 2024 docs rows whose train_configs set norm_type = "fused_rmsnorm" (Llama 2 13B at
# torchtitan 395a52627, Llama 3 8B at 157a12c56; the 70B configs keep "rmsnorm"): the Triton
# kernel saves 4 bytes per hidden element per norm less than the eager RMSNorm the torchtitan
# profile's coefficients count (TrainerProfile.activations.norm_saving_bytes_per_h).
_FUSED_RMSNORM_MODELS = {"Llama 2 13B", "Llama 3 8B"}
FUSED_RMSNORM_SAVING_BYTES_PER_H = 4.0


def _torchtitan_docs_row(line: int, r: dict[str, str]) -> Row:
    """torchtitan performance.md (2024): FSDP2 (+TP), no PP; local batch = one micro-batch."""
    mode = r["activation_checkpointing"]
    dp, tp, local = int(r["dp"]), int(r["tp"]), int(r["local_batch_per_dp_rank"])
    layout = {"gpus": int(r["num_gpus"]), "dp": dp, "tp": tp, "pp": 1, "zero": 3, "mbs": local, "grad_acc": 1,
              "seq_len": int(r["seq_len"]), "gbs_seqs": dp * local, "recompute": mode.split()[0],
              "precision": "fp8" if r["precision"].startswith("float8") else "bf16"}
    return Row(source="other_runs", row_id=f"other_runs:{line}", model=_torchtitan_docs_model(r["model"]),
               hardware=_OTHER_GPUS[r["gpu_type"]], trainer="torchtitan", layout=layout,
               tokens_per_s_per_gpu=number_or_nan(r["tokens_per_s_per_gpu"]), cell=f"torchtitan {r['model']}",
               profile_overrides=((("norm_saving_bytes_per_h", FUSED_RMSNORM_SAVING_BYTES_PER_H),)
                                  if r["model"] in _FUSED_RMSNORM_MODELS else ()) + TORCHTITAN_RUNS_EARLY_STOP)


def bloom_model() -> ModelSpec:
    """BLOOM-176B (bigscience tr11-176B-ml): 70 layers, h 14336, 112 heads, GELU 4h, LayerNorm,
    ALiBi (no position parameters: modelled as learned positions of the 2048 tokens, 29M
    parameters, 0.02%), tied embeddings, padded vocab 250880."""
    return gpt_model("bloom-176b", hidden=14336, layers=70, heads=112, vocab=250880, seq_len=2048, tied=True)


def _bloom_row(line: int, r: dict[str, str]) -> Row:
    """BLOOM-176B on 384 A100 80GB (Megatron-DeepSpeed, TP4 PP12 DP8, BF16_Optimizer = ZeRO-1, full
    recompute, 1F1B) over 4 x 100 Gb/s Omni-Path per 8-GPU node, 50 Gb/s per GPU (the link count: "8
    GPUs per node ... 4 OmniPath links", "Inter-node connect: Omni-Path Architecture",
    bigscience-workshop/bigscience train/tr11-176B-ml/README.md, Hardware; the speed: Intel OPA 100
    series, 100 Gb/s per link; the README does not state it). tokens/s per GPU is the file's
    (samples/s from the iteration log) or, where only TFLOP/s is given, DERIVED with BigScience's
    convention 8·N·s·gbs/(time·gpus) (math/README.md). bf16 with the pipeline engine reduces the
    BF16_Optimizer's fp32 gradients (deepspeed/runtime/pipe/engine.py ``_bf16_reduce_grads``: "the
    optimizer's FP32 grads"; tied weights' ``_hp_grad``): 4 bytes per gradient element (the
    deepspeed profile's ``pp_grad_all_reduce_bytes``). Attention is eager: Megatron-DeepSpeed of
    2022 had no flash attention (ALiBi baddbmm + FusedScaleMaskSoftmax,
    megatron/model/transformer.py), so the s×s scores go through HBM."""
    tokens = number_or_nan(r["tokens_per_s_per_gpu"])
    derived = ""
    if not math.isfinite(tokens):
        model = bloom_model()
        tokens = float(r["tflops_per_gpu"]) * 1e12 / (8.0 * count_params(model).total)
        derived = "TFLOP/s / (8·N), BigScience convention"
    layout = {"gpus": 384, "dp": 8, "tp": 4, "pp": 12, "zero": 1, "mbs": int(r["micro_batch"]),
              "seq_len": 2048, "gbs_seqs": int(r["global_batch_seqs"]), "recompute": "full"}
    return Row(source="other_runs", row_id=f"other_runs:{line}", model=bloom_model(), hardware="a100-80gb",
               trainer="deepspeed", layout=layout, tokens_per_s_per_gpu=tokens, cell="BLOOM-176B",
               derived=derived, nic_bytes_per_s=4 * 100e9 / 8 / 8, attention_kernel="eager")


def load_other_runs() -> Source:
    """The rows of other_published_runs.csv that no other validation file holds (module doc)."""
    file = "other_published_runs.csv"
    rows, excluded = rows_and_exclusions(
        "other_runs", file, _other_exclusion,
        lambda line, r: _torchtitan_docs_row(line, r) if r["source_id"] == "torchtitan_docs_2024" else _bloom_row(line, r))
    return Source("other_runs", file, rows, excluded, notes="torchtitan 2024 docs (A100, 96GB H100) and BLOOM-176B")
