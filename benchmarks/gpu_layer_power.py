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

from gpu_common import start, write_table
from gpu_layer import SHAPES, Layer, layer_inputs
from gpu_power import STEADY_FIELDS, burst_and_sustained, reasons_field

FIELDS = ["model", "hidden", "ffn", "seq", "mbs", "layers", "mode", "burst_step_s", "sustained_step_s",
          "sustained_over_burst", "power_w", "sm_clock_mhz", "temperature_c", "samples", "reasons"]
LAYERS = 4
BURST_STEPS = 2


def run(torch, name: str, shape: dict, seq: int, mbs: int, mode: str, sustain_s: float, reasons: str) -> dict:
    stack = torch.nn.ModuleList([Layer(**shape) for _ in range(LAYERS)]).cuda().to(torch.bfloat16)
    layers = [torch.compile(layer) if mode == "compile" else layer for layer in stack]
    x, cos, sin, grad = layer_inputs(shape, seq, mbs)

    def step():
        y = x
        for layer in layers:
            y = layer(y, cos, sin)
        y.backward(grad)

    r = burst_and_sustained(torch, step, sustain_s, reasons, BURST_STEPS)
    return {"model": name, "hidden": shape["hidden"], "ffn": shape["ffn"], "seq": seq, "mbs": mbs,
            "layers": LAYERS, "mode": mode, "burst_step_s": round(r["burst_s"], 6),
            "sustained_step_s": round(r["sustained_s"], 6), "sustained_over_burst": round(r["burst_s"] / r["sustained_s"], 4),
            **{key: r[key] for key in STEADY_FIELDS}}


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
