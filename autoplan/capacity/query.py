"""What a capacity question asks: GPU types, a GPU-count range, the tokens and batch phases of
the run, GPU-hour prices, and an optional deadline and budget; with the parsers of the
command-line spellings ('90d', '20M')."""

from __future__ import annotations

import math
from dataclasses import dataclass

from autoplan.capacity.prices import GpuHourPrice
from autoplan.capacity.schedule import BatchPhase
from autoplan.errors import AutoplanError, shown
from autoplan.specs.hardware import GPUSpec
from autoplan.units import UnitError, parse_count

HOURS_PER_DAY = 24.0
_DURATION_UNITS_DAYS = {"d": 1.0, "day": 1.0, "days": 1.0, "w": 7.0, "week": 7.0, "weeks": 7.0,
                        "h": 1 / HOURS_PER_DAY, "hour": 1 / HOURS_PER_DAY, "hours": 1 / HOURS_PER_DAY}


@dataclass(frozen=True)
class CapacityQuery:
    """GPU types and the rented GPU-count range to search, the run's tokens in
    batch phases, the price of each type, the limits, and which objective picks the point."""

    gpu_types: tuple[GPUSpec, ...]
    gpus_low: int
    gpus_high: int
    phases: tuple[BatchPhase, ...]
    prices: dict[str, GpuHourPrice]
    deadline_days: float | None = None
    budget_usd: float | None = None
    prefer: str = "cost"  # autoplan.capacity.front.PREFER
    pessimistic: bool = False  # check the limits against the slow end of the error band
    refine_rounds: int = 2  # grid refinements near the front

    @property
    def hardware(self) -> tuple[str, ...]:
        """The GPU types' names (the keys of ``prices``)."""
        return tuple(gpu.name for gpu in self.gpu_types)

    @property
    def train_tokens(self) -> float:
        return float(sum(p.tokens for p in self.phases))

    def price_usd(self) -> dict[str, float]:
        return {name: price.usd_per_gpu_hour for name, price in self.prices.items()}


def parse_duration_days(text: str) -> float:
    """'90d', '12w', '2160h' or '90' (days) -> days."""
    value = str(text).strip().lower()
    number = value.rstrip("abcdefghijklmnopqrstuvwxyz ")
    unit = value[len(number):].strip() or "d"
    try:
        days = float(number) * _DURATION_UNITS_DAYS[unit]
    except (ValueError, KeyError):
        raise AutoplanError(f"--deadline: expected a duration like '90d', '12w' or '2160h', got {shown(text)}") from None
    if not (math.isfinite(days) and days > 0):
        raise AutoplanError(f"--deadline: must be a positive duration, got {shown(text)}")
    return days


def parse_budget_usd(text: str) -> float:
    """'20M', '$20M', '2.5e7' -> US dollars (decimal suffixes K, M, B/G, T)."""
    try:
        return parse_count(str(text).strip().lstrip("$"), binary=False, what="a budget in USD")
    except UnitError as exc:
        raise AutoplanError(f"--budget: {exc}") from None
