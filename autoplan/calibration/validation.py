"""Published measurements as rows autoplan can predict: one loader per reference CSV.

Each loader reads one file of ``validation/`` (copies of the project's reference data, each row
with its ``source`` column) and returns a :class:`Source`: rows of (model, hardware, trainer
profile, layout fields, measured tokens/s per GPU and/or peak memory bytes) and the rows it
left out, with the reason. No measured number lives in this module; only the conventions that
turn a published figure into tokens/s or bytes, each stated where it is applied:

* tokens/s per GPU is the convention-free figure. Where a source publishes TFLOP/s instead it
  is *derived* (``Row.derived`` says how): SC'21 Table 1 counts hardware FLOPs
  ``96·l·h²·(1 + s/6h + V/16lh)`` per token (full recompute included); Megatron-Core's H100
  table and Llama 3 Table 4 count model FLOPs with the playbook convention
  ``6·N + 12·L·h·s`` per token (N counts the LM head even when tied; refdata README).
* Korthikanti Table 5 gives iteration times: tokens/s per GPU = gbs·seq / (time·gpus).
* Ultra-Scale Playbook memory is labelled "GB"; :data:`PLAYBOOK_MEMORY_UNIT` says which unit
  autoplan reads it in and why (``benchmarks/accuracy.py`` prints the fit of both).
"""

from __future__ import annotations

import csv
import math
import re
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from autoplan.calibration.network import P5_EFA_PRESET
from autoplan.calibration.rows import Row, Source
from autoplan.paths import data_dir
from autoplan.profiles import load_profile
from autoplan.specs.model import ModelSpec
from autoplan.specs.models import load_model
from autoplan.units import GB, GiB

# The playbook's memory ("GB") is world rank 0's "Mem Res (GB)" at iteration 3 of nanotron's
# benchmark CSV, max_memory_reserved() / 1024**3: GiB (src/nanotron/helpers.py create_table_log;
# scripts/scaling_benchmarks.py at e24d2483). Its "Mem Alloc (GB)" cannot be it: training_step's
# log_memory resets the peaks after train_batch_iter in the first five iterations, leaving the
# allocated peak with no activation, the reserved one with the forward and backward's cached
# blocks, and the sweep's figures grow with the micro-batch at pp 1 (1B tp 1 dp 16: 24.0 GiB at
# mbs 1, 35.0 at mbs 2). (benchmarks/accuracy.py still prints the fit of both units.)
PLAYBOOK_MEMORY_UNIT = GiB
NAN = float("nan")


