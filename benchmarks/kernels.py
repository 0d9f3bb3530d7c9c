"""What the kernels measured on an H100 SXM say about the cost model's physical parameters.

    python benchmarks/kernels.py

Reads validation/h100_sxm_kernels.csv and validation/h100_sxm_llama_layer.csv (measured with
benchmarks/gpu_kernels.py and benchmarks/gpu_layer.py; no GPU needed here) and
validation/h200_moe_layer.csv (benchmarks/gpu_moe_layer.py), h200_kernels.csv and
h200_fp8_recipes.csv (gpu_kernels.py and gpu_fp8_recipes.py on an H200) and h200_host_link.csv
(gpu_host_link.py on an H200), prints the kernel
figures (autoplan/calibration/kernels.py) and sets each shipped Hopper parameter beside the
figure it stands for. A parameter fitted end to end on published runs includes what the kernels
alone do not (other kernels, stalls, a power cap), so a GEMM or attention efficiency above its
kernel's figure, or a fixed GEMM time far above it, marks a parameter that absorbs another
mechanism. A benchmark that prints figures, not a test.
"""

from __future__ import annotations

import statistics

from autoplan.calibration.kernels import (
    FP8_RECIPES_FILES,
    H200_KERNELS_FILE,
    HEAD_DIM_FILE,
    MOE_LAYER_FILES,
    KernelFigures,
    elementwise_bytes_at,
    half_head_dim,
    head_dim_ratios,
    expert_floor_ratios,
    kernel_figures,
    moe_fixed_times,
    read_table,
    recipe_gain_shares,
    shipped_tables,
)
from autoplan.calibration.host_link import HOST_LINK_FILE, shipped_host_link_figures
from autoplan.cost.host_link import HOST_LINK_EFFICIENCY
from autoplan.paths import data_dir
from autoplan.profiles import load_profile
from autoplan.profiles.parameter_files import load_defaults
from autoplan.specs.gpu_generation import generation_of
from autoplan.specs.hardware import load_gpu

# The attention kernel each trainer ran on Hopper in the published rows: Megatron-Core through
# Transformer Engine's fused attention (cuDNN, the default backend on sm90), nanotron through the
# flash-attn 2 package, torchtitan through PyTorch SDPA's FlashAttention-2 backend.
ATTENTION_KERNEL = {"megatron": "cudnn", "nanotron": "flash", "torchtitan": "flash"}


def print_figures(k: KernelFigures) -> None:
    g, f8 = k.gemm_bf16, k.gemm_fp8_tensorwise
    print(f"== Kernels measured on {k.device} (datasheet peaks of hardware_db h100-sxm) ==")
    print(f"BF16 GEMM (linear fwd, dgrad, wgrad; {g.n} timed): eta_max {g.efficiency:.3f}, "
          f"F_half {g.half_flops:.3g} FLOP (fixed {g.fixed_s * 1e6:.1f} us per GEMM); "
          f"fit error median {100 * g.median_error:.1f}%, p90 {100 * g.p90_error:.1f}%")
    print(f"FP8 tensorwise GEMM: {f8.efficiency:.3f} of the BF16 peak for large F "
          f"({f8.efficiency / g.efficiency:.2f}x BF16), fixed {f8.fixed_s * 1e6:.1f} us per GEMM")
    for recipe, s in k.fp8_speedup.items():
        print(f"FP8 {recipe} speed-up over BF16, GEMMs >= 1e11 FLOP: median {s.median:.2f} "
              f"(range {s.low:.2f}-{s.high:.2f}, n={s.n})")
    for backend, a in k.attention.items():
        curve = ", ".join(f"{s}: {v:.2f}" for s, v in a.by_seq.items())
        print(f"attention {backend} fwd+bwd fraction of peak by seq: {curve}; "
              f"fit max {a.max_fraction:.3f}, s_half {a.half_seq:.0f}")
    print(f"HBM copy: {k.hbm_copy_efficiency:.3f} of the datasheet bandwidth")
    for mode, e in k.elementwise.items():
        print(f"element-wise bytes per token·hidden, Llama layer {mode}: forward {e.forward_bytes.median:.1f} "
              f"(range {e.forward_bytes.low:.1f}-{e.forward_bytes.high:.1f}), backward/forward "
              f"{e.backward_ratio.median:.2f} (n={e.forward_bytes.n})")
    print("grouped expert GEMM (h 7168, f 2048) throughput / dense GEMM of the same FLOPs, by tokens per expert:")
    for n in sorted({n for _, n, _, _ in k.grouped}):
        ratios = [(e, r) for e, m, r, _ in k.grouped if m == n and e > 1]
        print(f"  {n:>5} tokens/expert: " + ", ".join(f"E={e}: {r:.2f}" for e, r in ratios))


def _ceilings(k: KernelFigures, attention_kernel: str, hbm_efficiency: float) -> dict[str, float]:
    """Each compared parameter's kernel figure; the element-wise bytes are the compiled layer's,
    expressed at the parameters' HBM efficiency (the cost model divides by it)."""
    compiled = elementwise_bytes_at(k, "compile", hbm_efficiency)
    return {"gemm_efficiency_max": k.gemm_bf16.efficiency, "gemm_half_flops": k.gemm_bf16.half_flops,
            "fp8_gemm_speedup": k.fp8_speedup["tensorwise"].median,
            "attention_efficiency": k.attention[attention_kernel].max_fraction,
            "hbm_efficiency": k.hbm_copy_efficiency, "elementwise_bytes_per_token_hidden": compiled}


