"""The training setup: the cluster, the sequence length, the global batch and how FLOPs count.

A ``TrainingSpec`` is what every layout of one plan shares (calculon's "application" beside its
"execution" and "system"); the parallel knobs live in :class:`autoplan.layout.Layout`. Precision
is not here: it is a layout knob, because the search explores bf16 and fp8.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from autoplan.errors import AutoplanError, shown
from autoplan.specs.hardware import Cluster

FLOPS_CONVENTIONS = ("playbook", "causal", "megatron")
# The largest values accepted, one bound per quantity: the options of every command use these too.
# Far above any real job; they keep counts exact in float64 (STYLE.md §2) and int64 casts safe.
MAX_GPUS = 10**7
MAX_SEQ_LEN = 10**8
MAX_GBS_SEQS = 2**40


class TrainingSpecError(AutoplanError):
    """A training setup whose values break an invariant (the message names it and the values)."""


@dataclass(frozen=True)
class TrainingSpec:
    """The cluster, sequence length and global batch every layout must train with.

    ``gbs_tolerance`` is a fraction: 0 demands ``gbs_seqs`` exactly; 0.05 accepts the nearest
    batch ``dp·mbs·grad_acc`` within ±5 % of it. ``flops_convention`` decides how *model*
    FLOPs (for MFU) are counted; time always uses the work the kernels really do (causal
    attention does half the score FLOPs):

    * ``playbook`` (default): 6·N·T + 6·L·s·a·(d_qk + d_v)·T, N = every parameter with a tied LM
      head counted twice, attention not halved; reproduces the Ultra-Scale Playbook's and
      Megatron-Core's published MFU (refdata README).
    * ``causal``: the same with the attention term halved (causal masking).
    * ``megatron``: Megatron's ``num_floating_point_operations`` (no embedding lookup in N).
    """

    cluster: Cluster
    seq_len: int
    gbs_seqs: int
    gbs_tolerance: float = 0.0
    flops_convention: str = "playbook"

    def __post_init__(self) -> None:
        if not isinstance(self.cluster, Cluster):
            raise TrainingSpecError(f"cluster must be a Cluster, got {type(self.cluster).__name__}")
        for name, maximum in (("seq_len", MAX_SEQ_LEN), ("gbs_seqs", MAX_GBS_SEQS)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise TrainingSpecError(f"{name} >= 1 must hold for an integer {name}, got {name}={shown(value)}")
            if value > maximum:
                raise TrainingSpecError(f"{name} <= {maximum:,} must hold, got {name}={shown(value)}")
        if self.cluster.num_gpus > MAX_GPUS:
            raise TrainingSpecError(f"gpus <= {MAX_GPUS:,} must hold, got gpus={self.cluster.num_gpus}")
        tolerance = self.gbs_tolerance
        if isinstance(tolerance, bool) or not isinstance(tolerance, (int, float)) or not 0.0 <= tolerance < 1.0:
            raise TrainingSpecError(f"0 <= gbs_tolerance < 1 must hold, got gbs_tolerance={shown(tolerance)}")
        if self.flops_convention not in FLOPS_CONVENTIONS:
            raise TrainingSpecError(f"flops_convention must be one of {', '.join(FLOPS_CONVENTIONS)}, "
                                    f"got {shown(self.flops_convention)}")

    @property
    def gpus(self) -> int:
        """The GPU count of the job (the cluster's)."""
        return self.cluster.num_gpus

    @property
    def gbs_tokens(self) -> int:
        return self.gbs_seqs * self.seq_len

    def describe(self) -> str:
        """'512 x h100-sxm, gbs 512 x 8192 tokens' for titles and messages."""
        return (f"{self.gpus} x {self.cluster.gpu.name}, gbs {self.gbs_seqs} x {self.seq_len} tokens"
                + (f" (±{self.gbs_tolerance:g})" if self.gbs_tolerance else ""))


def resolve_batch(seq_len: int | None, gbs_seqs: int | None, gbs_tokens: float | None,
                  model_seq_len: int, *, required: bool = True) -> tuple[int, int | None]:
    """(seq_len, gbs_seqs) from the options: ``seq_len`` (default ``model_seq_len``) and the
    batch as ``gbs_seqs`` or ``gbs_tokens``, which must be a whole number of sequences."""
    seq = seq_len or model_seq_len
    if gbs_seqs is not None and gbs_tokens is not None:
        raise TrainingSpecError("--gbs-tokens and --gbs-seqs are mutually exclusive: give one, not both "
                                f"(got --gbs-seqs {gbs_seqs} and --gbs-tokens {gbs_tokens:.0f})")
    if gbs_tokens is not None:
        if gbs_tokens > MAX_GBS_SEQS * seq:
            raise TrainingSpecError(f"--gbs-tokens ({gbs_tokens:.4g}) must be at most {MAX_GBS_SEQS:,} sequences "
                                    f"of {seq} tokens ({MAX_GBS_SEQS * seq:.4g})")
        if gbs_tokens != int(gbs_tokens):
            raise TrainingSpecError(f"--gbs-tokens must be a whole number of tokens, got {gbs_tokens:g}")
        if gbs_tokens % seq:
            raise TrainingSpecError(f"--gbs-tokens ({gbs_tokens:.0f}) must be a multiple of the sequence "
                                    f"length ({seq}); nearest: {max(1, round(gbs_tokens / seq)) * seq}")
        gbs_seqs = int(gbs_tokens // seq)
    if gbs_seqs is None and required:
        raise TrainingSpecError("the global batch is missing: give --gbs-tokens (e.g. 4M) or --gbs-seqs")
    return seq, gbs_seqs
