"""What the probe times: GEMM shapes, attention lengths, copy and collective sizes (no PyTorch).

On a GPU without ``--model`` the shapes are those of ``benchmarks/gpu_kernels.py`` (a linear
layer's three GEMMs at the MLP's up and down projections, hidden h, ffn 3.5·h, split over tp
ranks, for a micro-batch of ``tokens``; causal attention at head dim 128), so that a probe's
table and ``validation/h200_kernels.csv`` compare shape for shape. With ``--model`` the hidden and
ffn sizes are the model's and the attention lengths run up to its sequence length. On a CPU the
sizes are tiny (a CPU is probed to check the tool, or for a CPU run), whatever the model.
``quick`` keeps a few of each.
"""

from __future__ import annotations

from dataclasses import dataclass

MiB = 2.0**20
HEAD_DIM = 128  # attention_efficiency is the figure at head dim 128 (cost.time.REFERENCE_HEAD_DIM)


@dataclass(frozen=True)
class GemmShape:
    """A linear layer of a (tokens, k) input and an (n, k) weight: its three GEMMs are timed."""

    h: int
    tp: int
    tokens: int
    n: int
    k: int
    note: str  # 'up' or 'down'


@dataclass(frozen=True)
class ProbePlan:
    gemms: tuple[GemmShape, ...]
    gemm_dtypes: tuple[str, ...]  # 'bf16' always; 'fp32' beside it on a CPU
    fp8: bool  # FP8 recipes (tensorwise, rowwise) where the GPU has FP8
    attention_seqs: tuple[int, ...]
    attention_heads: tuple[int, ...]
    attention_tokens: int  # tokens per attention call (batch = tokens // seq)
    attention_backends: tuple[str, ...]  # 'flash', 'cudnn' on CUDA; 'sdpa' (PyTorch's choice) on a CPU
    copy_bytes: tuple[float, ...]
    host_copy_bytes: tuple[float, ...]  # pinned copies host <-> device (GPU only)
    collective_bytes: tuple[float, ...]
    min_time_s: float  # each timing repeats its call for at least this long
    large_gemm_flops: float  # GEMMs at least this large give the FP8 speed-up


def _shapes(hs, tps, tokens_list, ffn_of) -> tuple[GemmShape, ...]:
    out = []
    for h in hs:
        f = ffn_of(h)
        for tp in tps:
            if f % tp:
                continue
            for tokens in tokens_list:
                out += [GemmShape(h, tp, tokens, f // tp, h, "up"), GemmShape(h, tp, tokens, h, f // tp, "down")]
    return tuple(out)


def cpu_plan(quick: bool) -> ProbePlan:
    """Tiny sizes that a 2-core machine times in seconds."""
    return ProbePlan(
        gemms=_shapes([64, 128, 256] if quick else [128, 256, 512], [1] if quick else [1, 2],
                      [32, 128] if quick else [64, 256, 1024], lambda h: int(3.5 * h)),
        gemm_dtypes=("bf16", "fp32"), fp8=False,
        attention_seqs=(64, 128, 256) if quick else (64, 128, 256, 512, 1024), attention_heads=(2,),
        attention_tokens=256 if quick else 1024, attention_backends=("sdpa",),
        copy_bytes=(4 * MiB, 16 * MiB) if quick else (4 * MiB, 16 * MiB, 64 * MiB), host_copy_bytes=(),
        collective_bytes=tuple(2.0**p for p in (range(12, 23, 2) if quick else range(10, 25, 2))),
        min_time_s=0.01 if quick else 0.05, large_gemm_flops=1e7)


def cuda_plan(quick: bool, has_fp8: bool, model=None) -> ProbePlan:
    """benchmarks/gpu_kernels.py's shapes (``quick``: h 1024 and 4096, tp 1 and 8, 1,024 and 4,096
    tokens), or the model's hidden and ffn sizes."""
    if model is not None:
        hs, ffn_of = [model.hidden_size], (lambda h: model.ffn_hidden_size)
        longest = int(model.seq_len)
        seqs = tuple(s for s in (1024, 2048, 4096, 8192, 16384, 32768) if s <= max(longest, 1024))
    else:
        hs, ffn_of = ([1024, 4096] if quick else [1024, 2048, 4096, 8192]), (lambda h: int(3.5 * h))
        seqs = (1024, 4096, 16384) if quick else (1024, 2048, 4096, 8192, 16384, 32768)
    return ProbePlan(
        gemms=_shapes(hs, [1, 8] if quick else [1, 2, 4, 8], [1024, 4096] if quick else [1024, 4096, 16384], ffn_of),
        gemm_dtypes=("bf16",), fp8=has_fp8,
        attention_seqs=seqs, attention_heads=(8,) if quick else (8, 32), attention_tokens=32768,
        attention_backends=("flash", "cudnn"),
        copy_bytes=(256 * MiB, 2048 * MiB) if quick else (256 * MiB, 1024 * MiB, 4096 * MiB),
        host_copy_bytes=tuple(2.0**p for p in (range(20, 29, 4) if quick else range(20, 31, 2))),
        collective_bytes=tuple(2.0**p for p in (range(16, 31, 2) if quick else range(12, 33, 2))),
        min_time_s=0.02 if quick else 0.05, large_gemm_flops=1e11)
