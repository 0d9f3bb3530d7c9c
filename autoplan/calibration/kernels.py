"""Kernel efficiencies measured on a GPU, read off as the cost model's physical parameters.

``benchmarks/gpu_kernels.py`` and ``benchmarks/gpu_layer.py`` time, on a GPU, the kernels a
transformer layer is made of; their output for an H100 SXM (700 W) is shipped as
``validation/h100_sxm_kernels.csv`` and ``validation/h100_sxm_llama_layer.csv`` (the first line
of each names the device, PyTorch and CUDA versions and the date). This module reads those
tables and derives, without a GPU, the figures the cost model's physical parameters stand for
(:class:`KernelFigures`), so that the parameters fitted end to end on published runs can be
compared with what the kernels alone reach (``benchmarks/kernels.py``):

* the GEMM efficiency curve η(F) = η_max·F/(F + F_half) (``autoplan/cost/time.py``
  gemm_efficiency), fitted to a linear layer's three BF16 GEMMs as t = (F + F_half)/(η_max·peak):
  weighted least squares on the relative time error;
* the FP8/BF16 GEMM speed-up (``fp8_gemm_speedup``) per scaling recipe, over GEMMs of at least
  ``LARGE_GEMM_FLOPS``, and the fixed time per FP8 GEMM from the same linear fit;
* the fraction of the BF16 peak that causal attention reaches forward + backward per kernel and
  sequence length (``attention_efficiency``), with the half-efficiency sequence length of
  frac(s) = frac_max·s/(s + s_half), fitted as 1/frac = 1/frac_max + (s_half/frac_max)/s;
* the device-to-device copy bandwidth as a fraction of the datasheet HBM bandwidth
  (``hbm_efficiency``);
* the grouped expert GEMM against one dense GEMM of the same FLOPs, by tokens per expert;
* the same kernel figures from ``h200_kernels.csv`` (``gpu_kernels.py`` on an H200: the same
  Hopper die with more and faster HBM, the same datasheet BF16 peak), against which the transfer
  of efficiencies within a generation (``profiles/transfer.py``) is checked;
* the share of the tensorwise FP8 gain a scaling recipe keeps (``recipe_gain_shares``: row-wise
  and 1×128/128×128 block scales on Hopper, ``cost/fp8.py`` RECIPE_GAIN_SHARE);
* the fixed time of a dropless MoE layer per micro-batch (``moe_layer_fixed_s``): the layer's
  forward + backward less its grouped expert GEMMs', t_0 of t_0 + c·tokens (Theil-Sen), and how
  far the expert GEMMs at few tokens sit above their weights' HBM traffic (``expert_floor_ratios``);
* the element-wise HBM bytes per token and hidden unit (``elementwise_bytes_per_token_hidden``)
  of a Llama layer, eager and compiled: the profiler's non-GEMM, non-attention kernel time, less
  the weight-gradient accumulation the backward rows include (AccumulateGrad's in-place add of
  bf16 gradients: read 2 + 2 B, write 2 B per parameter and iteration), at the measured copy
  bandwidth.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from autoplan.paths import data_dir

KERNELS_FILE = "h100_sxm_kernels.csv"
LAYER_FILE = "h100_sxm_llama_layer.csv"
HEAD_DIM_FILE = "h100_sxm_attention_head_dim.csv"  # attention alone at head dims 64 and 128
# A dropless MoE layer against its expert GEMMs (gpu_moe_layer.py): table -> hardware_db preset.
MOE_LAYER_FILES = {"h100_sxm_moe_layer.csv": "h100-sxm", "h200_moe_layer.csv": "h200"}
H200_KERNELS_FILE = "h200_kernels.csv"  # gpu_kernels.py on an H200: the within-Hopper transfer check
# FP8 GEMMs by scaling recipe beside BF16 (gpu_fp8_recipes.py) on the two Hopper parts measured.
FP8_RECIPES_FILES = ("h100_sxm_fp8_recipes.csv", "h200_fp8_recipes.csv")
MEASURED_GPU = "h100-sxm"  # the hardware_db preset of the GPU the shipped tables were measured on
LARGE_GEMM_FLOPS = 1e11  # GEMMs at least this large: the FP8 speed-up away from the fixed time
ACCUMULATE_GRAD_BYTES_PER_PARAM = 6.0  # bf16 .grad += new: read 2 + 2 B, write 2 B


@dataclass(frozen=True)
class Table:
    """One measurement table: the device line (``meta``) and the rows, numbers as floats."""

    meta: dict
    rows: list[dict]

    def select(self, **equal) -> list[dict]:
        return [r for r in self.rows if all(r.get(k) == v for k, v in equal.items())]


def _number(text: str):
    try:
        return float(text)
    except ValueError:
        return text


def read_table(path: str | Path) -> Table:
    """A table written by benchmarks/gpu_kernels.py or gpu_layer.py: '# {json}' then CSV."""
    path = Path(path)
    with path.open(newline="", encoding="utf-8") as handle:
        first = handle.readline()
        if not first.startswith("# "):
            raise ValueError(f"{path}: the first line must be '# ' and the measuring device as JSON, got {first[:60]!r}")
        meta = json.loads(first[2:])
        rows = [{k: _number(v) for k, v in r.items()} for r in csv.DictReader(handle)]
    return Table(meta, rows)


def shipped_tables() -> tuple[Table, Table]:
    """The H100 SXM tables shipped in ``validation/``."""
    folder = data_dir("validation")
    return read_table(folder / KERNELS_FILE), read_table(folder / LAYER_FILE)


@dataclass(frozen=True)
class Spread:
    median: float
    low: float
    high: float
    n: int

    @classmethod
    def of(cls, values) -> Spread:
        v = np.asarray(values, dtype=float)
        if v.size == 0:
            return cls(float("nan"), float("nan"), float("nan"), 0)
        return cls(float(np.median(v)), float(v.min()), float(v.max()), int(v.size))


@dataclass(frozen=True)
class LinearTimeFit:
    """t = (F + half_flops)/(efficiency·peak): ``efficiency`` of the peak for large F, a fixed
    ``fixed_s`` = half_flops/(efficiency·peak) per call; relative errors of the fit."""

    efficiency: float
    half_flops: float
    fixed_s: float
    median_error: float
    p90_error: float
    n: int


def fit_linear_time(flops, seconds, peak_flops_per_s: float) -> LinearTimeFit:
    """Weighted least squares of t = a·F + b on the relative error (rows weighted by 1/t)."""
    f, t = np.asarray(flops, float), np.asarray(seconds, float)
    ok = (f > 0) & (t > 0)
    f, t = f[ok], t[ok]
    if f.size < 2:
        raise ValueError(f"a linear time fit needs at least 2 timed rows, got {f.size}")
    design = np.column_stack([f, np.ones_like(f)]) / t[:, None]
    (a, b), *_ = np.linalg.lstsq(design, np.ones_like(t), rcond=None)
    errors = np.abs((a * f + b) / t - 1.0)
    return LinearTimeFit(1.0 / (a * peak_flops_per_s), b / a, float(b), float(np.median(errors)),
                         float(np.quantile(errors, 0.9)), int(f.size))


@dataclass(frozen=True)
class AttentionCurve:
    """frac(s) = max_fraction·s/(s + half_seq) of the BF16 peak, forward + backward, and the
    measured fractions by sequence length (mean over the head counts timed)."""

    max_fraction: float
    half_seq: float
    by_seq: dict[int, float]


def attention_curve(table: Table, backend: str, peak_flops_per_s: float, head_dim: int | None = None) -> AttentionCurve:
    """The forward + backward curve of ``backend``'s rows (of one ``head_dim`` where given)."""
    rows = [r for r in table.select(kind=f"attention_{backend}", **{"pass": "fwd+bwd"}) if r["seconds"]
            and (head_dim is None or r["head_dim"] == head_dim)]
    if not rows:
        raise ValueError(f"no timed fwd+bwd rows for attention backend {backend!r}")
    by_seq: dict[int, list[float]] = {}
    for r in rows:
        by_seq.setdefault(int(r["seq"]), []).append(r["flops"] / r["seconds"] / peak_flops_per_s)
    seqs = np.array(sorted(by_seq), float)
    fractions = np.array([np.mean(by_seq[int(s)]) for s in seqs])
    (inv_max, slope), *_ = np.linalg.lstsq(np.column_stack([np.ones_like(seqs), 1.0 / seqs]),
                                          1.0 / fractions, rcond=None)
    return AttentionCurve(1.0 / inv_max, slope / inv_max, {int(s): float(f) for s, f in zip(seqs, fractions)})


