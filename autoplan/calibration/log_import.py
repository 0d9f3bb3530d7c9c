"""Read a trainer's own training log into one measured row (tokens/s per GPU, peak memory).

Each trainer prints one line per logged step; the parsers below read the lines these trainers
write (formats checked against their source; real excerpts with their sources are the fixtures
in ``tests/unit/calibration/logs/``). Which memory figure each format gives:

* Megatron-LM and Megatron-Bridge (``megatron/training/training.py`` ``training_log``; the Bridge
  prints the same line from ``megatron/bridge/training/utils/train_utils.py``)::

      [2024-04-06 03:02:12] iteration       71/     100 | consumed samples:   9088 |
      elapsed time per iteration (ms): 5361.6 | throughput per GPU (TFLOP/s/GPU): 243.6 | ...
      | global batch size:   128 | ...

  tokens/s per GPU = gbs·seq_len / (t·gpus), with gbs from the line (batch ramp-up changes it)
  or the layout, seq_len and gpus from the layout. Memory: ``report_memory``
  (``megatron/training/utils.py``) prints ``[Rank 0] (after 10 iterations) memory (MB) |
  allocated: ... | max allocated: ... | reserved: ... | max reserved: 1576.0`` once per
  model-parallel rank; its "MB" are MiB (bytes / 1024²). Reserved = ``max reserved``
  (``torch.cuda.max_memory_reserved``), allocated = ``max allocated``.
* torchtitan (``torchtitan/components/metrics.py`` ``MetricsProcessor.log``)::

      step: 10  loss:  7.89  grad_norm: 1.2  memory: 61.23GiB(77.38%)  tps: 5,762  tflops: ...

  ``tps`` is already per GPU (local tokens / (time · non-data-parallel size)); ``memory`` is
  ``torch.cuda.max_memory_reserved`` in GiB since the previous log (reserved; no allocated
  figure). ``validate step:`` lines are ignored. ANSI colour codes are stripped.
* nanotron (``src/nanotron/trainer.py`` ``train_step_logs`` through ``LoggerWriter``)::

      iteration: 12 / 20 | consumed_tokens: 1.57M | elapsed_time_per_iteration_ms: 4.59K |
      tokens_per_sec: 2.85E+05 | tokens_per_sec_per_gpu: 3.57E+04 | global_batch_size: 32 | ...

  values are either ``1.6E`` formatted or nanotron's ``human_format`` (3 significant digits,
  suffixes K M B T P E = 10^3 ... 10^18). Reserved: ``cuda_max_memory_reserved`` (bytes, on
  the first logged steps) or ``log_memory``'s ``Peak reserved: 61234.5MiB``; allocated:
  ``Peak allocated 50860.46MiB``.
* DeepSpeed: the Megatron-DeepSpeed ``training_log`` line (Megatron's, plus
  ``samples per second: 3.151 | tokens per gpu per second (tgs): 1613.5 | TFLOPs: 98.29``;
  ``tgs`` is per GPU), else the engine's ``ThroughputTimer`` line (``deepspeed/utils/timer.py``,
  every ``steps_per_print``): ``global_step=200, RunningAvgSamplesPerSec=58.7,
  CurrSamplesPerSec=58.75, MemAllocated=6.01GB, MaxMemAllocated=19.52GB``, whose samples are the
  global batch (``train_batch_size``): tokens/s per GPU = samples/s · seq_len / gpus. Its "GB"
  are GiB (``/ 1024**3``) and ``MaxMemAllocated`` is allocated memory. Reserved:
  ``see_memory_usage`` (``deepspeed/runtime/utils.py``) ``Max_CA 35 GB`` (CA = cache allocated,
  ``torch.cuda.max_memory_reserved``) and Megatron's ``report_memory`` line; allocated:
  ``Max_MA``, ``MaxMemAllocated`` and ``max allocated``.

autoplan's peak memory is the caching allocator's peak reservation plus the CUDA context and
NCCL buffers outside it (``memory_reserve_bytes``): a calibration fits to the *reserved* peak
(``peak_memory_bytes``). A log that gives only allocated memory (a DeepSpeed log without
``see_memory_usage``) yields no peak memory; its allocated peak is reported
(``peak_allocated_bytes``), a lower bound.

Every figure read is checked where it is read: ``inf``, ``nan``, a negative or zero time or
rate, or a value that is not a number (Megatron prints ``nan`` for an overflowed loss, but a
time or a throughput is never legitimately so) is refused with the file and line number,
never coerced. Steps are measured in a trainer's own step numbers; the first ``skip_steps``
distinct logged steps (compilation, allocator and NCCL warm-up) are dropped, and the figure is
the median of the rest (robust to a straggling step); its spread (lowest and highest step) is
kept. Memory is the maximum over all reports (a peak).
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

LOG_FORMATS = ("megatron", "megatron-bridge", "torchtitan", "nanotron", "deepspeed")
ALIASES = {"megatron-bridge": "megatron"}  # the Bridge prints Megatron's training_log line
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_HUMAN_SUFFIX = {"": 1.0, "K": 1e3, "M": 1e6, "B": 1e9, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18}
_HUMAN = re.compile(r"^([-+]?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?)([KMBGTPE]?)$")
_VALUE = r"([^\s|,()]+(?:,\d{3})*)"  # one figure as printed, non-finite spellings included


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
    """What a log says about a run: the median tokens/s per GPU (with the lowest and highest
    step after warm-up), the peak reserved memory and the peak allocated memory."""

    log_format: str
    path: str
    entries: list[StepEntry]
    used: list[StepEntry]
    skipped_steps: list[int]
    tokens_per_s_per_gpu: float
    peak_memory_bytes: float = math.nan
    peak_allocated_bytes: float = math.nan
    notes: list[str] = field(default_factory=list)

    @property
    def peak_memory_gib(self) -> float:
        return self.peak_memory_bytes / GiB

    @property
    def tokens_range(self) -> tuple[float, float]:
        """(lowest, highest) tokens/s per GPU of the steps used: the measurement's spread."""
        values = [e.tokens_per_s_per_gpu for e in self.used]
        return min(values), max(values)


