"""Kernel timings on one device: GEMMs, attention, element-wise copies, host-link copies.

Needs PyTorch (``autoplan[probe]``); imported only by the probe's ranks. The rows are those of
:mod:`autoplan.probe.tables`, counted as ``benchmarks/gpu_kernels.py`` counts them:

* a GEMM of (m, k) by (k, n) does 2·m·n·k FLOPs; each linear layer's forward, input-gradient and
  weight-gradient products are timed (``pass`` fwd, dgrad, wgrad);
* FP8 (CUDA, compute capability 8.9 and up): ``torch._scaled_mm`` on e4m3 operands with one scale
  per tensor (tensorwise) or per row and column (rowwise), the GEMM kernel alone;
* causal attention through ``scaled_dot_product_attention``: the causal half of 4·s²·heads·d
  FLOPs per sequence forward, 3.5× that forward + backward (Dao 2023, FlashAttention-2, Sec. 4.1);
* a copy of a buffer of B bytes moves 2·B (read and write);
* host-link copies: pinned host memory to the device and back, one direction at a time.

A timing is the fastest of three batches of repeated calls, each batch at least ``min_time_s``
long, between device synchronisations.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

from autoplan.probe.plan import HEAD_DIM, ProbePlan
from autoplan.probe.tables import host_link_row, kernel_row

E4M3_MAX = 448.0  # largest finite float8_e4m3fn (OCP FP8 formats, E4M3)
DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}
ATTENTION_FORWARD_BACKWARD = 3.5  # forward + backward FLOPs over forward (FlashAttention-2 counting)


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed_s(fn: Callable[[], object], device: torch.device, min_time_s: float, batches: int = 3) -> float:
    """Seconds per call of ``fn`` (see the module doc)."""
    fn()
    synchronize(device)
    start = time.perf_counter()
    fn()
    synchronize(device)
    one = max(time.perf_counter() - start, 1e-7)
    reps = int(min(1000, max(2, min_time_s / one)))
    best = float("inf")
    for _ in range(batches):
        start = time.perf_counter()
        for _ in range(reps):
            fn()
        synchronize(device)
        best = min(best, (time.perf_counter() - start) / reps)
    return best


def _e4m3(t: torch.Tensor, rowwise: bool):
    """``t`` in e4m3 and the inverse of its scale: one per tensor, or one per row."""
    t = t.float()
    amax = (t.abs().amax(dim=1, keepdim=True) if rowwise else t.abs().max()).clamp(min=1e-12)
    return (t * (E4M3_MAX / amax)).to(torch.float8_e4m3fn), (amax / E4M3_MAX).float()


def _fp8_seconds(a: torch.Tensor, b: torch.Tensor, rowwise: bool, device, min_time_s: float) -> float:
    """a (m, k) row-major times b (k, n), b passed column-major as torch._scaled_mm takes it."""
    a8, scale_a = _e4m3(a.contiguous(), rowwise)
    b8, scale_b = _e4m3(b.t().contiguous(), rowwise)
    scale_b = scale_b.t() if rowwise else scale_b
    return timed_s(lambda: torch._scaled_mm(a8, b8.t(), scale_a=scale_a, scale_b=scale_b, out_dtype=torch.bfloat16),
                   device, min_time_s)


def gemm_rows(plan: ProbePlan, device: torch.device, progress: Callable[[str], None]) -> list[dict]:
    rows = []
    for dtype_name in plan.gemm_dtypes:
        dtype = DTYPES[dtype_name]
        for shape in plan.gemms:
            x = torch.randn(shape.tokens, shape.k, device=device, dtype=dtype)
            w = torch.randn(shape.n, shape.k, device=device, dtype=dtype)
            dy = torch.randn(shape.tokens, shape.n, device=device, dtype=dtype)
            for name, a, b in (("fwd", x, w.t()), ("dgrad", dy, w), ("wgrad", dy.t(), x)):
                m, k, n = a.shape[0], a.shape[1], b.shape[1]
                common = dict(h=shape.h, tp=shape.tp, tokens=shape.tokens, m=m, n=n, k=k, note=shape.note)
                common["pass"] = name
                flops = 2.0 * m * n * k
                seconds = timed_s(lambda a=a, b=b: a @ b, device, plan.min_time_s)
                rows.append(kernel_row(f"gemm_{dtype_name}", flops=flops, seconds=seconds, **common))
                if plan.fp8 and dtype_name == "bf16":
                    for recipe, rowwise in (("tensorwise", False), ("rowwise", True)):
                        columns = dict(common)
                        try:
                            s8 = _fp8_seconds(a, b, rowwise, device, plan.min_time_s)
                        except RuntimeError as exc:  # a recipe this build or GPU does not run: noted
                            s8, columns["note"] = 0.0, f"{shape.note} failed: {' '.join(str(exc).split())[:100]}"
                        rows.append(kernel_row(f"gemm_fp8_{recipe}", flops=flops, seconds=s8, **columns))
        progress(f"gemm {dtype_name}: {len(plan.gemms)} shapes timed")
    return rows


def _sdpa_context(backend: str):
    from contextlib import nullcontext

    from torch.nn.attention import SDPBackend, sdpa_kernel

    chosen = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}.get(backend)
    return sdpa_kernel(chosen) if chosen is not None else nullcontext()


def attention_rows(plan: ProbePlan, device: torch.device, progress: Callable[[str], None]) -> list[dict]:
    rows = []
    for backend in plan.attention_backends:
        for seq in plan.attention_seqs:
            for heads in plan.attention_heads:
                batch = max(1, plan.attention_tokens // seq)
                shape = (batch, heads, seq, HEAD_DIM)
                q, k, v = (torch.randn(shape, device=device, dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
                grad = torch.randn(shape, device=device, dtype=torch.bfloat16)
                forward_flops = 4.0 * batch * seq * seq * heads * HEAD_DIM / 2.0
                common = dict(seq=seq, heads=heads, head_dim=HEAD_DIM, tokens=batch * seq)

                def forward():
                    with torch.no_grad():
                        F.scaled_dot_product_attention(q, k, v, is_causal=True)

                def both():
                    F.scaled_dot_product_attention(q, k, v, is_causal=True).backward(grad)

                try:
                    with _sdpa_context(backend):
                        t_forward = timed_s(forward, device, plan.min_time_s)
                        t_both = timed_s(both, device, plan.min_time_s)
                except RuntimeError as exc:  # a backend this GPU or build lacks: a row saying so
                    rows.append(kernel_row(f"attention_{backend}", **common,
                                           note=f"failed: {' '.join(str(exc).split())[:100]}"))
                    continue
                rows.append(kernel_row(f"attention_{backend}", flops=forward_flops, seconds=t_forward, **common,
                                       **{"pass": "fwd"}))
                rows.append(kernel_row(f"attention_{backend}", flops=ATTENTION_FORWARD_BACKWARD * forward_flops,
                                       seconds=t_both, **common, **{"pass": "fwd+bwd"}))
        progress(f"attention {backend}: {len(plan.attention_seqs)} lengths timed")
    return rows


def copy_rows(plan: ProbePlan, device: torch.device, progress: Callable[[str], None]) -> list[dict]:
    rows = []
    for num_bytes in plan.copy_bytes:
        x = torch.empty(int(num_bytes // 2), device=device, dtype=torch.bfloat16)
        y = torch.empty_like(x)
        seconds = timed_s(lambda: y.copy_(x), device, plan.min_time_s)
        rows.append(kernel_row("hbm_copy", seconds=seconds, num_bytes=2.0 * x.numel() * 2, note=f"{num_bytes / 2**20:g} MiB"))
    progress(f"memory copies: {len(plan.copy_bytes)} sizes timed")
    return rows


def host_link_rows(plan: ProbePlan, device: torch.device, progress: Callable[[str], None]) -> list[dict]:
    rows = []
    for num_bytes in plan.host_copy_bytes:
        host = torch.empty(int(num_bytes), dtype=torch.uint8, pin_memory=True)
        dev = torch.empty(int(num_bytes), dtype=torch.uint8, device=device)
        h2d = timed_s(lambda: dev.copy_(host, non_blocking=True), device, plan.min_time_s)
        d2h = timed_s(lambda: host.copy_(dev, non_blocking=True), device, plan.min_time_s)
        rows += [host_link_row("h2d", num_bytes, h2d, "pinned"), host_link_row("d2h", num_bytes, d2h, "pinned")]
    if plan.host_copy_bytes:
        progress(f"host link: {len(plan.host_copy_bytes)} sizes timed each way")
    return rows