def head_dim_ratios(table: Table, peak_flops_per_s: float, small: int = 64, large: int = 128) -> dict[str, dict[int, float]]:
    """Per backend and sequence length, the forward + backward fraction of the peak at head dim
    ``small`` over that at ``large`` (the cost model's attention_efficiency does not see the head dim)."""
    out = {}
    for backend in ("flash", "cudnn"):
        low = attention_curve(table, backend, peak_flops_per_s, small).by_seq
        high = attention_curve(table, backend, peak_flops_per_s, large).by_seq
        out[backend] = {s: low[s] / high[s] for s in sorted(low) if s in high}
    return out


def half_head_dim(ratio: float, small: int = 64, large: int = 128) -> float:
    """d_0 of eff(d) ∝ d/(d + d_0) (autoplan/cost/time.py head_dim_factor) from the measured
    efficiency at head dim ``small`` over that at ``large``: r = small·(large + d_0)/(large·(small
    + d_0)), so d_0 = small·large·(1 − r)/(large·r − small)."""
    if not small / large < ratio <= 1.0:
        raise ValueError(f"a head-dim ratio must lie in ({small / large:g}, 1] for d/(d + d_0), got {ratio:.3f}")
    return small * large * (1.0 - ratio) / (large * ratio - small)


def fp8_speedups(table: Table, recipe: str, min_flops: float = LARGE_GEMM_FLOPS) -> Spread:
    """BF16 time over FP8 time of the same GEMM (shape and pass), GEMMs of at least ``min_flops``."""
    key = ("h", "tp", "tokens", "note", "pass")
    bf16 = {tuple(r[k] for k in key): r["seconds"] for r in table.select(kind="gemm_bf16")}
    ratios = [bf16[tuple(r[k] for k in key)] / r["seconds"] for r in table.select(kind=f"gemm_fp8_{recipe}")
              if r["seconds"] and r["flops"] >= min_flops and tuple(r[k] for k in key) in bf16]
    return Spread.of(ratios)