def print_parameters(k: KernelFigures) -> None:
    print("\n== Shipped Hopper parameters beside the kernel figures ==")
    print("(defaults.yaml once; then each (trainer, Hopper GPU) pair a profile calibrates; element-wise "
          "bytes beside the compiled layer's)")
    print(f"{'trainer/gpu':<28}{'parameter':<48}{'value':>10}{'kernel':>10}{'ratio':>8}")
    pairs = [("defaults.yaml", load_defaults(), "flash")]
    for trainer in ("megatron", "nanotron", "torchtitan", "llmfoundry", "deepspeed", "hf"):
        for gpu_name, params in load_profile(trainer).parameters.items():
            if gpu_name != "default" and generation_of(load_gpu(gpu_name)) == "hopper":
                pairs.append((f"{trainer}/{gpu_name}", params, ATTENTION_KERNEL.get(trainer, "flash")))
    for pair, params, kernel in pairs:
        for name, measured in _ceilings(k, kernel, params.value("hbm_efficiency")).items():
            value = params.value(name)
            origin = "calibrated" if name in params.fitted else "default"
            print(f"{pair:<28}{f'{name} ({origin})':<48}{value:>10.4g}{measured:>10.4g}{value / measured:>8.2f}")


def print_head_dims() -> None:
    table = read_table(data_dir("validation") / HEAD_DIM_FILE)
    peak = load_gpu("h100-sxm").peak_bf16_flops_per_s
    print(f"attention at head dim 64 over head dim 128, fwd+bwd, 32 heads ({HEAD_DIM_FILE}; costed through "
          "attention_half_head_dim d_0, eff ∝ d/(d + d_0)):")
    for backend, ratios in head_dim_ratios(table, peak).items():
        d0 = half_head_dim(statistics.median(ratios.values()))
        print(f"  {backend}: " + ", ".join(f"seq {s}: {r:.2f}" for s, r in ratios.items()) + f"; d_0 {d0:.1f}")


def print_transfer(h100: KernelFigures) -> None:
    """The H100 figures beside the same benchmark's on an H200 (same die and datasheet BF16 peak):
    what profiles/transfer.py carries unchanged within a generation."""
    h200 = kernel_figures(read_table(data_dir("validation") / H200_KERNELS_FILE), shipped_tables()[1], load_gpu("h200"))
    pairs = [("BF16 GEMM eta_max", h100.gemm_bf16.efficiency, h200.gemm_bf16.efficiency),
             ("BF16 GEMM fixed us per GEMM", h100.gemm_bf16.fixed_s * 1e6, h200.gemm_bf16.fixed_s * 1e6),
             ("FP8 tensorwise speed-up (median)", h100.fp8_speedup["tensorwise"].median, h200.fp8_speedup["tensorwise"].median),
             ("FlashAttention-2 max fraction", h100.attention["flash"].max_fraction, h200.attention["flash"].max_fraction),
             ("cuDNN attention max fraction", h100.attention["cudnn"].max_fraction, h200.attention["cudnn"].max_fraction),
             ("HBM copy fraction of datasheet", h100.hbm_copy_efficiency, h200.hbm_copy_efficiency)]
    print(f"transfer within Hopper: {h100.device} against {h200.device} ({H200_KERNELS_FILE}):")
    for name, a, b in pairs:
        print(f"  {name:<34}{a:>9.3f}{b:>9.3f}{b / a:>7.2f}x")
    for files in [[f] for f in FP8_RECIPES_FILES] + [list(FP8_RECIPES_FILES)]:
        shares = recipe_gain_shares([read_table(data_dir("validation") / f) for f in files])
        print(f"FP8 gain kept by recipe over tensorwise's ({' + '.join(files)}): "
              + ", ".join(f"{r} {s.median:.2f} ({s.low:.2f}-{s.high:.2f}, n={s.n})" for r, s in shares.items()))


def print_moe_layer(k: KernelFigures) -> None:
    intercepts = []
    for name, gpu in MOE_LAYER_FILES.items():
        table = read_table(data_dir("validation") / name)
        fits = moe_fixed_times(table)
        intercepts += [f.fixed_s for f in fits]
        print(f"dropless MoE layer less its expert GEMMs, fwd+bwd ({name}, {table.meta.get('device')}; "
              "t_0 + c·tokens, Theil-Sen):")
        for f in fits:
            print(f"  {f.config}: t_0 {f.fixed_s * 1e3:.2f} ms, {f.seconds_per_token * 1e9:.0f} ns per token")
        ratios = expert_floor_ratios(table, load_gpu(gpu).hbm_bytes_per_s * k.hbm_copy_efficiency)
        print("  expert GEMMs at the fewest tokens over their weights' HBM traffic: "
              + ", ".join(f"{c} {r:.2f}" for c, r in ratios.items()))
    print(f"  median t_0 over both {statistics.median(intercepts) * 1e3:.2f} ms "
          f"(moe_layer_fixed_s default {load_defaults().value('moe_layer_fixed_s') * 1e3:.2f} ms)")


def print_host_link() -> None:
    """The host link's copy rates (validation/h200_host_link.csv) beside HOST_LINK_EFFICIENCY."""
    f = shipped_host_link_figures()
    print(f"\nhost link ({HOST_LINK_FILE}), shares of the datasheet rate per direction:")
    print(f"  pinned, one way {f.one_way:.3f} (HOST_LINK_EFFICIENCY {HOST_LINK_EFFICIENCY}); both ways at once "
          f"{f.both_ways:.3f}; pageable in/out {f.pageable_h2d:.3f}/{f.pageable_d2h:.3f}")
    print(f"  a bf16 GEMM beside copies both ways: {100 * f.gemm_slowdown:.1f}% slower (not costed)")


def main() -> int:
    figures = kernel_figures()
    print_figures(figures)
    print_head_dims()
    print_transfer(figures)
    print_moe_layer(figures)
    print_host_link()
    print_parameters(figures)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