@dataclass
class _Memory:
    reserved: list[float] = field(default_factory=list)
    allocated: list[float] = field(default_factory=list)


def human_number(text: str) -> float:
    """nanotron's ``human_format`` ('4.59K' = 4590, '2.85E+05', '1.2B' = 1.2e9) as a float."""
    match = _HUMAN.match(text.strip().replace(",", ""))
    if not match:
        raise ValueError(f"not a number: {text!r}")
    return float(match.group(1)) * _HUMAN_SUFFIX[match.group(2)]


def figure(text: str, name: str, where: str, line: int, *, human: bool = False) -> float:
    """One figure of a log line, refused unless a finite number > 0 (``inf``, ``nan``, an
    overflowed or negative value would otherwise be coerced into a measurement)."""
    try:
        value = human_number(text) if human else float(text.strip().replace(",", ""))
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise LogImportError(f"{where}:{line}: {name} is {text.strip()!r}: expected a finite number > 0 "
                             "(a non-finite or non-positive figure is refused, not coerced; drop the line or "
                             "rerun the step)")
    return value


def _fields(line: str, separator: str) -> dict[str, str]:
    """'key: value' pairs of one line split on ``separator`` (later keys win)."""
    out = {}
    for part in line.split(separator):
        key, colon, value = part.partition(":")
        if colon:
            out[key.strip().lower()] = value.strip()
    return out


# --- Megatron-LM, Megatron-Bridge, Megatron-DeepSpeed -----------------------------------------

_MEGATRON_ITER = re.compile(r"iteration\s+(\d+)\s*/\s*\d+\s*\|")
_MEGATRON_MEMORY = re.compile(r"memory \(MB\)\s*\|\s*allocated:.*?\|\s*max allocated:\s*" + _VALUE
                              + r".*?\|\s*max reserved:\s*" + _VALUE)
_TGS = ("tokens per gpu per second (tgs)", "tokens per gpu per second(tgs)")


def _megatron_tokens(values: dict[str, str], where: str, number: int, gpus: int, seq_len: int,
                     gbs_seqs: int) -> float:
    """tokens/s per GPU of one Megatron(-DeepSpeed) iteration line: Megatron-DeepSpeed's own
    ``tgs`` where printed, else gbs·seq_len / (iteration time · gpus)."""
    for key in _TGS:
        if key in values:
            return figure(values[key], key, where, number)
    ms = figure(values["elapsed time per iteration (ms)"], "elapsed time per iteration (ms)", where, number)
    gbs = figure(values["global batch size"], "global batch size", where, number) if "global batch size" in values \
        else gbs_seqs
    return gbs * seq_len / (ms / 1e3 * gpus)


