"""Read a trainer's own training log into one measured row (tokens/s per GPU, peak memory).

Each trainer prints one line per logged step; the parsers below read the lines these trainers
write (formats checked against their source):

* Megatron-LM (``megatron/training/training.py`` ``training_log``)::

      [2025-04-13 23:41:12] iteration       10/    1000 | consumed samples:  160 |
      elapsed time per iteration (ms): 1147.6 | ... | global batch size:    16 | ...

  tokens/s per GPU = gbs·seq_len / (t·gpus), with gbs from the line (batch ramp-up changes it)
  or the layout, seq_len and gpus from the layout. Memory: ``report_memory``
  (``megatron/training/utils.py``) prints ``[Rank 0] (after 10 iterations) memory (MB) |
  allocated: ... | max allocated: ... | reserved: ... | max reserved: 1576.0`` once per
  model-parallel rank; its "MB" are MiB (bytes / 1024²). Peak = the largest ``max reserved``.
* torchtitan (``torchtitan/components/metrics.py`` ``MetricsProcessor.log``)::

      step: 10  loss:  7.89  grad_norm: 1.2  memory: 61.23GiB(77.38%)  tps: 5,762  tflops: ...

  ``tps`` is already per GPU (local tokens / (time · non-data-parallel size)); ``memory`` is
  ``torch.cuda.max_memory_reserved`` in GiB since the previous log. ``validate step:`` lines
  are ignored. Lines carry ANSI colour codes, which are stripped.
* nanotron (``src/nanotron/trainer.py`` ``train_step_logs`` through ``LoggerWriter``)::

      iteration: 12 / 20 | consumed_tokens: 1.57M | elapsed_time_per_iteration_ms: 4.59K |
      tokens_per_sec: 2.85E+05 | tokens_per_sec_per_gpu: 3.57E+04 | global_batch_size: 32 | ...

  values are either ``1.6E`` formatted or nanotron's ``human_format`` (3 significant digits,
  suffixes K M B T P E = 10^3 ... 10^18). Memory: ``log_memory`` lines ``Peak reserved: 61234.5MiB``
  or a ``cuda_max_memory_reserved`` entry (bytes).

All three memory figures are the caching allocator's peak reservation: they leave out the CUDA
context and NCCL buffers allocated outside it (~0.5-2 GiB), which autoplan's peak memory counts
in ``memory_reserve_bytes``; a memory calibration on log rows fits the reserve to what the log
measures.

Steps are measured in a trainer's own step numbers; the first ``skip_steps`` distinct logged
steps (compilation, allocator and NCCL warm-up) are dropped, and the figure is the median of
the rest (robust to a straggling step). Memory is the maximum over all reports (a peak).
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from autoplan.errors import AutoplanError
from autoplan.units import GiB, MiB

LOG_FORMATS = ("megatron", "torchtitan", "nanotron")
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_HUMAN_SUFFIX = {"": 1.0, "K": 1e3, "M": 1e6, "B": 1e9, "T": 1e12, "P": 1e15, "E": 1e18}
_HUMAN = re.compile(r"^([-+]?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?)([KMBTPE]?)$")


class LogImportError(AutoplanError):
    """A training log that holds no usable step line, or a layout that cannot read it."""


@dataclass(frozen=True)
class StepEntry:
    """One logged step: tokens/s per GPU (NaN when the line lacks it) and the source line."""

    step: int
    tokens_per_s_per_gpu: float
    line: int


@dataclass
class LogSummary:
    """What a log says about a run: the median tokens/s per GPU and the peak memory."""

    log_format: str
    path: str
    entries: list[StepEntry]
    used: list[StepEntry]
    skipped_steps: list[int]
    tokens_per_s_per_gpu: float
    peak_memory_bytes: float = math.nan
    notes: list[str] = field(default_factory=list)

    @property
    def peak_memory_gib(self) -> float:
        return self.peak_memory_bytes / GiB


def human_number(text: str) -> float:
    """nanotron's ``human_format`` ('4.59K' = 4590, '2.85E+05', '1.2B' = 1.2e9) as a float."""
    match = _HUMAN.match(text.strip().replace(",", ""))
    if not match:
        raise ValueError(f"not a number: {text!r}")
    return float(match.group(1)) * _HUMAN_SUFFIX[match.group(2)]


