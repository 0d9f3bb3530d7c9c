"""Measure the kernel efficiencies the cost model assumes, on the GPU this runs on.

Needs PyTorch with CUDA (not an autoplan dependency; nothing in autoplan imports this file). It
times, with CUDA events, the kernels a transformer layer is made of and writes one CSV row per
measurement (``--out``, default results/gpu_kernels.csv):

* ``gemm_bf16``: a linear layer's three GEMMs (forward y = x·Wᵀ, input gradient dx = dy·W,
  weight gradient dW = dyᵀ·x) at the MLP's up- and down-projection shapes of models with hidden
  size h, ffn 3.5·h, split over tp ranks, for a micro-batch of ``tokens`` tokens. The cost model's
  η(F) = η_max·F/(F + F_half) (autoplan/cost/time.py gemm_efficiency) is fitted to these rows by
  autoplan/calibration/kernels.py.
* ``gemm_fp8_tensorwise`` / ``gemm_fp8_rowwise``: the same three GEMMs through
  ``torch._scaled_mm`` with e4m3 operands (one scale per tensor, or per row and per column: the
  torchao float8 recipes torchtitan runs), the GEMM kernels alone; ``fp8_cast``: the amax, scale
  and cast of one bf16 operand to e4m3 (tensorwise) in unfused eager PyTorch, an upper bound on
  what the trainers' fused casts cost (not read by autoplan/calibration/kernels.py).
* ``attention_flash`` / ``attention_cudnn``: causal scaled-dot-product attention, forward and
  forward + backward, through PyTorch's FlashAttention-2 and cuDNN backends, FLOPs counted as the
  causal half of 4·s²·heads·d per sequence forward and 2.5× that backward (Dao 2023,
  FlashAttention-2, Sec. 4.1 counting).
* ``grouped_gemm``: ``torch._grouped_mm`` over E local experts with n tokens each (the MoE
  expert GEMM), beside one dense GEMM of the same total FLOPs.
* ``hbm_copy``: a device-to-device copy, bytes read + written per second.

Run: ``python benchmarks/gpu_kernels.py --out results/gpu_kernels.csv`` (about 90 seconds on an
H100). ``--quick`` runs a few small shapes to check the script; ``--attention-head-dims 64,128``
times only attention, at those head dims (validation/h100_sxm_attention_head_dim.csv).
"""

from __future__ import annotations

import json
import subprocess

from gpu_common import start, write_table

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    raise SystemExit("gpu_kernels: needs PyTorch with CUDA (pip install torch)") from None

FIELDS = ("kind", "h", "tp", "tokens", "m", "n", "k", "experts", "seq", "heads", "head_dim",
          "pass", "flops", "bytes", "seconds", "tflops_per_s", "gb_per_s", "note")
E4M3_MAX = 448.0


def timed_s(fn, min_time_s: float = 0.03, batches: int = 3) -> float:
    """Seconds per call of ``fn``: the fastest of ``batches`` batches of repeated calls, each
    batch long enough (``min_time_s``) to hide the event resolution."""
    for _ in range(2):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    end.synchronize()
    one = max(start.elapsed_time(end) / 1e3, 1e-6)
    reps = int(min(200, max(3, min_time_s / one)))
    best = float("inf")
    for _ in range(batches):
        start.record()
        for _ in range(reps):
            fn()
        end.record()
        end.synchronize()
        best = min(best, start.elapsed_time(end) / 1e3 / reps)
    return best


def row(kind: str, flops: float = 0.0, seconds: float = 0.0, bytes_: float = 0.0, **kw) -> dict:
    out = {f: "" for f in FIELDS}
    out.update(kind=kind, flops=f"{flops:.6g}", bytes=f"{bytes_:.6g}", seconds=f"{seconds:.6g}",
               tflops_per_s=f"{flops / seconds / 1e12:.2f}" if flops and seconds else "",
               gb_per_s=f"{bytes_ / seconds / 1e9:.1f}" if bytes_ and seconds else "")
    out.update({k: v for k, v in kw.items()})
    return out


def linear_gemms(m: int, n: int, k: int):
    """The forward, input-gradient and weight-gradient products of a linear layer with a (m, k)
    input and an (n, k) weight, as (name, a, b) with the product a @ b."""
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    dy = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
    return [("fwd", x, w.t()), ("dgrad", dy, w), ("wgrad", dy.t(), x)]


