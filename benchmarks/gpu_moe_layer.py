"""A dropless MoE layer's forward + backward against its expert GEMMs alone, over token counts:
the fixed time per MoE layer and micro-batch that does not shrink with the tokens (needs CUDA).

    python benchmarks/gpu_moe_layer.py --out validation/h200_moe_layer.csv [--quick]

The layer is written the way Megatron-Core's alltoall dispatcher runs it at ep 1 (its
megatron/core/transformer/moe/{router,token_dispatcher,moe_utils,experts}.py), in eager PyTorch:
router GEMM, softmax in fp32, top-k and renormalisation, the load-balancing auxiliary loss from
the tokens per expert, the copy of the tokens per expert to the host (dropless routing sizes the
grouped GEMM from it, so the host waits for the GPU there), the permutation (a stable sort of
the expert ids, index_select of the token copies), the grouped GEMMs (``torch._grouped_mm``, gate
and up projections as one, SwiGLU, down projection), the weighting by the router probabilities
and the unpermutation (index_add). The ``experts`` rows time the grouped GEMMs and SwiGLU alone
on already permuted tokens with the same counts. Each row: seconds per forward + backward (CUDA
events over repeated calls, the fastest of three batches). ``autoplan/calibration/kernels.py``
(``moe_fixed_time``) fits layer − experts = t_0 + c·tokens per configuration; t_0 is the fixed time.
Megatron-Core fuses some of these steps (--moe-permute-fusion, --moe-router-fusion), so its
kernel count, and with a host-bound layer its fixed time, is lower than this eager layer's.
"""

from __future__ import annotations

import platform
import sys

from gpu_common import start, write_table

FIELDS = ["config", "hidden", "experts", "top_k", "ffn_expert", "tokens", "part", "seconds", "note"]
# (hidden, experts on the GPU, top-k, expert ffn): Mixtral 8x7B; Qwen3-30B-A3B; Llama 4 Scout's routed experts.
CONFIGS = {"mixtral-8x7b": (4096, 8, 2, 14336), "qwen3-30b-a3b": (2048, 128, 8, 768),
           "llama4-scout": (5120, 16, 1, 8192)}
TOKENS = (128, 256, 512, 1024, 2048, 4096, 8192, 16384)
QUICK_TOKENS = (256, 1024, 4096)


def host_cpu() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def main(argv=None) -> int:
    started = start("gpu_moe_layer", __doc__, "three token counts per configuration", argv)
    if started is None:
        return 1
    out, args, meta = started
    import torch
    import torch.nn.functional as F

    from gpu_kernels import timed_s

    meta["host_cpu"] = host_cpu()
    bf16 = torch.bfloat16
    rows = []

    def grouped(x, w, offs):
        return torch._grouped_mm(x, w.transpose(-2, -1), offs=offs, out_dtype=bf16)

    for name, (h, experts, k, f) in CONFIGS.items():
        g = torch.Generator(device="cuda").manual_seed(0)
        router = (torch.randn(h, experts, device="cuda", generator=g) * h ** -0.5).to(bf16).requires_grad_()
        w1 = (torch.randn(experts, 2 * f, h, device="cuda", generator=g) * h ** -0.5).to(bf16).requires_grad_()
        w2 = (torch.randn(experts, h, f, device="cuda", generator=g) * f ** -0.5).to(bf16).requires_grad_()

        def experts_fwd(xp, offs):
            gate, up = grouped(xp, w1, offs).chunk(2, dim=-1)
            return grouped(F.silu(gate) * up, w2, offs)

        def layer(x):
            probs = torch.softmax((x @ router).float(), dim=-1)
            top_p, top_i = probs.topk(k, dim=-1)
            top_p = top_p / top_p.sum(dim=-1, keepdim=True)
            counts = torch.bincount(top_i.flatten(), minlength=experts)
            aux = experts * torch.sum(counts.float() / top_i.numel() * probs.mean(dim=0))
            counts.cpu()  # dropless: the host needs the split sizes before the grouped GEMM
            order = torch.argsort(top_i.flatten(), stable=True)
            source = order // k
            offs = torch.cumsum(counts, 0).to(torch.int32)
            y = experts_fwd(x.index_select(0, source), offs) * top_p.flatten()[order].unsqueeze(-1).to(bf16)
            return torch.zeros_like(x).index_add(0, source, y), aux

        for tokens in (QUICK_TOKENS if args.quick else TOKENS):
            x = torch.randn(tokens, h, device="cuda", dtype=bf16, generator=g).requires_grad_()
            grad = torch.randn(tokens, h, device="cuda", dtype=bf16, generator=g)
            common = {"config": name, "hidden": h, "experts": experts, "top_k": k, "ffn_expert": f, "tokens": tokens}
            try:
                def step():
                    y, aux = layer(x)
                    torch.autograd.backward((y, aux), (grad, torch.ones((), device="cuda")))
                rows.append({**common, "part": "layer", "seconds": f"{timed_s(step):.6g}", "note": ""})
                with torch.no_grad():  # the same routing as the layer's, balanced as it happens
                    top_i = torch.softmax((x @ router).float(), dim=-1).topk(k, dim=-1).indices
                    counts = torch.bincount(top_i.flatten(), minlength=experts)
                    offs = torch.cumsum(counts, 0).to(torch.int32)
                xp = torch.randn(tokens * k, h, device="cuda", dtype=bf16, generator=g).requires_grad_()
                grad_p = torch.randn(tokens * k, h, device="cuda", dtype=bf16, generator=g)
                rows.append({**common, "part": "experts",
                             "seconds": f"{timed_s(lambda: experts_fwd(xp, offs).backward(grad_p)):.6g}", "note": ""})
            except Exception as exc:  # noqa: BLE001 - record, go on
                rows.append({**common, "part": "layer", "seconds": "", "note": f"failed: {exc!s:.120}"})
            x.grad = None
            for w in (router, w1, w2):
                w.grad = None
        print(f"{name} done", flush=True)
        x = xp = grad = grad_p = None
        torch.cuda.empty_cache()
    write_table(out, meta, FIELDS, rows)
    print(f"wrote {len(rows)} rows to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
