"""Measure the GPU's host link as offloading uses it, on the GPU this runs on.

Needs PyTorch with CUDA (not an autoplan dependency; nothing in autoplan imports this file). It
times copies between host and device memory and writes one CSV row per measurement (``--out``,
default results/gpu_host_link.csv), headed by the device line (with the PCIe link nvidia-smi
reports):

* ``h2d`` / ``d2h``: one ``Tensor.copy_(non_blocking=True)`` of ``bytes`` between a pinned
  (page-locked) host buffer and device memory, one direction at a time, from 1 MiB to 1 GiB: what
  the optimizer-state and activation offloads move (DeepSpeed's ``pin_memory``; Megatron's
  ``--cpu-offloading`` keeps pinned host tensors). ``note`` = ``pageable`` for a plain host buffer
  (the CUDA driver stages it through its own pinned buffer).
* ``bidirectional``: an h2d and a d2h copy on two streams at once: activation offload sends one
  layer's activations out while the backward brings another's back.
* ``gemm_alone`` / ``gemm_with_copies``: a bf16 GEMM the size of a 8B model's MLP up-projection on
  8,192 tokens, timed alone and while both copy directions run without pause on other streams:
  how far the copy engines' HBM traffic slows the compute they overlap with; ``gb_per_s`` of the
  second row is what the copies moved, both directions together, over the time they ran.

autoplan/calibration/kernels.py reads the table (``host_link_figures``): the payload fraction of
the datasheet link rate one direction reaches at large copies is the cost model's
HOST_LINK_EFFICIENCY (autoplan/cost/host_link.py).

Run: ``python benchmarks/gpu_host_link.py --out results/gpu_host_link.csv`` (under a minute).
``--quick`` runs a few sizes to check the script.
"""

from __future__ import annotations

import subprocess
import time

from gpu_common import start, write_table

try:
    import torch
except ImportError:
    raise SystemExit("gpu_host_link: needs PyTorch with CUDA (pip install torch)") from None

FIELDS = ("kind", "bytes", "seconds", "gb_per_s", "flops", "tflops_per_s", "note")
MiB = 1 << 20
SIZES = tuple(MiB << i for i in range(0, 11, 1))  # 1 MiB .. 1 GiB
QUICK_SIZES = (MiB, 64 * MiB)


def pcie_line() -> str:
    """nvidia-smi's PCIe link generation and width, current and maximum ('' where it fails)."""
    query = "pcie.link.gen.current,pcie.link.gen.max,pcie.link.width.current,pcie.link.width.max"
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30)
        return out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def copy_s(dst: torch.Tensor, src: torch.Tensor, batches: int = 5) -> float:
    """Seconds per copy of ``src`` into ``dst``: the fastest of ``batches`` batches, each of
    enough back-to-back copies to last ~50 ms, timed with CUDA events on one stream."""
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        dst.copy_(src, non_blocking=True)
    stream.synchronize()
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    best = float("inf")
    reps = 1
    for _ in range(batches):
        with torch.cuda.stream(stream):
            begin.record(stream)
            for _ in range(reps):
                dst.copy_(src, non_blocking=True)
            end.record(stream)
        end.synchronize()
        one = begin.elapsed_time(end) / 1e3 / reps
        best = min(best, one)
        reps = int(min(500, max(1, 0.05 / max(one, 1e-6))))
    return best


def row(kind: str, bytes_: float = 0.0, seconds: float = 0.0, flops: float = 0.0, note: str = "") -> dict:
    return {"kind": kind, "bytes": f"{bytes_:.6g}", "seconds": f"{seconds:.6g}",
            "gb_per_s": f"{bytes_ / seconds / 1e9:.2f}" if bytes_ and seconds else "",
            "flops": f"{flops:.6g}", "tflops_per_s": f"{flops / seconds / 1e12:.1f}" if flops and seconds else "",
            "note": note}


