"""One entry point: evaluate a batch of layouts into a ``CostTable`` of arrays."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from autoplan.cost.allocator import keep_temporaries_on_heap
from autoplan.cost.broadcast import shared_groupings
from autoplan.cost.context import CostContext
from autoplan.cost.flops import hardware_flops_per_token, model_flops_per_token
from autoplan.cost.stage_memory import memory_table
from autoplan.cost.step_time import time_table
from autoplan.layout import CODE_FIELDS, RECORD_FIELDS, LayoutBatch
from autoplan.recompute_modules import modules_texts
from autoplan.rules import REASON_CODES, legality_codes
from autoplan.specs.training import TrainingSpec
from autoplan.units import GiB

# From this many layouts on, a batch's temporaries exceed glibc's default mmap threshold (cost.allocator).
LARGE_BATCH = 4096


@dataclass
class CostTable:
    """Predictions for a batch of layouts: ``columns[name]`` is an array over layouts."""

    batch: LayoutBatch
    columns: dict[str, np.ndarray]
    training: TrainingSpec

    def __len__(self) -> int:
        return len(self.batch)

    def __getitem__(self, name: str) -> np.ndarray:
        return self.columns[name]

    def reasons(self) -> list[str]:
        """The infeasibility reason code of each layout ('' when it is legal and fits)."""
        codes = self.columns["reason_code"].astype(int)
        fits = self.columns["fits"]
        host = self.columns["host_memory_fits"]
        return [REASON_CODES[c] if c else ("" if f else "out_of_memory" if h else "host_out_of_memory")
                for c, f, h in zip(codes, fits, host)]

    def record(self, i: int) -> dict[str, Any]:
        """Layout fields and every prediction of layout ``i`` as plain Python values."""
        rec: dict[str, Any] = self.batch.layout(i).to_record(self.training)
        for name, values in self.columns.items():
            value = values[i]
            rec[name] = bool(value) if values.dtype == bool else float(value)
        rec["infeasible_reason"] = self.reasons()[i]
        return rec

    def to_frame(self):
        """A pandas DataFrame: record columns (layout and setup, categoricals as names) then
        predictions."""
        import pandas as pd

        data: dict[str, Any] = {}
        setup = {"gpus": np.full(len(self), float(self.training.gpus)),
                 "seq_len": np.full(len(self), float(self.training.seq_len))}
        for name in RECORD_FIELDS:
            values = setup[name] if name in setup else getattr(self.batch, name)
            if name in CODE_FIELDS:
                data[name] = np.asarray(CODE_FIELDS[name], dtype=object)[values.astype(int)]
            elif name == "sp":
                data[name] = values > 0
            elif name == "recompute_modules":
                data[name] = modules_texts(values)
            else:
                data[name] = values.astype(np.int64)
        data.update(self.columns)
        data["infeasible_reason"] = self.reasons()
        return pd.DataFrame(data)


# Width, as a share of usable memory, over which the allocator's retry regime sets in
# (memory_pressure_s): the regime is a step where the reserved peak meets the device's
# ceiling, smoothed over about the memory model's own error near capacity (the sweep's median
# |error| is 7%), so that a prediction a few percent off is not all or nothing.
MEMORY_PRESSURE_RAMP = 0.05


def memory_pressure_s(ctx: CostContext, step_s: np.ndarray, peak_share: np.ndarray) -> np.ndarray:
    """Seconds the caching allocator's free-and-retry cycles add to a step whose heaviest
    stage's predicted peak is ``peak_share`` of usable memory: step × memory_pressure_slowdown
    × clip((peak_share − memory_pressure_threshold) / MEMORY_PRESSURE_RAMP, 0, 1).

    When cudaMalloc fails, PyTorch's caching allocator frees every cached unsplit block and
    retries (c10/cuda/CUDACachingAllocator.cpp, ``alloc_block`` / ``release_cached_blocks``;
    ``torch.cuda.memory_stats()['num_alloc_retries']``). A step whose reserved peak meets the
    ceiling does that every micro-batch: its large allocations miss the emptied cache and go to
    cudaMalloc and cudaFree, which synchronise the device, so the host no longer runs ahead of
    the GPU. PyTorch's maintainers call each cycle "a costly perf event" (pytorch/pytorch#193391),
    and composer raises gradient accumulation when it sees retries for the throughput lost
    (mosaicml/composer#1632). The cost is a regime, not a gradual slope: on the Ultra-Scale
    Playbook sweep every run whose rank-0 reserved peak reached 0.945 of the card ran at 0.13-0.30
    of its predicted speed, runs below 0.85 of it at a median 0.97, and half of those between
    were slow (benchmarks/playbook_memory_modes.py, point 8; a named correction:
    Corrections.memory_pressure_threshold and memory_pressure_slowdown)."""
    c = ctx.corrections
    regime = np.clip((peak_share - c.memory_pressure_threshold) / MEMORY_PRESSURE_RAMP, 0.0, 1.0)
    return step_s * c.memory_pressure_slowdown * regime


def evaluate(ctx: CostContext, batch: LayoutBatch, *, allow_uneven: bool = True,
             codes: np.ndarray | None = None) -> CostTable:
    """Legality, memory, time, FLOPs and utilisation of every layout in ``batch``.

    Layouts that break a rule are still costed where the arithmetic is defined (so a user
    sees how far off they are), but ``fits`` is False and ``reason_code`` names the rule.
    ``codes``: the batch's :func:`~autoplan.rules.legality_codes` when the caller has them already.
    """
    b = batch
    cols: dict[str, np.ndarray] = {}
    if len(b) >= LARGE_BATCH:
        keep_temporaries_on_heap()
    with np.errstate(divide="ignore", invalid="ignore"), shared_groupings():
        if codes is None:
            codes = legality_codes(ctx, b, allow_uneven=allow_uneven)
        cols.update(memory_table(ctx, b))
        cols.update(time_table(ctx, b))
        capacity = ctx.cluster.gpu.usable_memory_bytes
        pressure = memory_pressure_s(ctx, cols["step_time_s"], cols["peak_memory_bytes"] / capacity)
        cols["time_memory_pressure_s"] = pressure
        cols["step_time_s"] = cols["step_time_s"] + pressure
        cols["bubble_fraction"] = cols["time_bubble_s"] / cols["step_time_s"]
        seq_len, gpus = ctx.training.seq_len, ctx.training.gpus
        tokens_per_step = b.gbs_seqs * seq_len
        model_flops = model_flops_per_token(ctx, seq_len) * tokens_per_step
        hardware_flops = hardware_flops_per_token(ctx, b) * tokens_per_step
        step = cols["step_time_s"]
        peak = ctx.cluster.gpu.peak_bf16_flops_per_s
        cols["model_flops_per_step"] = model_flops
        cols["tokens_per_s_per_gpu"] = tokens_per_step / (step * gpus)
        cols["model_tflops_per_gpu"] = model_flops / (step * gpus) / 1e12
        cols["hardware_tflops_per_gpu"] = hardware_flops / (step * gpus) / 1e12
        cols["mfu"] = cols["model_tflops_per_gpu"] * 1e12 / peak
        cols["hfu"] = cols["hardware_tflops_per_gpu"] * 1e12 / peak
        cols["peak_memory_gib"] = cols["peak_memory_bytes"] / GiB
        cols["memory_headroom_gib"] = (capacity - cols["peak_memory_bytes"]) / GiB
        # Offloaded model states must fit in the host memory of the GPU's share of its node.
        cols["host_memory_fits"] = cols["host_memory_bytes"] <= ctx.cluster.gpu.host_memory_bytes
        cols["fits"] = (codes == 0) & (cols["peak_memory_bytes"] <= capacity) & cols["host_memory_fits"]
        # Beyond the card only by the allocator's cache: may run in its free-and-retry regime.
        cols["fits_with_retries"] = (codes == 0) & (cols["firm_peak_memory_bytes"] <= capacity) & cols["host_memory_fits"]
    cols["reason_code"] = codes.astype(np.float64)
    return CostTable(batch=b, columns=cols, training=ctx.training)
