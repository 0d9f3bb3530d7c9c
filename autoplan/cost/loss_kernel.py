"""The cross-entropy loss under ``torch.compile`` (setting ``compile_loss``): its memory and HBM
traffic per logit, which replace the trainer profile's eager figures.

torchtitan compiles the loss beside the model's blocks whenever compile is on
(``torchtitan/components/loss.py``: ``torch.compile(loss_fn)`` since torchtitan bbb1b61,
2025-04-02, "build_loss_fn & chunked loss" #1033; ``compile.components`` ["model", "loss"] by
default since 08b8b24, 2025-08-20). Inductor fuses ``F.cross_entropy(pred.float(), labels)``
(the ``.float()`` upcast, log_softmax and nll_loss) into reduction kernels: no fp32 copy of the
logits is written, the forward graph saves the bf16 logits themselves and one float per row
(max and log-sum-exp), and the backward writes the bf16 gradient of the logits directly. Eager
PyTorch saves log_softmax's fp32 output and holds it with nll_loss's fp32 gradient and
log_softmax's fp32 input gradient at the backward peak: 12 B per logit (the torchtitan profile's
``logits_bytes_per_vocab``).

Measured on torch 2.13.0 (inductor, CPU), ``python benchmarks/compiled_loss_memory.py``: 8192
tokens × 32768 logits, resident bytes per logit with the bf16 logits counted: eager forward peak
10, kept for the backward 4, backward peak 12; compiled 2, 2 and 4 (the bf16 logits the graph
keeps and the bf16 gradient it writes). Inductor's
generated kernels read the bf16 logits twice in the forward (the row max, then the sum of
exponentials) and once in the backward, which writes the bf16 gradient: 8 B of HBM traffic per
logit, against eager PyTorch's 32 (torchtitan profile, ``loss_hbm_bytes_per_logit``).
"""

from __future__ import annotations

# Bytes per logit at the compiled loss's backward peak: the bf16 logits the forward graph saves
# (2) and the bf16 gradient the backward kernel writes (2).
COMPILED_LOSS_BYTES_PER_LOGIT = 4.0
# HBM bytes per logit the compiled loss moves: forward reads the bf16 logits twice (2 + 2), the
# backward reads them once (2) and writes the bf16 gradient (2).
COMPILED_LOSS_HBM_BYTES_PER_LOGIT = 8.0


def loss_bytes_per_logit(ctx) -> float:
    """Bytes per logit the logits and the loss hold at their peak: the compiled loss's under
    ``compile_loss``, else the trainer profile's eager figure (``logits_bytes_per_vocab``)."""
    if ctx.training.compile_loss:
        return COMPILED_LOSS_BYTES_PER_LOGIT
    return ctx.profile.activations.logits_bytes_per_vocab


def loss_hbm_bytes(ctx) -> float:
    """HBM bytes per logit the loss moves forward and backward: the compiled kernels' under
    ``compile_loss``; else the profile's eager figure (0 where the profile does not state it)."""
    if ctx.training.compile_loss:
        return COMPILED_LOSS_HBM_BYTES_PER_LOGIT
    return ctx.profile.activations.loss_hbm_bytes_per_logit