def _megatron(lines: Iterable[tuple[int, str]], where: str, gpus: int, seq_len: int,
              gbs_seqs: int) -> tuple[list[StepEntry], _Memory]:
    entries, memory = [], _Memory()
    for number, line in lines:
        match = _MEGATRON_ITER.search(line)
        if match and "elapsed time per iteration (ms)" in line:
            values = _fields(line[match.end():], "|")
            entries.append(StepEntry(int(match.group(1)),
                                     _megatron_tokens(values, where, number, gpus, seq_len, gbs_seqs), number))
            continue
        match = _MEGATRON_MEMORY.search(line)
        if match:
            memory.allocated.append(figure(match.group(1), "max allocated", where, number) * MiB)
            memory.reserved.append(figure(match.group(2), "max reserved", where, number) * MiB)
    return entries, memory


# --- DeepSpeed engine (ThroughputTimer, see_memory_usage) -----------------------------------------

_DS_TIMER = re.compile(r"global_step=(\d+),.*?CurrSamplesPerSec=" + _VALUE)
_DS_TIMER_MEMORY = re.compile(r"MaxMemAllocated=" + _VALUE + r"\s*GB")
_DS_SEE_MEMORY = re.compile(r"Max_MA\s+" + _VALUE + r"\s*GB.*?Max_CA\s+" + _VALUE + r"\s*GB")


def _deepspeed(lines: list[tuple[int, str]], where: str, gpus: int, seq_len: int,
               gbs_seqs: int) -> tuple[list[StepEntry], _Memory]:
    """Megatron-DeepSpeed iteration lines where the log has them, else the engine's timer lines."""
    entries, memory = _megatron(lines, where, gpus, seq_len, gbs_seqs)
    timer = []
    for number, line in lines:
        match = _DS_TIMER.search(line)
        if match:
            samples = figure(match.group(2), "CurrSamplesPerSec", where, number)
            timer.append(StepEntry(int(match.group(1)), samples * seq_len / gpus, number))
            mem = _DS_TIMER_MEMORY.search(line)
            if mem:
                memory.allocated.append(figure(mem.group(1), "MaxMemAllocated", where, number) * GiB)
            continue
        match = _DS_SEE_MEMORY.search(line)
        if match:
            memory.allocated.append(figure(match.group(1), "Max_MA", where, number) * GiB)
            memory.reserved.append(figure(match.group(2), "Max_CA", where, number) * GiB)
    return (entries or timer), memory


# --- torchtitan -------------------------------------------------------------------------------

_TITAN_STEP = re.compile(r"\bstep:\s*(\d+)\b")
_TITAN_TPS = re.compile(r"\btps:\s*" + _VALUE)
_TITAN_MEMORY = re.compile(r"\bmemory:\s*([^\s(]+?)\s*GiB")


def _torchtitan(lines: Iterable[tuple[int, str]], where: str) -> tuple[list[StepEntry], _Memory]:
    entries, memory = [], _Memory()
    for number, line in lines:
        if "validate step:" in line:
            continue
        step, tps = _TITAN_STEP.search(line), _TITAN_TPS.search(line)
        if not (step and tps):
            continue
        entries.append(StepEntry(int(step.group(1)), figure(tps.group(1), "tps", where, number), number))
        mem = _TITAN_MEMORY.search(line)
        if mem:
            memory.reserved.append(figure(mem.group(1), "memory (GiB)", where, number) * GiB)
    return entries, memory


# --- nanotron ---------------------------------------------------------------------------------

_NANOTRON_ITER = re.compile(r"iteration:\s*(\d+)\s*/\s*\d+\s*\|")
_NANOTRON_PEAK = re.compile(r"Peak allocated\s+([^\s]+?)\s*MiB.*?Peak reserved:\s*([^\s]+?)\s*MiB")


def _nanotron(lines: Iterable[tuple[int, str]], where: str, gpus: int | None) -> tuple[list[StepEntry], _Memory]:
    entries, memory = [], _Memory()
    for number, line in lines:
        match = _NANOTRON_ITER.search(line)
        if match:
            values = _fields(line[match.end():], "|")
            if "tokens_per_sec_per_gpu" in values:
                tokens = figure(values["tokens_per_sec_per_gpu"], "tokens_per_sec_per_gpu", where, number, human=True)
            elif "tokens_per_sec" in values and gpus:
                tokens = figure(values["tokens_per_sec"], "tokens_per_sec", where, number, human=True) / gpus
            else:
                continue
            entries.append(StepEntry(int(match.group(1)), tokens, number))
            if "cuda_max_memory_reserved" in values:
                memory.reserved.append(figure(values["cuda_max_memory_reserved"], "cuda_max_memory_reserved", where,
                                              number, human=True))
            continue
        peak = _NANOTRON_PEAK.search(line)
        if peak:
            memory.allocated.append(figure(peak.group(1), "Peak allocated", where, number) * MiB)
            memory.reserved.append(figure(peak.group(2), "Peak reserved", where, number) * MiB)
    return entries, memory