def recipe_gain_shares(tables: Table | list[Table], min_flops: float = LARGE_GEMM_FLOPS) -> dict[str, Spread]:
    """Per FP8 scaling recipe of benchmarks/gpu_fp8_recipes.py other than tensorwise, the share
    of the tensorwise gain it keeps, (S − 1)/(S_tensorwise − 1) with S = BF16 time over the
    recipe's on the same shape of the same table, over the shapes of at least ``min_flops`` of
    every table given (each table one GPU)."""
    tables = [tables] if isinstance(tables, Table) else list(tables)
    seconds: dict[tuple, dict[str, float]] = {}
    for i, table in enumerate(tables):
        for r in table.rows:
            if r["seconds"] and r["flops"] >= min_flops:
                seconds.setdefault((i, r["tokens"], r["k"], r["n"]), {})[r["recipe"]] = float(r["seconds"])
    recipes = sorted({r["recipe"] for table in tables for r in table.rows} - {"bf16", "tensorwise"})
    out = {}
    for recipe in recipes:
        shares = [(t["bf16"] / t[recipe] - 1.0) / (t["bf16"] / t["tensorwise"] - 1.0) for t in seconds.values()
                  if {"bf16", "tensorwise", recipe} <= set(t) and t["bf16"] > t["tensorwise"]]
        out[recipe] = Spread.of(shares)
    return out