def one_way(rows: list, sizes) -> None:
    for size in sizes:
        n = size // 2  # bf16 elements
        host = torch.empty(n, dtype=torch.bfloat16, pin_memory=True).fill_(1.0)
        dev = torch.empty(n, dtype=torch.bfloat16, device="cuda")
        rows.append(row("h2d", size, copy_s(dev, host), note="pinned"))
        rows.append(row("d2h", size, copy_s(host, dev), note="pinned"))
    size = sizes[-1]
    plain = torch.ones(size // 2, dtype=torch.bfloat16)
    dev = torch.empty(size // 2, dtype=torch.bfloat16, device="cuda")
    rows.append(row("h2d", size, copy_s(dev, plain, batches=3), note="pageable"))
    rows.append(row("d2h", size, copy_s(plain, dev, batches=3), note="pageable"))


def copy_pair(size: int):
    """A function that queues one ``size``-byte copy each way (pinned host buffers), on two streams."""
    n = size // 2
    h_in = torch.empty(n, dtype=torch.bfloat16, pin_memory=True).fill_(1.0)
    h_out = torch.empty(n, dtype=torch.bfloat16, pin_memory=True)
    d_in, d_out = (torch.empty(n, dtype=torch.bfloat16, device="cuda") for _ in range(2))
    up, down = torch.cuda.Stream(), torch.cuda.Stream()

    def both() -> None:
        with torch.cuda.stream(up):
            d_in.copy_(h_in, non_blocking=True)
        with torch.cuda.stream(down):
            h_out.copy_(d_out, non_blocking=True)
    return both


def both_ways(rows: list, size: int, seconds: float = 1.0) -> None:
    """Copies in both directions on two streams for ``seconds`` of wall time: bytes per second of
    the two together."""
    both = copy_pair(size)
    count = max(2, int(seconds / (size / 40e9)))
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(count):
        both()
    torch.cuda.synchronize()
    wall = time.perf_counter() - t0
    rows.append(row("bidirectional", 2.0 * count * size, wall, note="both directions together, pinned"))


def gemm_under_copies(rows: list, tokens: int = 8192, h: int = 4096, f: int = 14336,
                      copy_bytes: int = 256 * MiB) -> None:
    """The same GEMM timed alone and with both copy directions kept busy on other streams."""
    a = torch.randn(tokens, h, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(h, f, device="cuda", dtype=torch.bfloat16)
    flops = 2.0 * tokens * h * f
    for _ in range(5):
        a @ w
    torch.cuda.synchronize()

    def gemms(reps: int) -> float:
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        for _ in range(reps):
            a @ w
        end.record()
        end.synchronize()
        return begin.elapsed_time(end) / 1e3 / reps

    reps = 200
    alone = min(gemms(reps) for _ in range(3))
    rows.append(row("gemm_alone", seconds=alone, flops=flops, note=f"{tokens}x{h}x{f} bf16"))
    both = copy_pair(copy_bytes)
    copies = int(3 * alone * reps / (copy_bytes / 40e9)) + 2  # outlast the GEMMs
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(copies):
        both()
    during = gemms(reps)
    torch.cuda.synchronize()
    wall = time.perf_counter() - t0
    slowed = row("gemm_with_copies", seconds=during, flops=flops,
                 note=f"{tokens}x{h}x{f} bf16; gb_per_s: the copies, both directions, over their {wall:.2f} s")
    slowed.update(bytes=f"{2.0 * copies * copy_bytes:.6g}", gb_per_s=f"{2.0 * copies * copy_bytes / wall / 1e9:.2f}")
    rows.append(slowed)


def main(argv=None) -> None:
    started = start("gpu_host_link", __doc__, "a few sizes only, to check the script", argv)
    if started is None:
        return
    out, args, meta = started
    meta["pcie"] = pcie_line()
    rows: list[dict] = []
    sizes = QUICK_SIZES if args.quick else SIZES
    one_way(rows, sizes)
    both_ways(rows, sizes[-1] if args.quick else 256 * MiB, seconds=0.2 if args.quick else 1.0)
    gemm_under_copies(rows)
    write_table(out, meta, FIELDS, rows)
    for r in rows:
        print(",".join(str(r[f]) for f in FIELDS))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
