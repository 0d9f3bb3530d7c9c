"""Why a layout cannot run or does not fit, and the nearest single-knob change that makes it fit."""

from __future__ import annotations

import dataclasses

import numpy as np

from autoplan.cost.context import CostContext
from autoplan.cost.evaluate import CostTable, evaluate
from autoplan.cost.memory import MEMORY_TERMS
from autoplan.errors import LayoutError
from autoplan.layout import Layout, LayoutBatch, resolve_layout
from autoplan.rules import explain_reason, legality_codes, suggest_fix
from autoplan.units import GiB


def why_not(ctx: CostContext, batch: LayoutBatch, table: CostTable, i: int = 0, *,
            allow_uneven: bool = False) -> str:
    """Why layout ``i`` of ``table`` (evaluated from ``batch``) cannot run or does not fit, with
    the nearest fix; '' when it is legal and fits.

    A broken rule: the rule's reason and its suggested fix. Out of memory: the peak, the excess
    over the usable memory, the largest memory term on the peak stage and
    :func:`nearest_fitting_change`.
    """
    code = int(table["reason_code"][i])
    if code:
        fix = suggest_fix(ctx, batch, i, code)
        return explain_reason(ctx, batch, i, code) + (f": {fix}" if fix else "")
    if table["fits"][i]:
        return ""
    if not table["host_memory_fits"][i]:  # offloaded model states beyond the host's share
        return (f"out of host memory: {table['host_memory_bytes'][i] / GiB:.1f} GiB of offloaded model states "
                f"per GPU over the {ctx.cluster.gpu.host_memory_bytes / GiB:.1f} GiB of host memory per GPU; "
                "try --offload optimizer or none, or more GPUs")
    peak_rank = table["peak_stage"][i]
    stage = "first" if peak_rank == 0 else ("last" if peak_rank == batch.pp[i] - 1 else "middle")
    biggest = max(MEMORY_TERMS, key=lambda t: table[f"mem_{stage}_{t}_bytes"][i])
    over = -table["memory_headroom_gib"][i]
    fix = nearest_fitting_change(ctx, batch.layout(i), allow_uneven=allow_uneven)
    return (f"out of memory: peak {table['peak_memory_gib'][i]:.1f} GiB on the {stage} stage is "
            f"{over:.1f} GiB over the usable {ctx.cluster.gpu.usable_memory_bytes / GiB:.1f} GiB; "
            f"largest term: {biggest} ({table[f'mem_{stage}_{biggest}_bytes'][i] / GiB:.1f} GiB)"
            + (f"; {retry_regime_text(table, i)}" if table["fits_with_retries"][i] else "")
            + (f"; {fix}" if fix else ""))


# What the one measurement of the retry regime showed (benchmarks/playbook_memory_modes.py, point 7:
# nanotron on H100, the Ultra-Scale Playbook sweep): the runs whose reserved peak was predicted
# beyond the card and whose firm peak was not, and how fast the ok ones ran.
RETRY_REGIME_MEASURED = "of 35 such runs of nanotron on H100, 3 ran, at 0.12-0.38 of their speed at micro-batch 1"


def retry_regime_text(table: CostTable, i: int) -> str:
    """What a layout whose reserved peak is beyond the card but whose firm peak is not
    (``fits_with_retries``) may do: run in the caching allocator's free-and-retry regime, which
    gives back its cached blocks before it raises out of memory
    (cost.stage_memory.memory_table), several times slower, or fail."""
    cache = table["peak_memory_bytes"][i] - table["firm_peak_memory_bytes"][i]
    return (f"the peak counts {cache / GiB:.1f} GiB of the allocator's cache, which PyTorch frees and retries "
            f"before it raises out of memory: at {table['firm_peak_memory_bytes'][i] / GiB:.1f} GiB without "
            "it the layout may run in the free-and-retry regime, several times slower, or fail "
            f"({RETRY_REGIME_MEASURED})")


def _neighbours(ctx: CostContext, lay: Layout) -> list[tuple[str, Layout]]:
    """One-knob changes that lower memory, each with the option that makes it."""
    out = []

    def add(option: str, **changes) -> None:
        # dp, grad_acc and sp are derived again by resolve_layout for the changed knob
        values = {k: v for k, v in dataclasses.asdict(lay).items() if k not in ("dp", "grad_acc", "sp")}
        try:
            out.append((option, resolve_layout({**values, **changes}, ctx.training)))
        except LayoutError:  # the change does not divide the GPUs or the batch
            pass

    if lay.recompute != "full":
        add("--recompute full", recompute="full")
    if lay.recompute == "none":
        add("--recompute selective", recompute="selective")
    for zero in sorted(z for z in ctx.profile.capabilities.zero_stages if z > lay.zero):
        add(f"--zero {zero}", zero=zero)
    if lay.mbs > 1:
        add(f"--mbs {lay.mbs // 2}", mbs=lay.mbs // 2)
    add(f"--tp {lay.tp * 2}", tp=lay.tp * 2)
    add(f"--pp {lay.pp * 2}", pp=lay.pp * 2)
    add(f"--cp {lay.cp * 2}", cp=lay.cp * 2)
    return out


def nearest_fitting_change(ctx: CostContext, lay: Layout, *, allow_uneven: bool = True) -> str:
    """'try --recompute full (71.2 GiB, 812 tokens/s/GPU)' or '' when no single change fits.

    Candidates are evaluated as one batch; the legal one that fits with the highest predicted
    throughput wins.
    """
    options = _neighbours(ctx, lay)
    if not options:
        return ""
    batch = LayoutBatch.from_layouts([layout for _, layout in options])
    table = evaluate(ctx, batch, allow_uneven=allow_uneven)
    ok = table["fits"] & (legality_codes(ctx, batch, allow_uneven=allow_uneven) == 0)
    if not ok.any():
        return ""
    best = int(np.argmax(np.where(ok, table["tokens_per_s_per_gpu"], -np.inf)))
    return (f"try {options[best][0]} ({table['peak_memory_gib'][best]:.1f} GiB, "
            f"{table['tokens_per_s_per_gpu'][best]:,.0f} tokens/s/GPU)")