def grouped_gemm_ratios(table: Table) -> list[tuple[int, int, float, float]]:
    """(local experts, tokens per expert, grouped over dense-equivalent throughput, grouped over
    one expert's GEMM alone) for every timed grouped GEMM."""
    def by_key(kind):
        return {(int(r["experts"]), int(r["tokens"])): r for r in table.select(kind=kind) if r["seconds"]}

    grouped, dense, one = by_key("grouped_gemm"), by_key("grouped_gemm_dense_equivalent"), by_key("grouped_gemm_one_expert")
    return [(e, n, g["tflops_per_s"] / dense[(e, n)]["tflops_per_s"], g["tflops_per_s"] / one[(e, n)]["tflops_per_s"])
            for (e, n), g in sorted(grouped.items()) if (e, n) in dense and (e, n) in one]


@dataclass(frozen=True)
class MoeFixedFit:
    """layer − experts = fixed_s + seconds_per_token·tokens for one MoE configuration."""

    config: str
    fixed_s: float
    seconds_per_token: float
    n: int


def _by_tokens(table: Table, config: str, part: str) -> dict[int, float]:
    return {int(r["tokens"]): float(r["seconds"]) for r in table.select(config=config, part=part) if r["seconds"]}


def moe_fixed_times(table: Table) -> list[MoeFixedFit]:
    """Per configuration of benchmarks/gpu_moe_layer.py, the Theil-Sen line (median pairwise
    slope, median intercept; robust to the noise of a difference of two large times at many
    tokens) through the layer's time less its expert GEMMs' over the token counts."""
    out = []
    for config in dict.fromkeys(r["config"] for r in table.rows):
        layer, experts = _by_tokens(table, config, "layer"), _by_tokens(table, config, "experts")
        tokens = np.array(sorted(set(layer) & set(experts)), float)
        if tokens.size < 2:
            raise ValueError(f"{config}: a MoE fixed-time fit needs at least 2 token counts, got {tokens.size}")
        extra = np.array([layer[int(t)] - experts[int(t)] for t in tokens])
        i, j = np.triu_indices(tokens.size, 1)
        slope = float(np.median((extra[j] - extra[i]) / (tokens[j] - tokens[i])))
        out.append(MoeFixedFit(config, float(np.median(extra - slope * tokens)), slope, int(tokens.size)))
    return out


def expert_floor_ratios(table: Table, copy_bytes_per_s: float) -> dict[str, float]:
    """Per configuration, the expert GEMMs' forward + backward time at the fewest tokens timed
    over their weights' HBM traffic at ``copy_bytes_per_s``: 2 B read forward, 2 B read by the
    input gradient, 2 B written by the weight gradient, and AccumulateGrad's in-place add
    (``ACCUMULATE_GRAD_BYTES_PER_PARAM``) per expert weight, gate, up and down projections."""
    out = {}
    for config in dict.fromkeys(r["config"] for r in table.rows):
        rows = sorted((r for r in table.select(config=config, part="experts") if r["seconds"]), key=lambda r: r["tokens"])
        if rows:
            r = rows[0]
            params = 3.0 * r["experts"] * r["hidden"] * r["ffn_expert"]
            floor = params * (3 * 2.0 + ACCUMULATE_GRAD_BYTES_PER_PARAM) / copy_bytes_per_s
            out[config] = float(r["seconds"]) / floor
    return out


def layer_params(row: dict) -> float:
    """Weights of the measured Llama layer (benchmarks/gpu_layer.py Layer): q, k, v, o, gate, up,
    down and the two norm weights."""
    h, ffn = row["hidden"], row["ffn"]
    kv = row["kv_heads"] * h / row["heads"]
    return h * h * 2 + 2 * h * kv + 3 * h * ffn + 2 * h


@dataclass(frozen=True)
class ElementwiseFigures:
    """Element-wise HBM bytes per token per hidden unit of one layer, forward, at the measured
    copy bandwidth; backward over forward after the gradient accumulation is taken out."""

    forward_bytes: Spread
    backward_ratio: Spread


