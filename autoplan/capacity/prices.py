"""GPU-hour prices: the editable defaults in ``hardware_db/prices.yaml`` and ``--gpu-hour-price``.

A price is data with a provenance (kind, provider, source, date), never a constant in code. The
file maps a GPU preset name to ``price: <number> USD per GPU-hour`` and its provenance; a
command-line override ``h100-sxm=2.5,b200=4.0`` replaces the file's figure for those GPUs.
"""

from __future__ import annotations

import datetime
import math
import re
from dataclasses import dataclass
from pathlib import Path

from autoplan.errors import AutoplanError, SpecError, shown
from autoplan.paths import data_dir
from autoplan.specs.yaml_io import check_keys, check_name, read_mapping

PRICE_KINDS = ("on-demand", "reserved", "spot", "assumed", "command line")
PRICE_FILE = "prices.yaml"
_PRICE_RE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*USD per GPU-hour\s*$")
MAX_USD_PER_GPU_HOUR = 1000.0  # no GPU rents for more; a larger figure is a typo (cents, per node)


@dataclass(frozen=True)
class GpuHourPrice:
    """The price of one GPU for one hour (USD) and where the figure comes from."""

    gpu: str  # the GPU preset name
    usd_per_gpu_hour: float
    kind: str  # one of PRICE_KINDS
    provider: str
    source: str
    date: str  # ISO date the source states ('' for a command-line price)


def default_price_file() -> Path:
    return data_dir("hardware_db") / PRICE_FILE


def parse_usd_per_gpu_hour(value: object, where: str) -> float:
    """'2.69 USD per GPU-hour' -> 2.69; a bare number is refused (state the unit)."""
    match = _PRICE_RE.match(value) if isinstance(value, str) else None
    if match is None:
        raise SpecError(where, f"price: expected a price like '2.69 USD per GPU-hour', got {shown(value)}")
    return _checked_price(float(match.group(1)), where)


def _checked_price(usd: float, where: str) -> float:
    if not (math.isfinite(usd) and 0 < usd <= MAX_USD_PER_GPU_HOUR):
        raise SpecError(where, f"price: must lie in (0, {MAX_USD_PER_GPU_HOUR:g}] USD per GPU-hour, got {usd:g}")
    return usd


def load_prices(path: str | Path | None = None) -> dict[str, GpuHourPrice]:
    """The prices of ``path`` (default ``hardware_db/prices.yaml``) by GPU preset name; each
    key must name a preset (or an alias of one, stored under the preset's name)."""
    from autoplan.specs.hardware import load_gpu

    path = Path(path) if path is not None else default_price_file()
    data = read_mapping(path)
    prices: dict[str, GpuHourPrice] = {}
    for key, entry in data.items():
        where = f"{path}: {key}"
        name = load_gpu(check_name(key, "GPU", str(path))).name
        if not isinstance(entry, dict):
            raise SpecError(where, f"expected a mapping with price, kind, provider, source, date; got {shown(entry)}")
        check_keys(entry, where, required=("price", "kind", "provider", "source", "date"))
        if entry["kind"] not in PRICE_KINDS[:-1]:
            raise SpecError(where, f"kind: expected one of {', '.join(PRICE_KINDS[:-1])}, got {shown(entry['kind'])}")
        if name in prices:
            raise SpecError(where, f"a second price for {name} (aliases name the same GPU)")
        prices[name] = GpuHourPrice(gpu=name, usd_per_gpu_hour=parse_usd_per_gpu_hour(entry["price"], where),
                                    kind=entry["kind"], provider=check_name(entry["provider"], "provider", where),
                                    source=check_name(entry["source"], "source", where),
                                    date=_iso_date(entry["date"], where))
    return prices


def _iso_date(value: object, where: str) -> str:
    if isinstance(value, datetime.date):
        return value.isoformat()
    try:
        return datetime.date.fromisoformat(str(value)).isoformat()
    except ValueError:
        raise SpecError(where, f"date: expected an ISO date like 2026-03-17, got {shown(value)}") from None


EVERY_GPU = "*"  # the key of a bare '--gpu-hour-price 2.5': one price for every GPU


def parse_price_overrides(text: str) -> dict[str, float]:
    """'h100-sxm=2.5,b200=4.0' -> {'h100-sxm': 2.5, 'b200': 4.0} (GPU names resolved to presets,
    USD per GPU-hour); a bare '2.5' prices every GPU (key ``EVERY_GPU``)."""
    from autoplan.specs.hardware import load_gpu

    out: dict[str, float] = {}
    for part in (p.strip() for p in str(text).split(",")):
        name, _, number = part.rpartition("=") if "=" in part else (EVERY_GPU, "=", part)
        try:
            usd = float(number)
        except ValueError:
            usd = math.nan
        if not name.strip() or math.isnan(usd):
            raise AutoplanError(f"--gpu-hour-price: expected GPU=USD pairs like 'h100-sxm=2.5,b200=4.0' "
                                f"(or one price for every GPU, '2.5'), got {shown(part)}")
        key = EVERY_GPU if name == EVERY_GPU else load_gpu(name.strip()).name
        out[key] = _checked_price(usd, "--gpu-hour-price")
    return out


def resolve_prices(gpus: list[str], overrides: dict[str, float],
                   defaults: dict[str, GpuHourPrice]) -> dict[str, GpuHourPrice]:
    """The price of each GPU in ``gpus``: the override, else the default; a GPU with neither is
    an error naming the file and the option."""
    if EVERY_GPU in overrides:
        overrides = {**{g: overrides[EVERY_GPU] for g in gpus}, **overrides}
    missing = [g for g in gpus if g not in overrides and g not in defaults]
    if missing:
        raise AutoplanError(f"no GPU-hour price for {', '.join(missing)} in hardware_db/{PRICE_FILE}: give one "
                            f"with --gpu-hour-price {missing[0]}=USD (priced there: {', '.join(sorted(defaults))})")
    return {g: (GpuHourPrice(g, overrides[g], "command line", "--gpu-hour-price", "--gpu-hour-price", "")
                if g in overrides else defaults[g]) for g in gpus}
