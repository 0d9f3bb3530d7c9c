"""Time one Llama decoder layer on the GPU this runs on, kernel by kernel, to check how the cost
model composes a layer's time (GEMMs + attention + memory-bound element-wise work).

Needs PyTorch with CUDA (not an autoplan dependency). The layer is written here in plain PyTorch
the way eager Llama implementations write it (RMSNorm in fp32, rotary embedding, grouped-query
SDPA attention, SwiGLU MLP, residual adds: Hugging Face ``modeling_llama.py``, torchtitan
``models/llama3/model.py``), run eager and under ``torch.compile`` (torchtitan's per-block
compile). For each (shape, mode, pass) it writes the wall time per iteration and the GPU kernel
time by kind (``gemm``, ``attention``, ``elementwise``: the rest) from the PyTorch profiler, so
that autoplan/calibration/kernels.py can read off the element-wise HBM bytes per token and hidden
unit (``elementwise_bytes_per_token_hidden``) and the share of the layer the GEMMs and attention
take.

Run: ``python benchmarks/gpu_layer.py --out results/gpu_layer.csv`` (about a minute on an H100).
"""

from __future__ import annotations

import json
import time

from gpu_common import start, write_table

try:
    import torch
    import torch.nn.functional as F
    from torch import nn
except ImportError:
    raise SystemExit("gpu_layer: needs PyTorch with CUDA (pip install torch)") from None

FIELDS = ("model", "hidden", "heads", "kv_heads", "ffn", "seq", "mbs", "mode", "pass",
          "wall_s", "gemm_s", "attention_s", "elementwise_s", "elementwise_kernels", "note")
SHAPES = {  # Llama 3.2 1B and Llama 3.1 8B layers (the Ultra-Scale Playbook sweep's models)
    "llama-1b": dict(hidden=2048, heads=32, kv_heads=8, ffn=8192),
    "llama-8b": dict(hidden=4096, heads=32, kv_heads=8, ffn=14336),
}


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class Layer(nn.Module):
    def __init__(self, hidden: int, heads: int, kv_heads: int, ffn: int):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, hidden // heads
        self.attn_norm, self.mlp_norm = RMSNorm(hidden), RMSNorm(hidden)
        self.q = nn.Linear(hidden, hidden, bias=False)
        self.k = nn.Linear(hidden, kv_heads * self.head_dim, bias=False)
        self.v = nn.Linear(hidden, kv_heads * self.head_dim, bias=False)
        self.o = nn.Linear(hidden, hidden, bias=False)
        self.gate = nn.Linear(hidden, ffn, bias=False)
        self.up = nn.Linear(hidden, ffn, bias=False)
        self.down = nn.Linear(ffn, hidden, bias=False)

    def forward(self, x, cos, sin):
        b, s, _ = x.shape
        h = self.attn_norm(x)
        q = self.q(h).view(b, s, self.heads, self.head_dim).transpose(1, 2)
        k = self.k(h).view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v(h).view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        x = x + self.o(a.transpose(1, 2).reshape(b, s, -1))
        h = self.mlp_norm(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


def kind_of(name: str) -> str:
    n = name.lower()
    if "flash" in n or "fmha" in n or "attention" in n or "sdpa" in n:
        return "attention"
    if any(t in n for t in ("gemm", "nvjet", "xmma", "cutlass", "sm90_", "cublas", "matmul")):
        return "gemm"
    return "elementwise"


def profile_kinds(fn, iters: int = 3) -> tuple[dict[str, float], int]:
    """GPU kernel seconds per iteration by kind, and element-wise kernels per iteration."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(iters):
            fn()
        torch.cuda.synchronize()
    seconds = {"gemm": 0.0, "attention": 0.0, "elementwise": 0.0}
    count = 0
    for ev in prof.events():
        if ev.device_type != torch.autograd.DeviceType.CUDA:
            continue  # CPU ops: their kernels are counted as the CUDA events below
        kind = kind_of(ev.name)
        seconds[kind] += ev.time_range.elapsed_us() / 1e6 / iters
        count += kind == "elementwise"
    return seconds, count // iters


def wall_s(fn, iters: int = 10) -> float:
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(iters):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / iters


def layer_inputs(shape: dict, seq: int, mbs: int):
    """A layer's input (requiring grad), its rotary cos and sin, and an output gradient, in bf16."""
    hd = shape["hidden"] // shape["heads"]
    x = torch.randn(mbs, seq, shape["hidden"], device="cuda", dtype=torch.bfloat16, requires_grad=True)
    angles = torch.randn(seq, hd // 2, device="cuda")
    cos = torch.cat([angles.cos()] * 2, -1).to(torch.bfloat16)
    sin = torch.cat([angles.sin()] * 2, -1).to(torch.bfloat16)
    return x, cos, sin, torch.randn_like(x)


def measure(model_name: str, shape: dict, seq: int, mbs: int, mode: str) -> list[dict]:
    layer = Layer(**shape).cuda().to(torch.bfloat16)
    run = torch.compile(layer) if mode == "compile" else layer
    x, cos, sin, grad = layer_inputs(shape, seq, mbs)

    def forward():
        with torch.no_grad():
            run(x, cos, sin)

    def both():
        run(x, cos, sin).backward(grad)

    rows = []
    for name, fn in (("fwd", forward), ("fwd+bwd", both)):
        t = wall_s(fn)
        kinds, count = profile_kinds(fn)
        rows.append({"model": model_name, **shape, "seq": seq, "mbs": mbs, "mode": mode, "pass": name,
                     "wall_s": f"{t:.6g}", "gemm_s": f"{kinds['gemm']:.6g}",
                     "attention_s": f"{kinds['attention']:.6g}",
                     "elementwise_s": f"{kinds['elementwise']:.6g}", "elementwise_kernels": count, "note": ""})
        print(json.dumps(rows[-1]), flush=True)
    return rows


def main(argv=None) -> int:
    started = start("gpu_layer", __doc__, "one small case, to check the script", argv)
    if started is None:
        return 2
    out, args, meta = started
    quick = args.quick
    cases = [("llama-1b", 2048, 1, "eager")] if quick else [
        (m, 4096, mbs, "eager") for m in SHAPES for mbs in (1, 4)] + [
        ("llama-1b", 4096, 4, "compile"), ("llama-8b", 4096, 1, "compile")]
    rows: list[dict] = []
    for model_name, seq, mbs, mode in cases:
        try:
            rows += measure(model_name, SHAPES[model_name], seq, mbs, mode)
        except Exception as exc:  # noqa: BLE001 - record, go on
            rows.append({"model": model_name, "seq": seq, "mbs": mbs, "mode": mode, "note": f"failed: {exc!s:.150}"})
            print(rows[-1], flush=True)
        torch.cuda.empty_cache()
        write_table(out, meta, FIELDS, rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