def _fields(line: str, separator: str) -> dict[str, str]:
    """'key: value' pairs of one line split on ``separator`` (later keys win)."""
    out = {}
    for part in line.split(separator):
        key, colon, value = part.partition(":")
        if colon:
            out[key.strip().lower()] = value.strip()
    return out


# --- Megatron-LM ----------------------------------------------------------------------------

_MEGATRON_ITER = re.compile(r"iteration\s+(\d+)\s*/\s*\d+\s*\|")
_MEGATRON_MEMORY = re.compile(r"memory \(MB\).*?\|\s*max reserved:\s*([\d.]+)")


def _megatron(lines: Iterable[tuple[int, str]], gpus: int, seq_len: int, gbs_seqs: int) -> tuple[list[StepEntry], list[float]]:
    entries, memory = [], []
    for number, line in lines:
        match = _MEGATRON_ITER.search(line)
        if match and "elapsed time per iteration (ms)" in line:
            values = _fields(line[match.end():], "|")
            ms = float(values["elapsed time per iteration (ms)"])
            gbs = int(values.get("global batch size", gbs_seqs))
            tokens = gbs * seq_len / (ms / 1e3 * gpus) if ms > 0 else math.nan
            entries.append(StepEntry(int(match.group(1)), tokens, number))
            continue
        match = _MEGATRON_MEMORY.search(line)
        if match:
            memory.append(float(match.group(1)) * MiB)
    return entries, memory


# --- torchtitan -------------------------------------------------------------------------------

_TITAN_STEP = re.compile(r"\bstep:\s*(\d+)\b")
_TITAN_TPS = re.compile(r"\btps:\s*([\d,]+(?:\.\d+)?)")
_TITAN_MEMORY = re.compile(r"\bmemory:\s*([\d.]+)\s*GiB")


def _torchtitan(lines: Iterable[tuple[int, str]]) -> tuple[list[StepEntry], list[float]]:
    entries, memory = [], []
    for number, line in lines:
        if "validate step:" in line:
            continue
        step, tps = _TITAN_STEP.search(line), _TITAN_TPS.search(line)
        if not (step and tps):
            continue
        entries.append(StepEntry(int(step.group(1)), float(tps.group(1).replace(",", "")), number))
        mem = _TITAN_MEMORY.search(line)
        if mem:
            memory.append(float(mem.group(1)) * GiB)
    return entries, memory


# --- nanotron ---------------------------------------------------------------------------------

_NANOTRON_ITER = re.compile(r"iteration:\s*(\d+)\s*/\s*\d+\s*\|")
_NANOTRON_PEAK = re.compile(r"Peak reserved:\s*([\d.]+)\s*MiB")


def _nanotron(lines: Iterable[tuple[int, str]], gpus: int | None) -> tuple[list[StepEntry], list[float]]:
    entries, memory = [], []
    for number, line in lines:
        match = _NANOTRON_ITER.search(line)
        if match:
            values = _fields(line[match.end():], "|")
            if "tokens_per_sec_per_gpu" in values:
                tokens = human_number(values["tokens_per_sec_per_gpu"])
            elif "tokens_per_sec" in values and gpus:
                tokens = human_number(values["tokens_per_sec"]) / gpus
            else:
                continue
            entries.append(StepEntry(int(match.group(1)), tokens, number))
            if "cuda_max_memory_reserved" in values:
                memory.append(human_number(values["cuda_max_memory_reserved"]))
            continue
        peak = _NANOTRON_PEAK.search(line)
        if peak:
            memory.append(float(peak.group(1)) * MiB)
    return entries, memory


