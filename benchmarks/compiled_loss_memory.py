"""Memory of torchtitan's cross-entropy per logit, eager and under torch.compile (the figures of
``autoplan/cost/loss_kernel.py`` and the torchtitan profile's ``logits_bytes_per_vocab``).

    python benchmarks/compiled_loss_memory.py [--tokens 8192] [--vocab 32768]

Needs PyTorch (``pip install 'autoplan[probe]'``) and a C++ compiler for inductor's CPU kernels;
about a minute on 2 cores. Each mode runs in its own process with ``MALLOC_MMAP_THRESHOLD_=65536``
(every large tensor its own mapping, so the resident set follows frees), timing the resident
bytes around torchtitan's loss (``F.cross_entropy(pred.float(), labels)``, its
``torchtitan/components/loss.py``) as its train step runs it: the bf16 logits of a graph
(``pred``), the loss, ``del pred``, backward. The peaks come from ``VmHWM`` after resetting it
(``/proc/self/clear_refs``). Printed per logit, the bf16 logits counted (as the profiles count
them): eager holds the logits, their fp32 copy and log_softmax's fp32 output in the forward,
keeps that output for the backward and holds it with nll_loss's and log_softmax's fp32 gradients
there; the compiled loss keeps the bf16 logits and writes their bf16 gradient.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

CHILD = r'''
import sys, torch, torch.nn.functional as F
torch.set_num_threads(1)
mode, tokens, vocab = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])

def loss_fn(pred, labels):
    return F.cross_entropy(pred.flatten(0, 1).float(), labels.flatten(0, 1))

fn = torch.compile(loss_fn) if mode == "compiled" else loss_fn

def status(key):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith(key))

def reset_peak():
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")

labels = torch.randint(0, vocab, (1, tokens))
warm = torch.randn(1, tokens, vocab, dtype=torch.bfloat16, requires_grad=True)
fn(warm * 1, labels).backward()  # compiles on these shapes
del warm
leaf = torch.randn(1, tokens, vocab, dtype=torch.bfloat16, requires_grad=True)  # stands for the lm_head
n = tokens * vocab
base = status("VmRSS"); reset_peak()
pred = leaf * 1  # the lm_head output: a graph's bf16 logits, counted from here on
loss = fn(pred, labels)
forward_peak = status("VmHWM") - base
del pred  # torchtitan's train step: "need to free to before bwd to avoid peaking memory"
kept = status("VmRSS") - base
reset_peak()
loss.backward()
backward_peak = status("VmHWM") - base
print(f"{forward_peak / n:.2f} {kept / n:.2f} {backward_peak / n:.2f}")
'''


def measure(mode: str, tokens: int, vocab: int) -> tuple[float, float, float]:
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536", "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", CHILD, mode, str(tokens), str(vocab)], capture_output=True,
                          text=True, env=env, timeout=900, check=False)
    if done.returncode:
        raise SystemExit(f"{mode} run failed:\n{done.stderr[-2000:]}")
    forward, kept, backward = (float(x) for x in done.stdout.split()[-3:])
    return forward, kept, backward


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=8192)
    parser.add_argument("--vocab", type=int, default=32768)
    args = parser.parse_args()
    print(f"cross-entropy of {args.tokens} tokens x {args.vocab} logits (bf16 logits in, fp32 loss), "
          "bytes per logit, the bf16 logits counted:")
    print(f"{'mode':>9}  {'forward peak':>12}  {'kept for backward':>17}  {'backward peak':>13}")
    for mode in ("eager", "compiled"):
        forward, kept, backward = measure(mode, args.tokens, args.vocab)
        print(f"{mode:>9}  {forward:>12.2f}  {kept:>17.2f}  {backward:>13.2f}")
    print("autoplan costs the peak with the logits counted: eager 12 (torchtitan logits_bytes_per_vocab, the "
          "logits freed before backward), compiled 4 (cost/loss_kernel.py COMPILED_LOSS_BYTES_PER_LOGIT)")


if __name__ == "__main__":
    main()