def to_e4m3(t: torch.Tensor, rowwise_dim: int | None):
    """``t`` cast to e4m3 with its scale: one per tensor, or one per slice along ``rowwise_dim``."""
    t = t.float()
    if rowwise_dim is None:
        amax = t.abs().max().clamp(min=1e-12)
    else:
        amax = t.abs().amax(dim=rowwise_dim, keepdim=True).clamp(min=1e-12)
    scale = E4M3_MAX / amax
    return (t * scale).to(torch.float8_e4m3fn), (1.0 / scale).float()


def fp8_operands(a: torch.Tensor, b: torch.Tensor, rowwise: bool):
    """a (m, k) row-major and b (k, n) column-major in e4m3, as torch._scaled_mm takes them."""
    a8, sa = to_e4m3(a.contiguous(), 1 if rowwise else None)
    bt = b.t().contiguous()  # (n, k) row-major, so bt.t() is (k, n) column-major
    b8, sb = to_e4m3(bt, 1 if rowwise else None)
    return a8, b8.t(), sa, (sb.t() if rowwise else sb)


def bench_gemms(rows: list, h_values, tp_values, token_values, quick: bool):
    for h in h_values:
        f = int(3.5 * h)
        for tp in tp_values:
            for tokens in token_values:
                for proj, n, k in (("up", f // tp, h), ("down", h, f // tp)):
                    for name, a, b in linear_gemms(tokens, n, k):
                        m_, k_, n_ = a.shape[0], a.shape[1], b.shape[1]
                        flops = 2.0 * m_ * n_ * k_
                        common = dict(h=h, tp=tp, tokens=tokens, m=m_, n=n_, k=k_, note=proj)
                        s = timed_s(lambda a=a, b=b: a @ b)
                        rows.append(row("gemm_bf16", flops, s, **common, **{"pass": name}))
                        for recipe, rowwise in (("tensorwise", False), ("rowwise", True)):
                            try:
                                a8, b8, sa, sb = fp8_operands(a, b, rowwise)
                                s8 = timed_s(lambda: torch._scaled_mm(a8, b8, scale_a=sa, scale_b=sb,
                                                                      out_dtype=torch.bfloat16))
                                rows.append(row(f"gemm_fp8_{recipe}", flops, s8, **common, **{"pass": name}))
                            except Exception as exc:  # noqa: BLE001 - record, go on
                                failed = {**common, "pass": name, "note": f"{proj} failed: {exc!s:.120}"}
                                rows.append(row(f"gemm_fp8_{recipe}", flops, 0.0, **failed))
                        if name == "fwd" and proj == "up":
                            x = a.contiguous()
                            sc = timed_s(lambda x=x: to_e4m3(x, None))
                            rows.append(row("fp8_cast", 0.0, sc, bytes_=x.numel() * 2.0, **common, **{"pass": "cast"}))
                    torch.cuda.empty_cache()
            print(f"gemm h={h} done", flush=True)
            if quick:
                break


def bench_attention(rows: list, seqs, heads_values, tokens_per_batch: int, head_dim: int = 128):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    for backend_name, backend in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
        for s in seqs:
            for heads in heads_values:
                batch = max(1, tokens_per_batch // s)
                shape = (batch, heads, s, head_dim)
                q, k, v = (torch.randn(shape, device="cuda", dtype=torch.bfloat16, requires_grad=True)
                           for _ in range(3))
                grad = torch.randn(shape, device="cuda", dtype=torch.bfloat16)
                fwd_flops = 4.0 * batch * s * s * heads * head_dim / 2.0
                common = dict(seq=s, heads=heads, head_dim=head_dim, tokens=batch * s)
                try:
                    with sdpa_kernel(backend):
                        def forward():
                            with torch.no_grad():
                                F.scaled_dot_product_attention(q, k, v, is_causal=True)

                        def both():
                            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                            out.backward(grad)

                        t_f = timed_s(forward)
                        t_fb = timed_s(both)
                    rows.append(row(f"attention_{backend_name}", fwd_flops, t_f, **common, **{"pass": "fwd"}))
                    rows.append(row(f"attention_{backend_name}", 3.5 * fwd_flops, t_fb, **common,
                                    **{"pass": "fwd+bwd"}))
                except Exception as exc:  # noqa: BLE001 - record, go on
                    rows.append(row(f"attention_{backend_name}", fwd_flops, 0.0, **common,
                                    note=f"failed: {exc!s:.120}"))
        torch.cuda.empty_cache()
        print(f"attention {backend_name} done", flush=True)


def bench_grouped(rows: list, h: int, f_expert: int, experts_values, tokens_per_expert_values):
    for experts in experts_values:
        for n_tok in tokens_per_expert_values:
            total = experts * n_tok
            x = torch.randn(total, h, device="cuda", dtype=torch.bfloat16)
            w = torch.randn(experts, f_expert, h, device="cuda", dtype=torch.bfloat16)
            offs = torch.arange(1, experts + 1, device="cuda", dtype=torch.int32) * n_tok
            flops = 2.0 * total * h * f_expert
            common = dict(h=h, n=f_expert, k=h, m=total, experts=experts, tokens=n_tok)
            try:
                s = timed_s(lambda: torch._grouped_mm(x, w.transpose(-2, -1), offs=offs, out_dtype=torch.bfloat16))
                rows.append(row("grouped_gemm", flops, s, **common, **{"pass": "fwd"}))
            except Exception as exc:  # noqa: BLE001 - record, go on
                rows.append(row("grouped_gemm", flops, 0.0, **common, note=f"failed: {exc!s:.120}"))
            w0 = w[0].t()
            s1 = timed_s(lambda: x @ w0)  # one dense GEMM over every expert's tokens
            rows.append(row("grouped_gemm_dense_equivalent", flops, s1, **common, **{"pass": "fwd"}))
            x1 = x[:n_tok]
            s_one = timed_s(lambda: x1 @ w0)  # one expert's GEMM alone
            rows.append(row("grouped_gemm_one_expert", 2.0 * n_tok * h * f_expert, s_one, **common, **{"pass": "fwd"}))
        torch.cuda.empty_cache()
    print("grouped gemm done", flush=True)


def bench_copy(rows: list, gib: float):
    n = int(gib * 2**30 / 2)
    x = torch.empty(n, device="cuda", dtype=torch.bfloat16)
    y = torch.empty_like(x)
    s = timed_s(lambda: y.copy_(x))
    rows.append(row("hbm_copy", 0.0, s, bytes_=2.0 * n * 2, note=f"{gib} GiB"))


def gpu_state() -> dict:
    query = "name,power.limit,power.max_limit,clocks.sm,clocks.max.sm,clocks.mem,temperature.gpu"
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20).stdout.strip()
    except Exception as exc:  # noqa: BLE001
        out = f"nvidia-smi failed: {exc}"
    return {"nvidia_smi": out}


def main(argv=None) -> int:
    only = ("--attention-head-dims", {"default": "", "help": "time only causal attention, at these "
                                      "comma-separated head dims (e.g. 64,128)"})
    started = start("gpu_kernels", __doc__, "a few small shapes, to check the script", argv, (only,))
    if started is None:
        return 2
    out, args, meta = started
    quick = args.quick
    meta["before"] = gpu_state()
    print(json.dumps(meta), flush=True)
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = True
    rows: list[dict] = []
    sections = [
        lambda: bench_copy(rows, 0.25 if quick else 2.0),
        lambda: bench_gemms(rows, [1024] if quick else [1024, 2048, 4096, 8192],
                            [1, 8] if quick else [1, 2, 4, 8],
                            [1024] if quick else [1024, 4096, 16384], quick),
        lambda: bench_attention(rows, [1024] if quick else [1024, 2048, 4096, 8192, 16384, 32768],
                                [8] if quick else [8, 32], 2048 if quick else 32768),
        lambda: bench_grouped(rows, 7168, 2048, [4] if quick else [1, 4, 8, 16, 32],
                              [128] if quick else [64, 256, 1024, 4096]),
        lambda: bench_copy(rows, 0.25 if quick else 2.0),
    ]
    if args.attention_head_dims:
        dims = [int(d) for d in args.attention_head_dims.split(",")]
        sections = [lambda d=d: bench_attention(rows, [1024, 2048, 4096, 8192, 16384], [32], 32768, d)
                    for d in dims]
    for i, section in enumerate(sections + [lambda: meta.update(after=gpu_state())]):
        try:
            section()
        except Exception as exc:  # noqa: BLE001 - keep what the other sections measured
            print(f"section {i} failed: {exc!r}", flush=True)
        write_table(out, meta, FIELDS, rows)
    print(json.dumps(meta["after"]), flush=True)
    for kind in sorted({r["kind"] for r in rows}):
        values = [float(r["tflops_per_s"] or r["gb_per_s"] or 0) for r in rows if r["kind"] == kind]
        print(f"{kind:32s} n={len(values):3d} max={max(values):8.1f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
