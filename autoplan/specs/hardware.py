"""GPUSpec and Cluster: what one accelerator can do, and how many of them are wired together.

Presets live in ``hardware_db/gpus/*.yaml`` (one file per GPU, the file stem is its name); a
user file with the same fields can be given by path. Values in YAML carry their units
(``memory: 80 GiB``, ``nic_bandwidth: 400 Gb/s per direction``); inside, every quantity is a
float in bytes, bytes/s, FLOP/s or seconds and its name says which.

Link bandwidths are per GPU and **per direction**. Vendors often quote NVLink/XGMI with both
directions added (H100: "900 GB/s" = 450 GB/s each way); a file must say ``per direction``,
and a value marked ``both directions``/``bidirectional`` is refused with the halved value.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from functools import lru_cache
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from autoplan.errors import AutoplanError, SpecError, UnknownNameError, shown
from autoplan.paths import data_dir
from autoplan.specs.yaml_io import check_keys, check_name, get_int, is_file_stem, read_mapping
from autoplan.units import (
    BITS_PER_BYTE,
    GB,
    PER_DIRECTION,
    TB,
    GiB,
    MiB,
    UnitError,
    bandwidth_qualifier,
    format_bytes,
    normalise_qualifier,
    parse_bandwidth,
    parse_bytes,
    parse_exp_rate,
    parse_flops_rate,
    parse_time,
)

_BOTH_DIRECTIONS_WORDS = ("both", "bidir", "duplex")
_REQUIRED_KEYS = ("name", "memory", "usable_memory", "peak_bf16", "peak_fp8", "hbm_bandwidth",
                  "scale_up_bandwidth", "scale_up_domain", "nic_bandwidth", "gpus_per_node",
                  "scale_up_latency", "scale_out_latency", "sources")
_OPTIONAL_KEYS = ("aliases", "description", "notes", "host_link", "fp8_block_scaled_mma", "host_memory",
                  "host_memory_bandwidth", "power_limited_clock_fraction", "scale_up_peer_link",
                  "exp_throughput", "host_launch_slowdown")
# The GPU's link to host memory when a file does not state one: PCIe Gen5 x16, 32 GT/s per lane
# × 16 lanes, 64 GB/s per direction nominal (PCI-SIG PCIe 5.0 Base Specification).
PCIE_GEN5_X16_BYTES_PER_S = 64e9
_PRESET_SUFFIXES = (".yaml", ".yml", ".json")


@dataclass(frozen=True)
class GPUSpec:
    """One accelerator and the node it usually sits in (per-GPU figures throughout).

    ``usable_memory_bytes`` is what the driver lets one process allocate (nvidia-smi's total),
    below the HBM capacity. Peaks are dense (no sparsity). ``peak_fp8_flops_per_s`` is 0.0 for
    GPUs without FP8 (A100). Bandwidths are per direction; latencies are nominal per-message
    costs for the collective model (NCCL-typical figures unless a preset's notes say more).
    """

    name: str
    aliases: tuple[str, ...]
    description: str
    memory_bytes: float
    usable_memory_bytes: float
    peak_bf16_flops_per_s: float
    peak_fp8_flops_per_s: float
    hbm_bytes_per_s: float
    scale_up_bytes_per_s: float
    scale_up_domain_size: int
    nic_bytes_per_s: float
    gpus_per_node: int
    scale_up_latency_s: float
    scale_out_latency_s: float
    sources: tuple[str, ...]
    host_bytes_per_s: float = PCIE_GEN5_X16_BYTES_PER_S  # GPU <-> host memory, per direction
    # Tensor cores that take per-block scale factors in the MMA (Blackwell tcgen05 block-scaled
    # MMA, MXFP8); on Hopper block scales are applied outside the MMA (autoplan.cost.fp8).
    fp8_block_scaled_mma: bool = False
    # The node's host DRAM and its bandwidth divided by its GPUs (offload of model states,
    # autoplan.cost.offload); 0 where a file does not state them: nothing can be offloaded.
    host_memory_bytes: float = 0.0
    host_memory_bytes_per_s: float = 0.0
    # Below the chip's default power limit: the fraction of its dense-GEMM clock (and rate) the part
    # sustains (autoplan/calibration/power.py, from power and clock measured at 700 W; default 1).
    power_limited_clock_fraction: float = 1.0
    # A scale-up fabric that is a full mesh of point-to-point links, not a switch (AMD's XGMI on an
    # MI300X UBB: 7 links of 64 GB/s per direction): the bandwidth of the one link between a GPU
    # pair, so that a group of n ranks of one domain reaches (n - 1) links, at most
    # scale_up_bytes_per_s (autoplan.cost.comm.group_link); 0 = a switch (NVSwitch): every group
    # reaches scale_up_bytes_per_s.
    scale_up_peer_link_bytes_per_s: float = 0.0
    exp_ops_per_s: float = 0.0  # special-function-unit exponentials per second (MUFU.EX2); 0 = not stated
    # (the attention's exp floor is then not applied: autoplan.cost.time.attention_s)
    # The host CPU's time per eager kernel launch over the x86 DGX hosts' (Intel Xeon) that the
    # profiles' host_launch_s is stated for (autoplan.cost.host_dispatch): 1 for those; a Grace CPU's
    # single-thread launch path is slower (a preset states its measurement).
    host_launch_slowdown: float = 1.0

    def __post_init__(self) -> None:
        problem = _gpu_problem(self)
        if problem:
            raise SpecError(f"gpu '{self.name}'", problem)

    @property
    def has_fp8(self) -> bool:
        return self.peak_fp8_flops_per_s > 0

    @property
    def compute_peak_bf16_flops_per_s(self) -> float:
        """Nominal peak × power_limited_clock_fraction (MFU keeps the nominal peak)."""
        return self.peak_bf16_flops_per_s * self.power_limited_clock_fraction

    @property
    def compute_exp_ops_per_s(self) -> float:
        """exp_ops_per_s × power_limited_clock_fraction: the SFUs run on the same SM clock."""
        return self.exp_ops_per_s * self.power_limited_clock_fraction


_YAML_KEYS = {"memory_bytes": "memory", "usable_memory_bytes": "usable_memory",
              "peak_bf16_flops_per_s": "peak_bf16", "peak_fp8_flops_per_s": "peak_fp8",
              "hbm_bytes_per_s": "hbm_bandwidth", "scale_up_bytes_per_s": "scale_up_bandwidth",
              "scale_up_domain_size": "scale_up_domain", "nic_bytes_per_s": "nic_bandwidth",
              "scale_up_latency_s": "scale_up_latency", "scale_out_latency_s": "scale_out_latency",
              "host_bytes_per_s": "host_link", "host_memory_bytes": "host_memory",
              "host_memory_bytes_per_s": "host_memory_bandwidth",
              "scale_up_peer_link_bytes_per_s": "scale_up_peer_link", "exp_ops_per_s": "exp_throughput"}
_ZERO_OK = ("peak_fp8_flops_per_s", "host_memory_bytes", "host_memory_bytes_per_s", "scale_up_peer_link_bytes_per_s",
            "exp_ops_per_s")


def _gpu_problem(gpu: Any, names: Mapping[str, str] | None = None) -> str | None:
    """The first broken invariant of ``gpu`` (a GPUSpec or its fields as attributes) as a
    message naming each field as ``names`` spells it (YAML keys when read from a file)."""
    names = names or {}
    if not isinstance(gpu.name, str) or not gpu.name.strip():
        return f"name must be a non-empty string, got {shown(gpu.name)}"
    for f in fields(GPUSpec):
        value, label = getattr(gpu, f.name), names.get(f.name, f.name)
        if f.name in ("scale_up_domain_size", "gpus_per_node"):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                return f"{label} must be an integer >= 1, got {shown(value)}"
        elif f.name.endswith(("_bytes", "_s")):
            zero_ok = f.name in _ZERO_OK
            if isinstance(value, bool) or not isinstance(value, (int, float)) \
                    or not math.isfinite(value) or value < 0 or (value == 0 and not zero_ok):
                bound = ">= 0 (0 means none)" if zero_ok else "> 0"
                return f"{label} must be a finite number {bound}, got {shown(value)}"
    if isinstance(f := gpu.power_limited_clock_fraction, bool) or not isinstance(f, (int, float)) or not 0 < f <= 1:
        return f"power_limited_clock_fraction must be a number in (0, 1], got {shown(f)}"
    if isinstance(r := gpu.host_launch_slowdown, bool) or not isinstance(r, (int, float)) or not 0 < r < math.inf:
        return f"host_launch_slowdown must be a finite number > 0, got {shown(r)}"
    if gpu.usable_memory_bytes > gpu.memory_bytes:
        return ("usable_memory <= memory must hold, got usable_memory="
                f"{format_bytes(gpu.usable_memory_bytes)}, memory={format_bytes(gpu.memory_bytes)} "
                "(note 'GB' is 10^9 bytes and 'GiB' 2^30: HBM sizes sold as '80 GB' are 80 GiB)")
    if not gpu.sources or not all(isinstance(s, str) and s.strip() for s in gpu.sources):
        return f"sources must be a non-empty list of non-empty strings, got {shown(gpu.sources)}"
    return None


@dataclass(frozen=True)
class Cluster:
    """``num_gpus`` GPUs of one kind: nodes of ``gpus_per_node``, each GPU with its own NIC
    share ``nic_bytes_per_s`` (per direction), ``scale_up_domain_size`` GPUs per NVLink domain."""

    gpu: GPUSpec
    num_gpus: int
    gpus_per_node: int
    nic_bytes_per_s: float
    scale_up_domain_size: int

    def __post_init__(self) -> None:
        _check_cluster(self)

    @property
    def num_nodes(self) -> int:
        """Nodes in use; a job smaller than one node uses one (partly filled) node."""
        return -(-self.num_gpus // self.gpus_per_node)


def _check_cluster(c: Cluster) -> None:
    for name in ("num_gpus", "gpus_per_node", "scale_up_domain_size"):
        value = getattr(c, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise SpecError("cluster", f"{name} must be an integer >= 1, got {shown(value)}")
    nic = c.nic_bytes_per_s
    if isinstance(nic, bool) or not isinstance(nic, (int, float)) or not math.isfinite(nic) or nic <= 0:
        raise SpecError("cluster", f"nic_bytes_per_s must be a finite number > 0, got {shown(nic)}")
    if c.num_gpus > c.gpus_per_node and c.num_gpus % c.gpus_per_node:
        below = c.num_gpus // c.gpus_per_node * c.gpus_per_node
        raise SpecError("cluster", f"num_gpus ({c.num_gpus}) must be a multiple of gpus_per_node "
                                   f"({c.gpus_per_node}) when it spans more than one node "
                                   f"(did you mean {below} or {below + c.gpus_per_node}?)")


def make_cluster(gpu: GPUSpec, num_gpus: int, *, gpus_per_node: int | None = None,
                 nic_bytes_per_s: float | None = None,
                 scale_up_domain_size: int | None = None) -> Cluster:
    """A cluster of ``num_gpus`` ``gpu``s; each override (None = the GPU preset's value) is how
    the CLI's ``--gpus-per-node``, ``--nic`` and ``--scale-up-domain`` reach the model."""
    return Cluster(
        gpu=gpu, num_gpus=num_gpus,
        gpus_per_node=gpu.gpus_per_node if gpus_per_node is None else gpus_per_node,
        nic_bytes_per_s=gpu.nic_bytes_per_s if nic_bytes_per_s is None else nic_bytes_per_s,
        scale_up_domain_size=(gpu.scale_up_domain_size if scale_up_domain_size is None
                              else scale_up_domain_size))


# --- reading YAML ------------------------------------------------------------------------

def _quantity(data: Mapping[str, Any], key: str, where: str, parse: Callable[[object], float],
              kind: str, example: str) -> float:
    value = data[key]
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        raise SpecError(where, f"{key}: expected {kind} like '{example}', got {shown(value)} "
                               "(a bare number: state the unit)")
    try:
        parsed = parse(value)
    except UnitError as exc:
        raise SpecError(where, f"{key}: {exc}") from None
    limit = _PLAUSIBLE_MAX.get(kind)
    if limit is not None and parsed > limit[0]:
        raise SpecError(where, f"{key}: {shown(value)} is implausibly large (more than {limit[1]})")
    return parsed


# Upper bounds far above any real accelerator; larger values are typos (e.g. '1e30 GiB').
_PLAUSIBLE_MAX = {"a size": (2.0**50, "1 PiB"), "a compute rate": (1e18, "1 EFLOP/s"),
                  "an exponential rate": (1e16, "10,000 Texp/s"),
                  "a time": (1.0, "1 s"), "a bandwidth": (1e15, "1 PB/s")}


def _bandwidth(data: Mapping[str, Any], key: str, where: str, example: str, *,
               directional: bool) -> float:
    """A bandwidth; a link's must end in 'per direction', HBM's must carry no qualifier."""
    rate = _quantity(data, key, where, lambda text: parse_bandwidth(text, qualifiers=None), "a bandwidth", example)
    qualifier = normalise_qualifier(bandwidth_qualifier(data[key]))
    if not directional:
        if qualifier:
            raise SpecError(where, f"{key}: expected a bandwidth like '{example}' with nothing "
                                   f"after the unit, got {shown(data[key])}")
        return rate
    if any(word in qualifier.replace(" ", "") for word in _BOTH_DIRECTIONS_WORDS):
        raise SpecError(where, f"{key}: {shown(data[key])} adds both directions; autoplan wants the "
                               f"bandwidth per direction: halve it, e.g. "
                               f"'{rate / 2 / GB:g} GB/s {PER_DIRECTION}'")
    if qualifier != PER_DIRECTION:
        raise SpecError(where, f"{key}: say which direction, like '{example}' (vendor figures "
                               f"often add both directions: halve those), got {shown(data[key])}")
    return rate


def _strings(data: Mapping[str, Any], key: str, where: str) -> tuple[str, ...]:
    value = data.get(key, [])
    if isinstance(value, str) or not isinstance(value, list) or not all(
            isinstance(item, str) and item.strip() for item in value):
        raise SpecError(where, f"{key}: expected a list of non-empty strings, got {shown(value)}")
    return tuple(item.strip() for item in value)


def _flag(data: Mapping[str, Any], key: str, where: str) -> bool:
    value = data.get(key, False)
    if not isinstance(value, bool):
        raise SpecError(where, f"{key}: expected true or false, got {shown(value)}")
    return value


def gpu_from_mapping(data: dict, where: str) -> GPUSpec:
    """A GPUSpec from a YAML/JSON mapping (see hardware_db/README.md for the schema)."""
    check_keys(data, where, required=_REQUIRED_KEYS, optional=_OPTIONAL_KEYS)
    for key in ("name", "description", "notes"):
        if key in data and not isinstance(data[key], str):
            raise SpecError(where, f"{key}: expected a string, got {shown(data[key])}")
    sizes = {key: _quantity(data, key, where, parse_bytes, "a size", example)
             for key, example in (("memory", "80 GiB"), ("usable_memory", "81559 MiB"))}
    flops = {key: _quantity(data, key, where, parse_flops_rate, "a compute rate", example)
             for key, example in (("peak_bf16", "989 TFLOP/s"), ("peak_fp8", "1979 TFLOP/s"))}
    times = {key: _quantity(data, key, where, parse_time, "a time", example)
             for key, example in (("scale_up_latency", "3 us"), ("scale_out_latency", "10 us"))}
    kwargs = dict(
        name=check_name(data["name"], "name", where),
        aliases=tuple(check_name(alias, "aliases", where) for alias in _strings(data, "aliases", where)),
        description=data.get("description", "").strip(),
        memory_bytes=sizes["memory"], usable_memory_bytes=sizes["usable_memory"],
        peak_bf16_flops_per_s=flops["peak_bf16"], peak_fp8_flops_per_s=flops["peak_fp8"],
        hbm_bytes_per_s=_bandwidth(data, "hbm_bandwidth", where, "3.35 TB/s", directional=False),
        scale_up_bytes_per_s=_bandwidth(data, "scale_up_bandwidth", where,
                                        "450 GB/s per direction", directional=True),
        scale_up_domain_size=get_int(data, "scale_up_domain", where),
        nic_bytes_per_s=_bandwidth(data, "nic_bandwidth", where, "400 Gb/s per direction",
                                   directional=True),
        gpus_per_node=get_int(data, "gpus_per_node", where),
        scale_up_latency_s=times["scale_up_latency"], scale_out_latency_s=times["scale_out_latency"],
        sources=_strings(data, "sources", where),
        host_bytes_per_s=(_bandwidth(data, "host_link", where, "64 GB/s per direction", directional=True)
                          if "host_link" in data else PCIE_GEN5_X16_BYTES_PER_S),
        fp8_block_scaled_mma=_flag(data, "fp8_block_scaled_mma", where),
        host_memory_bytes=(_quantity(data, "host_memory", where, parse_bytes, "a size", "256 GB")
                           if "host_memory" in data else 0.0),
        host_memory_bytes_per_s=(_bandwidth(data, "host_memory_bandwidth", where, "76.8 GB/s", directional=False)
                                 if "host_memory_bandwidth" in data else 0.0),
        power_limited_clock_fraction=data.get("power_limited_clock_fraction", 1.0),
        host_launch_slowdown=data.get("host_launch_slowdown", 1.0),
        scale_up_peer_link_bytes_per_s=(_bandwidth(data, "scale_up_peer_link", where, "64 GB/s per direction",
                                                   directional=True) if "scale_up_peer_link" in data else 0.0),
        exp_ops_per_s=(_quantity(data, "exp_throughput", where, parse_exp_rate, "an exponential rate", "10.7 Texp/s")
                       if "exp_throughput" in data else 0.0))
    problem = _gpu_problem(SimpleNamespace(**kwargs), _YAML_KEYS)
    if problem:
        raise SpecError(where, problem)
    return GPUSpec(**kwargs)


# --- writing YAML: the inverse of gpu_from_mapping ---------------------------------------

# Per YAML key: the units to write a quantity in, the first that reads back exactly wins (the
# last always does: a factor of 1 or a power of two), and what follows the unit.
_WRITE_UNITS: dict[str, tuple[tuple[tuple[str, float], ...], str]] = {
    "memory": ((("GiB", GiB), ("MiB", MiB), ("GB", GB), ("B", 1.0)), ""),
    "usable_memory": ((("GiB", GiB), ("MiB", MiB), ("GB", GB), ("B", 1.0)), ""),
    "peak_bf16": ((("TFLOP/s", 1e12), ("FLOP/s", 1.0)), ""),
    "peak_fp8": ((("TFLOP/s", 1e12), ("FLOP/s", 1.0)), ""),
    "hbm_bandwidth": ((("TB/s", TB), ("GB/s", GB), ("GiB/s", GiB)), ""),
    "scale_up_bandwidth": ((("GB/s", GB), ("GiB/s", GiB)), " " + PER_DIRECTION),
    "host_link": ((("GB/s", GB), ("GiB/s", GiB)), " " + PER_DIRECTION),
    "scale_up_peer_link": ((("GB/s", GB), ("GiB/s", GiB)), " " + PER_DIRECTION),
    "host_memory": ((("GB", GB), ("GiB", GiB), ("B", 1.0)), ""),
    "host_memory_bandwidth": ((("GB/s", GB), ("GiB/s", GiB)), ""),
    "nic_bandwidth": ((("Gb/s", GB / BITS_PER_BYTE), ("GB/s", GB), ("GiB/s", GiB)), " " + PER_DIRECTION),
    "scale_up_latency": ((("us", 1e-6), ("s", 1.0)), ""),
    "scale_out_latency": ((("us", 1e-6), ("s", 1.0)), ""),
    "exp_throughput": ((("Texp/s", 1e12), ("exp/s", 1.0)), ""),
}


def gpu_to_mapping(gpu: GPUSpec) -> dict[str, Any]:
    """What :func:`gpu_from_mapping` reads back as ``gpu``, each quantity with its unit, exactly."""
    data: dict[str, Any] = {"name": gpu.name, "aliases": list(gpu.aliases), "description": gpu.description}
    for attr, key in _YAML_KEYS.items():
        value = getattr(gpu, attr)
        if key in ("host_memory", "host_memory_bandwidth", "scale_up_peer_link", "exp_throughput") and not value:
            continue  # not stated: left out, read back as 0
        if key in _WRITE_UNITS:
            units, suffix = _WRITE_UNITS[key]
            value = _exact_quantity(value, units) + suffix
        data[key] = value
    data.update(gpus_per_node=gpu.gpus_per_node, sources=list(gpu.sources))
    if gpu.fp8_block_scaled_mma:
        data["fp8_block_scaled_mma"] = True
    if gpu.power_limited_clock_fraction != 1.0:
        data["power_limited_clock_fraction"] = gpu.power_limited_clock_fraction
    if gpu.host_launch_slowdown != 1.0:
        data["host_launch_slowdown"] = gpu.host_launch_slowdown
    return data


def _exact_quantity(value: float, units: tuple[tuple[str, float], ...]) -> str:
    """``value`` as '<number> <unit>' in the first unit whose number reads back exactly."""
    for unit, factor in units:
        number = value / factor
        if number * factor == value:
            break
    text = repr(float(number))
    return f"{text.removesuffix('.0')} {unit}"


# --- presets ----------------------------------------------------------------------------

@lru_cache(maxsize=1)
def _presets() -> tuple[dict[str, GPUSpec], tuple[GPUSpec, ...]]:
    """(lower-cased name or alias -> spec, specs sorted by name) from hardware_db/gpus/."""
    by_name: dict[str, GPUSpec] = {}
    specs = []
    folder = data_dir("hardware_db") / "gpus"
    for path in sorted(folder.glob("*.yaml")):
        gpu = _preset_file(path)
        if gpu.name != path.stem:
            raise SpecError(str(path), f"name '{gpu.name}' must equal the file name '{path.stem}'")
        for key in (gpu.name, *gpu.aliases):
            if key.lower() in by_name:
                raise SpecError(str(path), f"name or alias '{key}' is already used by "
                                           f"'{by_name[key.lower()].name}'")
            by_name[key.lower()] = gpu
        specs.append(gpu)
    return by_name, tuple(specs)


@lru_cache(maxsize=None)
def _preset_file(path: Path) -> GPUSpec:
    """One preset file, read once (the same object whether looked up alone or listed)."""
    return gpu_from_mapping(read_mapping(path), str(path))


def _own_file_preset(key: str) -> GPUSpec | None:
    """The preset named ``key`` read from its own file ``hardware_db/gpus/<key>.yaml`` alone,
    the others unread (~0.5 ms each); None where there is no such file (an alias, a typo)."""
    path = data_dir("hardware_db") / "gpus" / f"{key}.yaml"
    if not is_file_stem(key) or not path.is_file():
        return None
    gpu = _preset_file(path)
    return gpu if gpu.name == key else None


def list_gpus() -> list[GPUSpec]:
    """Every preset in hardware_db/gpus/, sorted by name."""
    return list(_presets()[1])


def load_gpu(name_or_path: str | os.PathLike) -> GPUSpec:
    """A preset by name or alias (any case), or a GPU file by path (.yaml/.yml/.json)."""
    if isinstance(name_or_path, os.PathLike):
        return gpu_from_mapping(read_mapping(name_or_path), os.fspath(name_or_path))
    if not isinstance(name_or_path, str) or not name_or_path.strip():
        raise AutoplanError(f"expected a GPU name or a file path, got {shown(name_or_path)}")
    text = name_or_path.strip()
    if text.lower().endswith(_PRESET_SUFFIXES) or "/" in text or "\\" in text:
        return gpu_from_mapping(read_mapping(text), text)
    own = _own_file_preset(text.lower())
    if own is not None:
        return own
    by_name, _ = _presets()
    if text.lower() in by_name:
        return by_name[text.lower()]
    known = {spelling for gpu in _presets()[1] for spelling in (gpu.name, *gpu.aliases)}
    raise UnknownNameError("hardware", text, known)