# --- entry point ------------------------------------------------------------------------------

def read_log_lines(path: str | Path) -> list[tuple[int, str]]:
    """(line number, text without ANSI colour codes) of a log file."""
    from autoplan.files import MAX_LOG_BYTES, read_user_text

    text = read_user_text(path, max_bytes=MAX_LOG_BYTES, errors="replace")
    return [(i + 1, _ANSI.sub("", line)) for i, line in enumerate(text.splitlines())]


def parse_log(path: str | Path, log_format: str, *, gpus: int | None = None, seq_len: int | None = None,
              gbs_seqs: int | None = None, skip_steps: int = 2) -> LogSummary:
    """Median tokens/s per GPU after ``skip_steps`` warm-up steps, and the peak memory.

    Megatron needs ``gpus``, ``seq_len`` and (when its lines lack ``global batch size``)
    ``gbs_seqs``: its log gives only the iteration time. Raises ``LogImportError`` when the log
    holds no step line of ``log_format`` or every step is a warm-up step.
    """
    fmt = log_format.strip().lower()
    if fmt not in LOG_FORMATS:
        raise LogImportError(f"unknown log format '{log_format}'; known: {', '.join(LOG_FORMATS)}")
    if skip_steps < 0:
        raise LogImportError(f"skip_steps >= 0 must hold, got {skip_steps}")
    lines = read_log_lines(path)
    if fmt == "megatron":
        if not (gpus and seq_len and gbs_seqs):
            raise LogImportError("a Megatron log gives only the iteration time: tokens/s per GPU = "
                                 "gbs·seq_len/(time·gpus) needs gpus, seq_len and gbs_seqs in the layout "
                                 f"(got gpus={gpus}, seq_len={seq_len}, gbs_seqs={gbs_seqs})")
        entries, memory = _megatron(lines, gpus, seq_len, gbs_seqs)
    elif fmt == "torchtitan":
        entries, memory = _torchtitan(lines)
    else:
        entries, memory = _nanotron(lines, gpus)
    return summarise(str(path), fmt, entries, memory, skip_steps)


_EXAMPLE = {"megatron": "'iteration 10/ 100 | ... | elapsed time per iteration (ms): 1147.6 | ...'",
            "torchtitan": "'step: 10  loss: ...  memory: 61.23GiB(77.38%)  tps: 5,762  ...'",
            "nanotron": "'iteration: 12 / 20 | ... | tokens_per_sec_per_gpu: 3.57E+04 | ...'"}


def summarise(path: str, fmt: str, entries: list[StepEntry], memory: list[float], skip_steps: int) -> LogSummary:
    """Drop the first ``skip_steps`` distinct steps, take the median of the rest."""
    entries = [e for e in entries if math.isfinite(e.tokens_per_s_per_gpu) and e.tokens_per_s_per_gpu > 0]
    if not entries:
        raise LogImportError(f"{path}: no {fmt} step line with a throughput found (expected lines like "
                             f"{_EXAMPLE[fmt]}); is --log-format right?")
    steps = sorted({e.step for e in entries})
    skipped = steps[:skip_steps]
    used = [e for e in entries if e.step not in set(skipped)]
    if not used:
        raise LogImportError(f"{path}: found {len(steps)} logged step(s) ({', '.join(map(str, steps))}), all "
                             f"skipped as warm-up (--skip-steps {skip_steps}); log more steps or lower --skip-steps")
    notes = []
    if len({e.step for e in used}) < 3:
        notes.append(f"only {len({e.step for e in used})} step(s) after warm-up: the median is noisy")
    return LogSummary(log_format=fmt, path=path, entries=entries, used=used, skipped_steps=skipped,
                      tokens_per_s_per_gpu=float(statistics.median(e.tokens_per_s_per_gpu for e in used)),
                      peak_memory_bytes=max(memory) if memory else math.nan, notes=notes)
