"""FP8 training: the GEMM speed-up per GPU generation and recipe, and the casts it adds.

Speed-up. ``fp8_gemm_speedup`` is the GEMM speed-up the trainer reaches with one scale per
tensor (tensorwise or delayed scaling: cuBLASLt folds the two scales into the GEMM epilogue) on a
GPU whose FP8 peak is twice its BF16 peak (H100, B200). On another GPU the gain scales with its
peak ratio R = peak_fp8 / peak_bf16 (R ≤ 1, e.g. A100 without FP8: no gain). Recipes with
per-block scales keep a share of the gain (:data:`RECIPE_GAIN_SHARE`): on Hopper the 1×128 /
128×128 block scales are applied outside the tensor-core MMA (DeepSeek-V3 report, arXiv
2412.19437, Sec. 3.3.2: partial sums promoted to CUDA cores every 128 elements; DeepGEMM).
Measured on an H100 SXM and an H200 (validation/h100_sxm_fp8_recipes.csv, h200_fp8_recipes.csv,
benchmarks/gpu_fp8_recipes.py: cuBLASLt through PyTorch 2.11's scaled_mm, twelve GEMMs of
2.4e11-7.7e12 FLOP at Llama 3 and DeepSeek-V3 MLP shapes on each): the tensorwise gain is 1.90×
and 1.91× (medians), the blockwise 1.63× and 1.60×, a share of 0.70 over the 24 (0.44-0.84;
0.72 on the H100, 0.65 on the H200; ``calibration.kernels.recipe_gain_shares``); torchao's
row-wise scales (cuBLASLt's outer-vector scaling in the epilogue) keep 0.81 (0.56-0.94; 0.72 and
0.86), on Blackwell too for want of a measurement there. Blackwell's block-scaled MMA takes the
block scales in the instruction (``GPUSpec.fp8_block_scaled_mma``): blockwise and MXFP8 keep the
whole gain there. MXFP8 does not run on Hopper (Transformer Engine requires compute capability
10.0 for MXFP8BlockScaling), so it keeps no gain there.

Attention (``TrainingSpec.fp8_attention``; Transformer Engine ``DotProductAttention`` under a
recipe with ``fp8_dpa``, Megatron-Core ``fp8_dot_product_attention``): cuDNN's fused FP8 attention
runs QKᵀ and PV on the FP8 tensor cores, forward and, by default, backward
(``NVTE_FP8_DPA_BWD=1``, transformer_engine/pytorch/attention/dot_product_attention/utils.py), while
the softmax stays in fp32 on the SFUs. Its tensor time is the bf16 one over R, the kernel keeping
its bf16 efficiency (an assumption: no FP8 attention measurement here; FlashAttention-3, Shah et
al. 2024, abstract, reports close to 1.2 PFLOP/s FP8 against 0.74 BF16 forward on an H100, 1.6×
where R = 2, so this is the upper end of the gain); the exp floor (``cost.time.exp_floor_s``) is unchanged and
so binds sooner. Not modelled: the casts of Q, K, V, O and dO to FP8 (about 3 B per element of
q + 2·kv per token and layer, HBM-bound), the FP8 K/V of a context-parallel ring (half the bytes)
and the FP8 copies the kernel saves for the backward.

Casts. Each linear's input (forward) and output gradient (backward) is quantised: read bf16
(2 B), write the fp8 row-wise copy and, for the transposed GEMMs of backward, a column-wise copy
(1 B each) — :data:`CAST_BYTES_PER_ELEMENT`; current (tensorwise) scaling reads the tensor once
more to find its amax first (``AMAX_PASS_BYTES``; Transformer Engine ``Float8CurrentScaling``),
delayed scaling takes the amax from the history and fuses it into the cast; row-wise scaling finds
one amax per row for the forward copy and one per column for the transposed copy of backward
(torchao's rowwise recipe casts with axiswise scales along each GEMM's reduction dimension), two
reads first. Weights are cast once per step (Transformer Engine caches them across micro-batches,
``is_first_microbatch``) and are not counted; nor is the per-step amax all-reduce of delayed
scaling (a few KB).
"""

from __future__ import annotations

import numpy as np

from autoplan.cost.context import CostContext
from autoplan.cost.flops import linear_io_elements_per_token
from autoplan.layout import LayoutBatch

FP8_PRECISION_CODE = 1  # layout.PRECISIONS index of 'fp8'
REFERENCE_PEAK_RATIO = 2.0  # FP8/BF16 dense peak of H100 and B200, at which fp8_gemm_speedup holds
# Share of the FP8 gain a recipe keeps: (block scales outside the MMA [Hopper], block-scaled MMA [Blackwell]).
RECIPE_GAIN_SHARE = {"tensorwise": (1.0, 1.0), "delayed": (1.0, 1.0), "blockwise": (0.70, 1.0),
                     "mxfp8": (0.0, 1.0), "rowwise": (0.81, 0.81)}
CAST_BYTES_PER_ELEMENT = 4.0  # read bf16 (2) + write fp8 row-wise (1) + column-wise (1)
AMAX_PASS_BYTES = {"tensorwise": 2.0, "delayed": 0.0, "blockwise": 0.0, "mxfp8": 0.0, "rowwise": 4.0}


def matmul_speedup(ctx: CostContext, b: LayoutBatch) -> np.ndarray:
    """GEMM speed-up over BF16 per layout: 1 + (fp8_gemm_speedup − 1)·(R − 1)/(REFERENCE_PEAK_RATIO − 1)
    · RECIPE_GAIN_SHARE[recipe][block-scaled MMA] under fp8, else 1 (see the module doc)."""
    gpu = ctx.cluster.gpu
    ratio = gpu.peak_fp8_flops_per_s / gpu.peak_bf16_flops_per_s
    share = RECIPE_GAIN_SHARE[ctx.training.fp8_recipe][int(gpu.fp8_block_scaled_mma)]
    gain = (ctx.efficiency.fp8_gemm_speedup - 1.0) * max(ratio - 1.0, 0.0) / (REFERENCE_PEAK_RATIO - 1.0)
    return np.where(b.precision == FP8_PRECISION_CODE, 1.0 + gain * share, 1.0)


def attention_speedup(ctx: CostContext, b: LayoutBatch) -> np.ndarray:
    """The attention's tensor rate over BF16 per layout: R = peak_fp8 / peak_bf16 for fp8 layouts
    under ``fp8_attention``, else 1 (see the module doc)."""
    gpu = ctx.cluster.gpu
    ratio = max(gpu.peak_fp8_flops_per_s / gpu.peak_bf16_flops_per_s, 1.0)
    return np.where((b.precision == FP8_PRECISION_CODE) & ctx.training.fp8_attention, ratio, 1.0)


def cast_s(ctx: CostContext, b: LayoutBatch, tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Seconds of FP8 casts of one (dense, MoE) layer for one micro-batch, forward + backward:
    tokens · elements per token / tp · (CAST_BYTES_PER_ELEMENT + AMAX_PASS_BYTES[recipe]) /
    (hbm_bytes_per_s · hbm_efficiency); 0 under bf16. Memory-bound element-wise kernels."""
    per_element = CAST_BYTES_PER_ELEMENT + AMAX_PASS_BYTES[ctx.training.fp8_recipe]
    on = (b.precision == FP8_PRECISION_CODE) * tokens / b.tp * per_element / ctx.effective_hbm_bytes_per_s
    dense, moe = linear_io_elements_per_token(ctx)
    return on * dense, on * moe
