"""The global-batch schedule of a training run: ``--gbs-schedule 2M:100B,4M:1T,16M``.

Long runs ramp the global batch (Llama 3: 4M tokens, then 8M after 252M tokens, then 16M after
2.87T, arXiv 2407.21783 §3.4.1; DeepSeek-V3: 3072 to 15360 sequences over the first 469B tokens,
arXiv 2412.19437 §4.2). Each phase ``GBS:UNTIL`` trains with a global batch of GBS tokens (binary
suffixes, as ``--gbs-tokens``) until UNTIL tokens have been seen in the whole run (decimal
suffixes, as ``--train-tokens``); the last phase has no UNTIL and runs to the end. A phase is
costed with its own best layout (a smaller batch leaves less room for data parallelism).
"""

from __future__ import annotations

from dataclasses import dataclass

from autoplan.errors import AutoplanError, shown
from autoplan.units import UnitError, format_count, parse_count


@dataclass(frozen=True)
class BatchPhase:
    """``tokens`` trained with a global batch of ``gbs_tokens`` tokens."""

    gbs_tokens: float
    tokens: float


def parse_gbs_schedule(text: str, train_tokens: float) -> tuple[BatchPhase, ...]:
    """The phases of '2M:100B,4M:1T,16M' for a run of ``train_tokens`` tokens; every UNTIL must
    grow and stay below ``train_tokens``, and only the last phase may (and must) omit it."""
    parts = [p.strip() for p in str(text).split(",")]
    phases, start = [], 0.0
    for i, part in enumerate(parts):
        gbs_text, sep, until_text = part.partition(":")
        last = i == len(parts) - 1
        if last == bool(sep):
            raise AutoplanError(f"--gbs-schedule: {'the last phase runs to the end and takes no :UNTIL' if last else 'every phase but the last needs :UNTIL'}"
                                f" (e.g. '2M:100B,4M:1T,16M'), got {shown(part)}")
        try:
            gbs = parse_count(gbs_text, binary=True, what="a global batch in tokens")
            until = train_tokens if last else parse_count(until_text, binary=False, what="a token count")
        except UnitError as exc:
            raise AutoplanError(f"--gbs-schedule: {exc}") from None
        if not start < until <= train_tokens or (not last and until == train_tokens):
            raise AutoplanError(f"--gbs-schedule: phase ends must grow and stay below --train-tokens "
                                f"{format_count(train_tokens)}: {format_count(start)} < UNTIL < "
                                f"{format_count(train_tokens)} must hold, got {shown(part)}")
        phases.append(BatchPhase(gbs_tokens=gbs, tokens=until - start))
        start = until
    return tuple(phases)


def single_phase(gbs_tokens: float, train_tokens: float) -> tuple[BatchPhase, ...]:
    """A run with one global batch throughout."""
    return (BatchPhase(gbs_tokens=gbs_tokens, tokens=train_tokens),)
