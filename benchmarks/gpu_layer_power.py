"""A Llama layer's forward + backward in a burst after an idle pause and sustained for seconds,
with the board power and SM clock (needs CUDA and nvidia-smi; reads the GPU's state only).

    python benchmarks/gpu_layer_power.py --out validation/h200_layer_power.csv [--quick]

The kernel tables (gpu_kernels.py, gpu_layer.py) time short loops, which run at the burst clock;
a training step runs its kernels back to back for seconds, at the clock the power limit allows
for the mix of GEMMs, attention and memory-bound work. Each row: the layer shape and mode (eager;
``torch.compile`` unless --quick), the seconds per fwd+bwd in a burst of BURST_STEPS after a
pause and over the steady window of a SUSTAIN_S run, their ratio, and the median power and SM
clock over the steady window. The layer is gpu_layer.py's (a stack of LAYERS copies, so that
one step is long enough to time).
"""

from __future__ import annotations

import sys
import time

from gpu_common import start, write_table
from gpu_layer import SHAPES, Layer, layer_inputs
from gpu_power import Sampler, reasons_field, steady

FIELDS = ["model", "hidden", "ffn", "seq", "mbs", "layers", "mode", "burst_step_s", "sustained_step_s",
          "sustained_over_burst", "power_w", "sm_clock_mhz", "temperature_c", "samples", "reasons"]
LAYERS = 4
BURST_STEPS = 2
IDLE_PAUSE_S = 3.0


def run(torch, name: str, shape: dict, seq: int, mbs: int, mode: str, sustain_s: float, reasons: str) -> dict:
    stack = torch.nn.ModuleList([Layer(**shape) for _ in range(LAYERS)]).cuda().to(torch.bfloat16)
    layers = [torch.compile(layer) if mode == "compile" else layer for layer in stack]
    x, cos, sin, grad = layer_inputs(shape, seq, mbs)

    def step():
        y = x
        for layer in layers:
            y = layer(y, cos, sin)
        y.backward(grad)

    for _ in range(3):
        step()
    torch.cuda.synchronize()
    time.sleep(IDLE_PAUSE_S)
    t0 = time.perf_counter()
    for _ in range(BURST_STEPS):
        step()
    torch.cuda.synchronize()
    burst = (time.perf_counter() - t0) / BURST_STEPS
    sampler = Sampler(reasons)
    t_end, t_steady = time.monotonic() + sustain_s, time.monotonic() + 0.4 * sustain_s
    steps, t_start = 0, None
    while time.monotonic() < t_end:
        if t_start is None and time.monotonic() >= t_steady:
            torch.cuda.synchronize()
            t_start, steps = time.perf_counter(), 0
        step()
        steps += 1
    torch.cuda.synchronize()
    sustained = (time.perf_counter() - t_start) / steps
    power, clock, temp, n_samples, active = steady(sampler.stop())
    return {"model": name, "hidden": shape["hidden"], "ffn": shape["ffn"], "seq": seq, "mbs": mbs,
            "layers": LAYERS, "mode": mode, "burst_step_s": round(burst, 6), "sustained_step_s": round(sustained, 6),
            "sustained_over_burst": round(burst / sustained, 4), "power_w": power, "sm_clock_mhz": clock,
            "temperature_c": temp, "samples": n_samples, "reasons": active}


def main(argv=None) -> int:
    started = start("gpu_layer_power", __doc__, "eager only, 8 s per run", argv)
    if started is None:
        return 1
    out, args, meta = started
    import torch

    reasons = reasons_field()
    sustain_s = 8.0 if args.quick else 15.0
    rows = []
    for mode in ("eager",) if args.quick else ("eager", "compile"):
        for name, mbs in (("llama-8b", 1), ("llama-1b", 2)):
            rows.append(run(torch, name, SHAPES[name], 4096, mbs, mode, sustain_s, reasons))
            print(rows[-1], flush=True)
    write_table(out, meta, FIELDS, rows)
    print(f"wrote {out} ({len(rows)} rows)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
