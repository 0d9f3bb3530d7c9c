"""FP8 GEMMs by scaling recipe against BF16 on the same shapes: how much of the FP8 gain a
block-scaled recipe keeps on this GPU (needs CUDA and an FP8 GPU; Hopper or later).

    python benchmarks/gpu_fp8_recipes.py --out validation/h200_fp8_recipes.csv [--quick]

Each shape is one GEMM y = x·Wᵀ of ``tokens`` × ``k`` by ``k`` × ``n`` (a linear layer's forward
or input-gradient GEMM at the MLP shapes of Llama 3 8B/70B and DeepSeek-V3, whole and split over
tensor-parallel ranks), timed with CUDA events (gpu_kernels.timed_s: the fastest of three batches
of repeated calls) in BF16 and through ``torch._scaled_mm`` with e4m3 operands and:

* ``tensorwise``: one fp32 scale per tensor (cuBLASLt folds both into the epilogue);
* ``rowwise``: one scale per row of x and per column of Wᵀ (torchao's float8 rowwise recipe);
* ``blockwise``: one scale per 1×128 block of x and per 128×128 block of W, DeepSeek-V3's recipe
  (Transformer Engine Float8BlockScaling): on Hopper the block scales are applied outside the
  tensor-core MMA, every 128 elements of the reduction (DeepSeek-V3 report, Sec. 3.3.2).

Only the GEMM kernels are timed (operands already in fp8; the casts are costed apart). The
weight-gradient GEMM's blockwise form (1×128 blocks along the tokens on both operands) is not
timed. ``autoplan/calibration/kernels.py`` (``recipe_gain_shares``) reads the table: the share of
the tensorwise gain (S − 1)/(S_tensorwise − 1) each recipe keeps, which ``autoplan/cost/fp8.py``
``RECIPE_GAIN_SHARE`` costs.
"""

from __future__ import annotations

import sys

from gpu_common import start, write_table

FIELDS = ["tokens", "k", "n", "recipe", "flops", "seconds", "tflops_per_s", "note"]
# (k, n): Llama 3 8B MLP up (4096 -> 14336) and down, 70B up and down over tp 8, DeepSeek-V3's
# dense MLP up (7168 -> 18432); every k/128 and n/128 a multiple of 4 (the block-scale layout).
SHAPES = ((4096, 14336), (14336, 4096), (8192, 3584), (3584, 8192), (8192, 28672), (7168, 18432))
TOKENS = (4096, 16384)
RECIPES = ("bf16", "tensorwise", "rowwise", "blockwise")


def main(argv=None) -> int:
    started = start("gpu_fp8_recipes", __doc__, "two shapes at 4,096 tokens", argv)
    if started is None:
        return 1
    out, args, meta = started
    import torch

    from gpu_kernels import timed_s

    fp8, bf16 = torch.float8_e4m3fn, torch.bfloat16
    rows = []

    def scaled(a, b, scale_a, scale_b, recipe):
        if recipe != "blockwise":
            return torch._scaled_mm(a, b, scale_a=scale_a, scale_b=scale_b, out_dtype=bf16)
        # Block scales go through the explicit-recipe API (torch.nn.functional.scaled_mm).
        from torch.nn.functional import ScalingType, scaled_mm

        def member(*names):
            return next(getattr(ScalingType, n) for n in names if hasattr(ScalingType, n))

        return scaled_mm(a, b, scale_a, member("BlockWise1x128", "Blockwise_1x128"), scale_b,
                         member("BlockWise128x128", "Blockwise_128x128"), output_dtype=bf16)

    def operands(recipe, m, k, n):
        """(x, Wᵀ, scale of x, scale of Wᵀ) in the layouts the scaled GEMMs take for ``recipe``:
        Wᵀ column-major; 1×128 scales of x (m, k/128) with strides (1, m); 128×128 scales of Wᵀ
        (k/128, n/128) with strides (1, k/128) (what PyTorch 2.11's scaled_mm checks)."""
        x = torch.randn(m, k, device="cuda").to(fp8)
        wt = torch.randn(n, k, device="cuda").to(fp8).t()
        one = {"tensorwise": ((), ()), "rowwise": ((m, 1), (1, n)),
               "blockwise": ((k // 128, m), (n // 128, k // 128))}[recipe]
        sa = torch.ones(one[0], device="cuda")
        sb = torch.ones(one[1], device="cuda")
        if recipe == "blockwise":  # (m, k/128) with strides (1, m); (k/128, n/128) with strides (1, k/128)
            sa, sb = sa.t(), sb.t()
        return x, wt, sa, sb

    shapes = SHAPES[:2] if args.quick else SHAPES
    for tokens in (TOKENS[:1] if args.quick else TOKENS):
        for k, n in shapes:
            flops = 2.0 * tokens * k * n
            for recipe in RECIPES:
                row = {"tokens": tokens, "k": k, "n": n, "recipe": recipe, "flops": f"{flops:.6g}", "seconds": "",
                       "tflops_per_s": "", "note": ""}
                try:
                    if recipe == "bf16":
                        x = torch.randn(tokens, k, device="cuda", dtype=bf16)
                        w = torch.randn(n, k, device="cuda", dtype=bf16)
                        s = timed_s(lambda: x @ w.t())
                    else:
                        x, wt, sa, sb = operands(recipe, tokens, k, n)
                        s = timed_s(lambda: scaled(x, wt, sa, sb, recipe))
                    row.update(seconds=f"{s:.6g}", tflops_per_s=f"{flops / s / 1e12:.1f}")
                except Exception as exc:  # noqa: BLE001 - record, go on
                    row["note"] = f"failed: {exc!s:.600}"
                rows.append(row)
            torch.cuda.empty_cache()
        print(f"tokens {tokens} done", flush=True)
    write_table(out, meta, FIELDS, rows)
    print(f"wrote {len(rows)} rows to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
