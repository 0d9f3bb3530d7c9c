"""Attention kernels whose speed is a published kernel benchmark's, not a fitted efficiency.

``attention_kernel: triton`` (``specs.training.ATTENTION_KERNELS``) is FlashAttention written in
Triton as llm-foundry ran it under ``attn_impl: triton``, the default of its throughput benchmark
(scripts/train/benchmarking/submit_benchmarks.py ``--attn_impl`` default 'triton' from examples/llm
@9fa3ceb to @5e85bd6): ``llmfoundry/models/layers/flash_attn_triton.py`` (v0.3.0: a copy of
Dao-AILab/flash-attention ``flash_attn/flash_attn_triton.py`` @eff9fe6 built on the pre-MLIR Triton
``triton_pre_mlir``; examples/llm @9fa3ceb called ``flash_attn.flash_attn_triton`` itself). It
skips the tiles above the causal diagonal, forward (``end_n = (start_m + 1)·BLOCK_M``) and
backward (``begin_m = start_n·BLOCK_N``), so it does the causal half of the score FLOPs as the
``flash`` kernels do, but more slowly than FlashAttention-2, which outruns FlashAttention 1's CUDA
kernel 1.4-2.5× on causal attention (Fig. 4 and 7 below).

Its speed is FlashAttention 1's CUDA kernel's, the kernel its author measured it against: the
file's docstring says "Triton forward is generally faster than CUDA forward, while Triton backward
is generally slower than CUDA backward. Overall Triton forward + backward is slightly slower than
CUDA forward + backward" (how much slower it does not say; none is charged). The figures are the
FlashAttention-2 paper's (Dao 2023, arXiv:2307.08691; the README figures
``assets/flash2_{a100,h100}_fwd_bwd_benchmark.png`` @4f285b35): forward + backward TFLOP/s of
causal attention, hidden 2048 (32 heads of 64 or 16 of 128), batch 16k/seq, FLOPs counted as
3.5 · 4·b·s²·h·d/2 (benchmarks/benchmark_flash_attention.py ``flops``, the cost model's causal half
of the score FLOPs with backward = ATTENTION_BACKWARD_FACTOR × forward), the "FlashAttention"
(1.x CUDA) bars of:

* A100 80GB SXM4, Fig. 4(c) head dim 64 and 4(d) 128. The "FlashAttention Triton" bars beside
  them time another kernel, Triton's own ``triton.ops.flash_attention`` (Tillet's tutorial), which
  flash_attn_triton.py started from and then sped up ("Speed up the forward pass a bit", "Make the
  backward for d=128 much faster by reducing register spilling"): 59-80 TFLOP/s against
  FlashAttention 1's 58-97 at head dim 64, 50-80 against 55-83 at 128. Taken for llm-foundry's
  kernel (until 2026-12) they put MPT's 16K-64K rows 9-22% slow; with FlashAttention 1's bars
  its leave-one-source-out tokens/s MAPE is 7.9% instead of 8.7% (benchmarks/accuracy.py).
* H100 80GB SXM5, Fig. 7(c), 7(d) (the figure has no Triton bar).

Between the figure's lengths the speed is linear in log2(seq), held at 512 and 16384 outside;
between head dims 64 and 128 linear, held outside. Measured on those two GPUs, it stands for GPUs
of the same SM (``TRITON_KERNEL_MEASURED_ON``) as a share of their dense peak; elsewhere it is
refused (llm-foundry dropped ``attn_impl: triton`` in v0.7.0, 2024-03).
"""

from __future__ import annotations

import numpy as np

from autoplan.errors import AutoplanError

FIGURE_SEQ_LENS = (512, 1024, 2048, 4096, 8192, 16384)
# (dense bf16/fp16 peak FLOP/s of the GPU the figure measured, {head dim: forward + backward
# TFLOP/s at FIGURE_SEQ_LENS}), the FlashAttention (1.x CUDA) bars' labels (see the module doc).
TRITON_FLASH_ATTENTION_TFLOPS: dict[str, tuple[float, dict[int, tuple[float, ...]]]] = {
    "a100": (312e12, {64: (58, 70, 77, 87, 92, 97), 128: (55, 62, 69, 76, 80, 83)}),  # Fig. 4(c), 4(d)
    "h100": (989e12, {64: (104, 123, 136, 138, 149, 156), 128: (98, 109, 108, 126, 135, 137)}),  # Fig. 7(c), 7(d)
}
# GPUs (hardware_db names) of the SM each figure was measured on: A100 (sm80), H100 (sm90).
TRITON_KERNEL_MEASURED_ON = {"a100-40gb": "a100", "a100-80gb": "a100",
                             "h100-sxm": "h100", "h100-sxm-efa": "h100", "h100-96gb-500w": "h100"}


class AttentionKernelError(AutoplanError):
    """An attention kernel asked of a GPU it has no published speed on."""


def triton_attention_efficiency(gpu_name: str, head_dim: float, keys: np.ndarray) -> np.ndarray:
    """Share of the dense peak that llm-foundry's Triton FlashAttention reaches on causal
    attention forward + backward with ``keys`` keys per call (the sequence length): TFLOP/s(keys,
    head dim) / peak of the figure's GPU, from TRITON_FLASH_ATTENTION_TFLOPS (FlashAttention-2 paper
    Fig. 4 and 7; the module doc), linear in log2(keys) and in head_dim between the measured
    points (np.interp), held outside them."""
    family = TRITON_KERNEL_MEASURED_ON.get(gpu_name)
    if family is None:
        raise AttentionKernelError(
            f"attention_kernel 'triton' has a published speed on {', '.join(TRITON_KERNEL_MEASURED_ON)} only "
            f"(FlashAttention-2 paper Fig. 4, 7: A100 and H100), got gpu {gpu_name!r}")
    peak, by_head_dim = TRITON_FLASH_ATTENTION_TFLOPS[family]
    log_keys = np.log2(np.asarray(keys, dtype=float))
    dims = sorted(by_head_dim)
    at_dims = [np.interp(log_keys, np.log2(FIGURE_SEQ_LENS), by_head_dim[d]) for d in dims]
    weight = np.clip((float(head_dim) - dims[0]) / (dims[-1] - dims[0]), 0.0, 1.0)
    return ((1.0 - weight) * at_dims[0] + weight * at_dims[-1]) * 1e12 / peak