# --- entry point ------------------------------------------------------------------------------

def read_log_lines(path: str | Path) -> list[tuple[int, str]]:
    """(line number, text without ANSI colour codes) of a log file."""
    from autoplan.files import MAX_LOG_BYTES, read_user_text

    text = read_user_text(path, max_bytes=MAX_LOG_BYTES, errors="replace")
    return [(i + 1, _ANSI.sub("", line)) for i, line in enumerate(text.splitlines())]


def log_format(name: str) -> str:
    """The parser of a format name (Megatron-Bridge reads as Megatron); LogImportError if unknown."""
    fmt = name.strip().lower()
    if fmt not in LOG_FORMATS:
        raise LogImportError(f"unknown log format '{name}'; known: {', '.join(LOG_FORMATS)}")
    return ALIASES.get(fmt, fmt)


def parse_log(path: str | Path, log_format_name: str, *, gpus: int | None = None, seq_len: int | None = None,
              gbs_seqs: int | None = None, skip_steps: int = 2) -> LogSummary:
    """Median tokens/s per GPU after ``skip_steps`` warm-up steps, and the peak memory.

    Megatron and DeepSpeed need ``gpus``, ``seq_len`` and (when the lines lack ``global batch
    size``) ``gbs_seqs``: Megatron's log gives only the iteration time. Raises
    ``LogImportError`` when the log holds no step line of the format, every step is a warm-up
    step, or a figure is not a finite positive number (naming the file and line).
    """
    fmt = log_format(log_format_name)
    if skip_steps < 0:
        raise LogImportError(f"skip_steps >= 0 must hold, got {skip_steps}")
    lines = read_log_lines(path)
    where = str(path)
    if fmt in ("megatron", "deepspeed"):
        if not (gpus and seq_len and gbs_seqs):
            raise LogImportError(f"a {fmt} log gives the iteration time or samples/s: tokens/s per GPU = "
                                 "gbs·seq_len/(time·gpus) needs gpus, seq_len and gbs_seqs in the layout "
                                 f"(got gpus={gpus}, seq_len={seq_len}, gbs_seqs={gbs_seqs})")
        parse = _megatron if fmt == "megatron" else _deepspeed
        entries, memory = parse(lines, where, gpus, seq_len, gbs_seqs)
    elif fmt == "torchtitan":
        entries, memory = _torchtitan(lines, where)
    else:
        entries, memory = _nanotron(lines, where, gpus)
    return summarise(where, fmt, entries, memory, skip_steps)


_EXAMPLE = {"megatron": "'iteration 10/ 100 | ... | elapsed time per iteration (ms): 1147.6 | ...'",
            "torchtitan": "'step: 10  loss: ...  memory: 61.23GiB(77.38%)  tps: 5,762  ...'",
            "nanotron": "'iteration: 12 / 20 | ... | tokens_per_sec_per_gpu: 3.57E+04 | ...'",
            "deepspeed": "'iteration 2/ 100 | ... | tokens per gpu per second (tgs): 1613.5 | ...' or "
                         "'... global_step=200, RunningAvgSamplesPerSec=58.7, CurrSamplesPerSec=58.75, ...'"}


def summarise(path: str, fmt: str, entries: list[StepEntry], memory: _Memory, skip_steps: int) -> LogSummary:
    """Drop the first ``skip_steps`` distinct steps, take the median of the rest."""
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
    if memory.allocated and not memory.reserved:
        notes.append(f"the log gives allocated memory only (peak {max(memory.allocated) / GiB:.2f} GiB), a lower "
                     "bound of the reserved peak autoplan predicts: no peak memory taken from it")
    return LogSummary(log_format=fmt, path=path, entries=entries, used=used, skipped_steps=skipped,
                      tokens_per_s_per_gpu=float(statistics.median(e.tokens_per_s_per_gpu for e in used)),
                      peak_memory_bytes=max(memory.reserved) if memory.reserved else math.nan,
                      peak_allocated_bytes=max(memory.allocated) if memory.allocated else math.nan, notes=notes)