def read_csv(file: str) -> list[dict[str, str]]:
    with open(data_dir("validation") / file, newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def _leading_int(text: str, default: int | None = None) -> int:
    """``'8192 (not stated ...)'`` -> 8192; ``'none'`` -> ``default``."""
    match = re.match(r"\s*(\d+)", text or "")
    if match:
        return int(match.group(1))
    if default is None:
        raise ValueError(f"expected a leading integer, got {text!r}")
    return default


def rows_and_exclusions(name: str, file: str, reason: Callable[[dict[str, str]], str],
                        make: Callable[[int, dict[str, str]], Row],
                        belongs: Callable[[dict[str, str]], bool] | None = None,
                        ) -> tuple[tuple[Row, ...], tuple[tuple[str, str], ...]]:
    """Each line of ``file`` as a row (``make(line, record)``) or, where ``reason`` says why not,
    as (row id ``name:line``, reason): no row is left out silently. Where a file feeds several
    sources, ``belongs`` picks this source's lines (the others are another source's rows)."""
    rows, excluded = [], []
    for i, r in enumerate(read_csv(file)):
        if belongs is not None and not belongs(r):
            continue
        why = reason(r)
        if why:
            excluded.append((f"{name}:{i + 2}", why))
        else:
            rows.append(make(i + 2, r))
    return tuple(rows), tuple(excluded)


def number_or_nan(text: str) -> float:
    text = (text or "").strip()
    return float(text) if text else NAN


def gpt_model(name: str, *, hidden: int, layers: int, heads: int, vocab: int, seq_len: int,
              tied: bool) -> ModelSpec:
    """A GPT-3-style model (Megatron ``pretrain_gpt.py`` defaults of its time): GELU MLP of 4h,
    LayerNorm, learned positions, biases on every linear, MHA."""
    return ModelSpec(name=name, num_layers=layers, hidden_size=hidden, ffn_hidden_size=4 * hidden,
                     num_attention_heads=heads, num_kv_heads=heads, head_dim=hidden // heads,
                     vocab_size=vocab, tied_embeddings=tied, activation="gelu", norm="layernorm",
                     position_embedding="learned", max_position_embeddings=seq_len,
                     linear_bias=True, seq_len=seq_len, model_type="gpt2")


def playbook_flops_per_token(model: ModelSpec, seq_len: int) -> float:
    """Model FLOPs per token, playbook convention: 6·N + 12·L·h·s, N = every parameter with a
    tied LM head counted twice, attention not halved (refdata README; Ultra-Scale Playbook)."""
    from autoplan.cost.params import count_params

    pc = count_params(model)
    n = pc.total + (pc.lm_head_matmul if pc.lm_head == 0 else 0)
    return 6.0 * n + 12.0 * model.num_layers * model.q_size * seq_len


def megatron_flops_per_token(model: ModelSpec, seq_len: int) -> float:
    """Model FLOPs per token as Megatron-LM's own throughput counter reports them
    (megatron/training/training.py ``num_floating_point_operations``, r0.8.0, dense models):
    12·L·h²·[(1 + g/a + s/h)·q/h + (f/h)·γ + V/(2·L·h)], γ = 3/2 for a gated MLP. Against the
    playbook convention it counts one vocabulary projection (the output layer's 6·V·h), not the
    input embedding as well, and no biases or norms: for an untied GPT of vocabulary 131072 the
    playbook figure is 6·V·h per token larger (+14% at h=2048, +3% at h=7168)."""
    if model.moe is not None or model.mla is not None:
        raise ValueError(f"megatron_flops_per_token counts dense MHA/GQA models only, got {model.name}")
    h, layers, s = float(model.hidden_size), float(model.num_layers), float(seq_len)
    gated = 1.5 if model.gated_mlp else 1.0
    attention = (1.0 + model.num_kv_heads / model.num_attention_heads + s / h) * model.q_size / h
    mlp = model.ffn_hidden_size / h * gated
    return 12.0 * layers * h * h * (attention + mlp + model.vocab_size / (2.0 * layers * h))


def sc21_flops_per_token(hidden: int, layers: int, vocab: int, seq_len: int) -> float:
    """SC'21 eq. (Narayanan et al. 2021, Sec. 5.1): 96·l·h²·(1 + s/6h + V/16lh) per token,
    hardware FLOPs including the full activation recompute every Table 1 run used."""
    h, l = float(hidden), float(layers)  # noqa: E741 (the paper's l)
    return 96.0 * l * h * h * (1.0 + seq_len / (6.0 * h) + vocab / (16.0 * l * h))


# --- Ultra-Scale Playbook (nanotron, 8xH100 80GB nodes, seq 4096, 256 sequences) -----------

_PLAYBOOK_MODELS = {"1B": "usp-1b", "8B": "usp-8b"}
# World rank 0 writes the CSV (log_throughput): a GPU of the first pipeline stage. The sweep's PP runs
# bear it out: at grad_accum 1 their memory is the first stage's, far below the last stage's.
PLAYBOOK_MEMORY_STAGE = "first"
# The sweep ran on AWS p5 nodes (calibration.network): its rows, and nanotron's calibration, are on that preset.
PLAYBOOK_HARDWARE = P5_EFA_PRESET


def _playbook_row(source: str, line: int, r: dict[str, str], memory_unit: float) -> Row:
    layout = {"gpus": int(r["num_gpus"]), "dp": int(r["dp"]), "tp": int(r["tp"]), "pp": int(r["pp"]),
              "mbs": int(r["micro_batch_size"]), "grad_acc": int(r["grad_accum"]),
              "zero": int(r["zero_stage"]), "seq_len": int(r["seq_len"]),
              "gbs_seqs": int(r["global_batch_size_sequences"]), "recompute": "none"}
    # sp follows resolve_layout's default (on when tp > 1); nanotron's 1F1B is the profile's.
    return Row(source=source, row_id=f"{source}:{line}", model=load_model(_PLAYBOOK_MODELS[r["model_label"]]),
               hardware=PLAYBOOK_HARDWARE, trainer="nanotron", layout=layout,
               tokens_per_s_per_gpu=number_or_nan(r["tokens_per_sec_per_gpu"]),
               peak_memory_bytes=number_or_nan(r["gpu_memory_gb"]) * memory_unit, status=r["status"],
               mfu=number_or_nan(r["mfu_pct"]) / 100.0, cell=f"{r['model_label']}/{r['nodes']} nodes",
               memory_stage=PLAYBOOK_MEMORY_STAGE)


def _playbook_inconsistency(r: dict[str, str]) -> str:
    dp, tp, pp = int(r["dp"]), int(r["tp"]), int(r["pp"])
    mbs, acc = int(r["micro_batch_size"]), int(r["grad_accum"])
    if dp * tp * pp != int(r["num_gpus"]):
        return f"dp·tp·pp = {dp * tp * pp} != num_gpus {r['num_gpus']}"
    if dp * mbs * acc != int(r["global_batch_size_sequences"]):
        return (f"dp·mbs·grad_accum = {dp * mbs * acc} != global batch "
                f"{r['global_batch_size_sequences']} (the run's batch is unknown)")
    return ""


def _load_playbook(name: str, file: str, memory_unit: float, notes: str) -> Source:
    rows, excluded = rows_and_exclusions(name, file, _playbook_inconsistency,
                                         lambda line, r: _playbook_row(name, line, r, memory_unit))
    unit = "GB" if memory_unit == GB else "GiB"
    return Source(name, file, rows, excluded, notes=f"{notes}; memory read in {unit}")


def load_playbook_sweep(memory_unit: float = PLAYBOOK_MEMORY_UNIT) -> Source:
    """Every run of the playbook's 1B/8B sweep, ``ok`` or ``crashed_or_oom`` (no figures).

    nanotron on h100-sxm-efa (AWS p5), 1F1B, sp when tp > 1, no recompute (nanotron's base config). Rows
    whose degrees or batch do not multiply out are left out (their real batch is unknown).
    """
    return _load_playbook("playbook_sweep", "ultrascale_playbook_runs_1b_8b.csv", memory_unit,
                          "nanotron, h100-sxm-efa (AWS p5), 1F1B, sp when tp > 1, no recompute")


def load_playbook_best(memory_unit: float = PLAYBOOK_MEMORY_UNIT) -> Source:
    """The best run (max MFU) of each (model, nodes) cell of the sweep."""
    return _load_playbook("playbook_best", "ultrascale_playbook_best_configs_1b_8b.csv", memory_unit,
                          "the sweep's best run per cell")


# --- torchtitan (Grand Teton H100 96GB at 500 W) ----------------------------------------------

_TORCHTITAN_MODELS = {"Llama 3.1 8B": "llama3-8b", "Llama 3.1 70B": "llama3-70b",
                      "Llama 3.1 405B": "llama3.1-405b"}


def _torchtitan_layout(r: dict[str, str]) -> dict[str, Any]:
    """torchtitan's knobs as a layout: dp = fsdp degree with ZeRO-3 (FSDP2), Float8 linears ->
    fp8. Without PP the local batch is one micro-batch (mbs = local batch, grad_acc = 1); with PP
    torchtitan splits it into ``pipeline_parallel_microbatches`` = pp micro-batches (its default),
    and its Interleaved 1F1B runs 2 stages per rank."""
    dp, pp, local = int(r["fsdp_degree"]), int(r["pp"]), int(r["local_batch_size"])
    micro = pp if pp > 1 else 1
    recompute = r["activation_checkpointing"].split()[0].lower()
    return {"gpus": int(r["num_gpus"]), "dp": dp, "tp": int(r["tp"]), "pp": pp, "cp": int(r["cp"]),
            "vpp": 2 if "interleaved" in r["pp_schedule"].lower() else 1, "zero": 3,
            "mbs": local // micro, "grad_acc": micro, "seq_len": _leading_int(r["seq_len"]),
            "gbs_seqs": dp * local, "recompute": recompute,
            "precision": "fp8" if r["float8_linear"] == "True" else "bf16"}


def _torchtitan_exclusion(r: dict[str, str]) -> str:
    if r["torch_compile"] != "True":
        return "torch_compile=False (autoplan's torchtitan profile is calibrated with compile on)"
    if "rowwise" in r["note"]:
        # Dec 2024's row-wise Float8 ran at 0.73-0.74x the tensorwise rows' tokens/s (below BF16 at
        # 8B TP 8); PyTorch 2.11's cuBLASLt row-wise GEMMs keep 0.81 of the tensorwise gain
        # (validation/*_fp8_recipes.csv): that older kernel generation is not what is costed.
        return "float8 rowwise recipe of Dec 2024 (0.73x its tensorwise twins; an older kernel than the costed one)"
    return ""


# The benchmark files whose torchtitan compiles the loss with the model (their version tables:
# torchtitan 820504e and e7c0cae, June 2025; torchtitan/components/loss.py build_cross_entropy_loss
# runs torch.compile(loss_fn) under training.compile since bbb1b61, 2025-04-02). The Dec 2024
# file's 9dec370 compiles the transformer blocks only (parallelisms/parallelize_llama.py apply_compile).
_TORCHTITAN_COMPILED_LOSS_FILES = ("asyncTP_llama3_h100_2025-06_torchtitan.md", "llama3-8b_h200_202506_trainy-whitefiber.md")


def _torchtitan_compiles_loss(r: dict[str, str]) -> bool:
    return r["torch_compile"] == "True" and any(f in r["source"] for f in _TORCHTITAN_COMPILED_LOSS_FILES)


# Every published torchtitan run predates 25413d2 (2025-08-29), which turned full AC's early stop
# off by default: they ran torch's default (on), so a full recompute skipped each block's last
# linear (groups.Recompute; a compiled block's partitioner skips it too).
TORCHTITAN_RUNS_EARLY_STOP = (("full_recompute_skips_last_linear", True),)


def _torchtitan_row(line: int, r: dict[str, str]) -> Row:
    return Row(source="torchtitan", row_id=f"torchtitan:{line}", model=load_model(_TORCHTITAN_MODELS[r["model"]]),
               hardware="h200" if "H200" in r["table"] else "h100-96gb-500w",
               trainer="torchtitan", layout=_torchtitan_layout(r),
               tokens_per_s_per_gpu=number_or_nan(r["tokens_per_sec_per_gpu"]),
               peak_memory_bytes=number_or_nan(r["peak_memory_gib"]) * GiB,
               cell=f"{r['table']} {r['note']}".strip(), allow_uneven=True,
               settings=(("compile_loss", True),) if _torchtitan_compiles_loss(r) else (),
               profile_overrides=TORCHTITAN_RUNS_EARLY_STOP)


def load_torchtitan() -> Source:
    """torchtitan's published Llama 3.1 runs (tokens/s/GPU and max memory over GPUs, GiB)."""
    file = "torchtitan_benchmarks.csv"
    rows, excluded = rows_and_exclusions("torchtitan", file, _torchtitan_exclusion, _torchtitan_row)
    return Source("torchtitan", file, rows, excluded,
                  notes="compile=True rows; async TP rows kept (one tp_overlap per profile); "
                        "seq_len 8192 where the file infers it; H200 rows never fitted (transfer check; "
                        "their FSDP float8 all-gather is counted as bf16)")


# --- Megatron on A100 80GB (Selene): SC'21 Table 1, Korthikanti 2022 Table 5 -------------------

def megatron_2021_options(ddp_impl: str):
    """The megatron profile's options as Megatron-LM ran in 2021-22 (SC'21, Korthikanti 2022).
    ``--DDP-impl local`` (the default, and the only one allowed with pipeline parallelism or model
    chunks) all-reduced the gradients after ``forward_backward_func`` returned, past the pipeline
    flush: no overlap (``model_module.allreduce_gradients()`` in ``train_step``,
    ``megatron/training.py`` at Megatron-LM 3d718bfc31, Aug 2021, and 55ba1f7b96, May 2022).
    ``--DDP-impl torch`` (SC'21's pp-1 rows, ``examples/sc21/run_table_1.sh``) is PyTorch DDP,
    whose bucket all-reduces overlap the last micro-batch's backward (the others run under
    ``no_sync``). No distributed optimizer existed, so no parameter gather either way."""
    if ddp_impl not in ("local", "torch"):
        raise ValueError(f"--DDP-impl is 'local' or 'torch', got {ddp_impl!r}")
    return replace(load_profile("megatron").options, overlap_grad_reduce=ddp_impl == "torch",
                   overlap_param_gather=False)


def load_sc21() -> Source:
    """SC'21 Table 1 (weak scaling, full recompute, interleaved 1F1B where the script used it;
    Megatron's non-fused softmax of the time: attention_kernel 'eager').

    tokens/s per GPU is derived: achieved TFLOP/s / (96·l·h²·(1 + s/6h + V/16lh)). fp16 runs as
    autoplan's 16-bit precision ('bf16'); no distributed optimizer (zero 0) and no sequence
    parallelism existed then; the gradient all-reduce overlapped the backward only under the
    script's ``--DDP-impl torch`` (the pp-1 rows; ``megatron_2021_options``).
    """
    file = "megatron_sc21_table1_weak_scaling.csv"
    rows = []
    for i, r in enumerate(read_csv(file)):
        h, layers, heads = int(r["hidden_size"]), int(r["num_layers"]), int(r["attention_heads"])
        seq, vocab = int(r["seq_len"]), int(r["vocab_size"])
        model = gpt_model(f"gpt-sc21-{r['model']}", hidden=h, layers=layers, heads=heads, vocab=vocab,
                          seq_len=seq, tied=True)
        gpus, mbs = int(r["num_gpus"]), int(r["micro_batch_size_from_script"])
        tp, pp, gbs = int(r["tp"]), int(r["pp"]), int(r["global_batch_size_sequences"])
        layout = {"gpus": gpus, "tp": tp, "pp": pp, "vpp": _leading_int(r["virtual_stages_per_rank_derived"], 1),
                  "zero": 0, "mbs": mbs, "seq_len": seq, "gbs_seqs": gbs, "recompute": "full", "sp": False}
        tflops = float(r["achieved_tflops_per_gpu"]) * 1e12
        rows.append(Row(source="sc21", row_id=f"sc21:{r['model']}", model=model, hardware="a100-80gb",
                        trainer="megatron", layout=layout,
                        tokens_per_s_per_gpu=tflops / sc21_flops_per_token(h, layers, vocab, seq),
                        cell=r["model"], derived="TFLOP/s / 96·l·h²·(1 + s/6h + V/16lh)",
                        attention_kernel="eager",
                        profile_overrides=(("options", megatron_2021_options(r["ddp_impl_from_script"])),)))
    return Source("sc21", file, tuple(rows), notes="derived tokens/s from hardware TFLOP/s")


def _korthikanti_configs() -> dict[str, dict[str, str]]:
    return {r["model"].split()[0]: r for r in read_csv("korthikanti2022_table3_configs.csv")}


def load_korthikanti() -> Source:
    """Korthikanti et al. 2022 Table 5: selective recompute + SP rows and full-recompute rows
    (the paper's baseline: tensor parallelism without SP). tokens/s/GPU = gbs·seq/(time·gpus);
    configurations from Table 3 (530B at DP=8 keeps the per-replica batch: gbs = 8 x 280); the
    runs predate fused attention in Megatron (Table 2's 5as² terms): attention_kernel 'eager';
    the gradient all-reduce ran after the backward (``megatron_2021_options``: local DDP, the only
    one Megatron allowed with pipeline parallelism; the 22B row runs without data parallelism)."""
    file = "korthikanti2022_table5_end_to_end.csv"
    configs = _korthikanti_configs()
    options = megatron_2021_options("local")
    rows, excluded = [], []
    for i, r in enumerate(read_csv(file)):
        c = configs[r["model"]]
        h, layers, heads = int(c["hidden_size"]), int(c["num_layers"]), int(c["attention_heads"])
        seq, vocab = int(c["seq_len"]), int(c["vocab_size"])
        model = gpt_model(f"gpt-korthikanti-{r['model']}", hidden=h, layers=layers, heads=heads,
                          vocab=vocab, seq_len=seq, tied=True)
        gpus, dp = int(r["num_gpus"]), int(r["dp"])
        gbs = int(c["global_batch_size_sequences"]) * dp
        base = {"gpus": gpus, "tp": int(c["tp"]), "pp": int(c["pp"]), "zero": 0,
                "vpp": _leading_int(c["interleaved_stages"], 1), "mbs": int(c["micro_batch_size"]),
                "seq_len": seq, "gbs_seqs": gbs}
        found = False
        for column, mode, sp in (("iteration_time_selective_plus_sp_s", "selective", True),
                                 ("iteration_time_full_recompute_s", "full", False)):
            seconds = number_or_nan(r[column])
            if not math.isfinite(seconds):
                continue
            found = True
            rows.append(Row(source="korthikanti", row_id=f"korthikanti:{r['model']}x{gpus}:{mode}",
                            model=model, hardware="a100-80gb", trainer="megatron",
                            layout={**base, "recompute": mode, "sp": sp},
                            tokens_per_s_per_gpu=gbs * seq / (seconds * gpus), cell=r["model"],
                            derived="gbs·seq / (iteration time·gpus)", attention_kernel="eager",
                            profile_overrides=(("options", options),)))
        if not found:
            excluded.append((f"korthikanti:{i + 2}", f"no iteration time ({r['note']})"))
    return Source("korthikanti", file, tuple(rows), tuple(excluded))


# --- Megatron-like on H100 SXM: Megatron-Core weak scaling, Llama 3 405B Table 4 ----------------

def _interleave(layers: int, pp: int) -> int:
    """Virtual stages per rank where the source uses interleaving but does not state it:
    ASSUMED one layer per virtual stage (vpp = L // pp), 1 without PP."""
    return max(1, layers // pp) if pp > 1 else 1


def load_megatron_core_h100() -> Source:
    """Megatron-Core r0.8.0 weak scaling on H100 (README table): GPT models, vocab 131072,
    seq 4096, untied embeddings (the 177B row's count needs an untied head). tokens/s per GPU is
    DERIVED from the published TFLOP/s with the FLOP count Megatron's training log reports them in
    (``megatron_flops_per_token``: the table's TFLOP/s/GPU is that log's figure). The file's ``comm_overlap``
    column states --overlap-grad-reduce, --overlap-param-gather and --tp-comm-overlap: each row
    runs the megatron profile's options with those switched on. ASSUMED (not stated): bf16,
    no recompute, mbs 1, distributed optimizer (zero 1), SP with TP, vpp per ``_interleave``.
    The assumption that matters: the 16B and 32B rows (pp 1, TP 4 and 8: a DP group with one or
    two GPUs per node, one NIC each) reduce-scatter ~16 GB of fp32 gradients per GPU per step,
    which --overlap-grad-reduce hides only behind the last micro-batch's backward; at mbs 1 that
    window is a quarter of the step's backward and they come out 13-33% slow, while the published
    MFU (46-49%) says the reduction hid almost whole: a larger, unstated micro-batch would."""
    file = "megatron_core_h100_weak_scaling.csv"
    rows = []
    base = load_profile("megatron").options
    for r in read_csv(file):
        flags = r["comm_overlap"]
        options = replace(base, tp_comm_overlap="--tp-comm-overlap" in flags,
                          overlap_grad_reduce="--overlap-grad-reduce" in flags,
                          overlap_param_gather="--overlap-param-gather" in flags)
        h, layers, heads = int(r["hidden_size"]), int(r["num_layers"]), int(r["attention_heads"])
        seq, vocab = int(r["seq_len"]), int(r["vocab_size"])
        model = gpt_model(f"gpt-mcore-{r['model']}", hidden=h, layers=layers, heads=heads, vocab=vocab,
                          seq_len=seq, tied=False)
        tp, pp = int(r["tp"]), int(r["pp"])
        layout = {"gpus": int(r["num_gpus"]), "tp": tp, "pp": pp, "vpp": _interleave(layers, pp), "zero": 1,
                  "mbs": 1, "seq_len": seq, "gbs_seqs": int(r["global_batch_size_sequences"]),
                  "recompute": "none"}
        tflops = float(r["tflops_per_gpu"]) * 1e12
        rows.append(Row(source="megatron_core_h100", row_id=f"megatron_core_h100:{r['model']}", model=model,
                        hardware="h100-sxm", trainer="megatron", layout=layout,
                        tokens_per_s_per_gpu=tflops / megatron_flops_per_token(model, seq),
                        mfu=float(r["mfu_pct"]) / 100.0, cell=r["model"],
                        derived="TFLOP/s / Megatron's num_floating_point_operations per token",
                        profile_overrides=(("options", options),)))
    return Source("megatron_core_h100", file, tuple(rows), notes="derived tokens/s; layout assumptions")


def load_llama3_405b() -> Source:
    """Llama 3 405B Table 4 on H100 80GB (Megatron-like profile). tokens/s per GPU DERIVED from
    the published TFLOP/s with the playbook convention. ASSUMED: mbs 1 (grad_acc = batch per DP
    rank), ZeRO-1-like sharding (their FSDP keeps parameters unsharded), interleaved 1F1B with
    vpp per ``_interleave`` on uneven stages (126 layers over 16), no recompute (stated for 8K;
    the 128K row holds the same 8K tokens per GPU with CP 16)."""
    file = "llama3_405b_table4_scaling.csv"
    model = load_model("llama3.1-405b")
    rows = []
    for r in read_csv(file):
        seq, pp, per_dp = int(r["seq_len"]), int(r["pp"]), int(r["batch_size_per_dp_sequences"])
        dp = int(r["dp"])
        layout = {"gpus": int(r["gpus"]), "tp": int(r["tp"]), "pp": pp, "cp": int(r["cp"]), "dp": dp,
                  "vpp": _interleave(model.num_layers, pp), "zero": 1, "mbs": 1, "grad_acc": per_dp,
                  "seq_len": seq, "gbs_seqs": dp * per_dp, "recompute": "none"}
        tflops = float(r["tflops_per_gpu"]) * 1e12
        row_id = f"llama3_405b:{r['gpus']}gpus-cp{r['cp']}"
        rows.append(Row(source="llama3_405b", row_id=row_id, model=model, hardware="h100-sxm",
                        trainer="megatron", layout=layout,
                        tokens_per_s_per_gpu=tflops / playbook_flops_per_token(model, seq),
                        mfu=float(r["bf16_mfu_pct"]) / 100.0, cell=row_id, allow_uneven=True,
                        derived="TFLOP/s / (6·N + 12·L·h·s), playbook convention"))
    return Source("llama3_405b", file, tuple(rows), notes="derived tokens/s; layout assumptions")