def elementwise_figures(layer: Table, mode: str, copy_bytes_per_s: float) -> ElementwiseFigures:
    forward, ratio = [], []
    cases = {(r["model"], r["seq"], r["mbs"]) for r in layer.select(mode=mode)}
    for case in sorted(cases):
        model, seq, mbs = case
        rows = {r["pass"]: r for r in layer.select(mode=mode, model=model, seq=seq, mbs=mbs)}
        if "fwd" not in rows or "fwd+bwd" not in rows:
            continue
        token_hidden = seq * mbs * rows["fwd"]["hidden"]
        fwd = rows["fwd"]["elementwise_s"] * copy_bytes_per_s / token_hidden
        accumulate = layer_params(rows["fwd"]) * ACCUMULATE_GRAD_BYTES_PER_PARAM
        bwd = ((rows["fwd+bwd"]["elementwise_s"] - rows["fwd"]["elementwise_s"]) * copy_bytes_per_s
               - accumulate) / token_hidden
        forward.append(fwd)
        ratio.append(bwd / fwd)
    return ElementwiseFigures(Spread.of(forward), Spread.of(ratio))


@dataclass(frozen=True)
class KernelFigures:
    """What the shipped H100 tables say about the cost model's physical parameters."""

    device: str
    gemm_bf16: LinearTimeFit
    gemm_fp8_tensorwise: LinearTimeFit
    fp8_speedup: dict[str, Spread]  # recipe -> BF16/FP8 time of GEMMs ≥ LARGE_GEMM_FLOPS
    attention: dict[str, AttentionCurve]  # 'flash' (FlashAttention-2 via SDPA), 'cudnn'
    hbm_copy_efficiency: float
    elementwise: dict[str, ElementwiseFigures]  # 'eager', 'compile'
    grouped: list[tuple[int, int, float, float]]


def kernel_figures(kernels: Table | None = None, layer: Table | None = None, gpu=None) -> KernelFigures:
    """The figures of the shipped tables (or the ones given), against ``gpu``'s datasheet peaks
    (a GPUSpecs; the measured preset by default)."""
    from autoplan.specs.hardware import load_gpu

    if kernels is None or layer is None:
        shipped = shipped_tables()
        kernels, layer = kernels or shipped[0], layer or shipped[1]
    gpu = gpu or load_gpu(MEASURED_GPU)
    peak = gpu.peak_bf16_flops_per_s

    def linear(kind):
        rows = [r for r in kernels.select(kind=kind) if r["seconds"]]
        return fit_linear_time([r["flops"] for r in rows], [r["seconds"] for r in rows], peak)

    copies = [r["bytes"] / r["seconds"] for r in kernels.select(kind="hbm_copy") if r["seconds"]]
    copy = max(copies) if copies else float("nan")
    return KernelFigures(
        device=str(kernels.meta.get("device", "")),
        gemm_bf16=linear("gemm_bf16"),
        gemm_fp8_tensorwise=linear("gemm_fp8_tensorwise"),
        fp8_speedup={recipe: fp8_speedups(kernels, recipe) for recipe in ("tensorwise", "rowwise")},
        attention={backend: attention_curve(kernels, backend, peak) for backend in ("flash", "cudnn")},
        hbm_copy_efficiency=copy / gpu.hbm_bytes_per_s,
        elementwise={mode: elementwise_figures(layer, mode, copy) for mode in ("eager", "compile")},
        grouped=grouped_gemm_ratios(kernels),
    )


def elementwise_bytes_at(figures: KernelFigures, mode: str, hbm_efficiency: float) -> float:
    """The measured forward element-wise bytes per token and hidden unit of the ``mode`` layer
    ('eager', 'compile'), expressed at ``hbm_efficiency``: the cost model divides the bytes by
    hbm_efficiency × the datasheet bandwidth, the measurement by the copy bandwidth."""
    return figures.elementwise[mode].forward_bytes.median * hbm_efficiency / figures.hbm_copy_efficiency
