"""What the probe's fits become: a GPU for ``--hardware`` and parameter values for ``--profile``.

A probed GPU keeps its datasheet preset's peaks (``hardware_db/gpus/``, matched by the device's
name or named with ``--hardware``): the efficiencies are then the measured rates over those
peaks, as the shipped calibrations are. What the probe measures replaces the preset's figure:
the usable memory, the per-hop latencies of ``cost.comm`` on the levels it timed, and the host
link (the measured pinned payload rate over ``cost.host_link.HOST_LINK_EFFICIENCY``, so that
the offload model's payload is the one measured). A device without a datasheet preset (a CPU)
takes the measured rates as its peaks, and its efficiencies are then 1.

Every parameter is kept inside its hard bounds (``profiles.efficiency``); a value that had to be
moved onto a bound is listed in ``notes`` (a fit on a bound is a finding, STYLE.md).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from autoplan.cost.host_link import HOST_LINK_EFFICIENCY
from autoplan.probe.fit import KernelFit, LinkFigures
from autoplan.profiles.efficiency import PARAMETERS
from autoplan.specs.hardware import GPUSpec

NOMINAL_SCALE_UP_LATENCY_S = 3e-6  # hardware_db/README.md "Adding a GPU": NCCL-typical, nominal
NOMINAL_SCALE_OUT_LATENCY_S = 10e-6
MEASURED = "measured"  # the name of a base whose peaks are the measured rates (no datasheet)


def measured(value: float, digits: int = 4) -> float:
    """A measured figure to ``digits`` significant digits (what a timing resolves; the YAML reads)."""
    return float(f"{value:.{digits}g}")


def mebibytes(num_bytes: float) -> float:
    """Whole MiB, rounded down (nvidia-smi's unit for a card's memory)."""
    return float(int(num_bytes // 2**20) * 2**20)


@dataclass(frozen=True)
class Probed:
    """The measured figures in the cost model's terms."""

    gpu: GPUSpec
    parameters: dict[str, float]  # parameter name -> value, for the profile file
    notes: tuple[str, ...]  # parameters moved onto a bound, figures not measured


def _bounded(name: str, value: float, notes: list[str]) -> float:
    """``value`` to the 4 digits a timing resolves, inside the parameter's bounds; a move onto a
    bound beyond that resolution is noted."""
    low, high = PARAMETERS[name].bounds
    value = measured(value)
    kept = min(max(value, low), high)
    if kept != value:
        notes.append(f"{name}: fitted {value:.4g}, outside [{low:g}, {high:g}]; kept at {kept:g}")
    return kept


def kernel_parameters(k: KernelFit, hbm_bytes_per_s: float, notes: list[str]) -> dict[str, float]:
    """The kernel parameters of ``k`` (fitted against the GPU's BF16 peak) on a GPU of
    ``hbm_bytes_per_s`` datasheet bandwidth."""
    values = {"gemm_efficiency_max": k.gemm_bf16.efficiency, "gemm_half_flops": k.gemm_bf16.half_flops,
              "attention_efficiency": k.attention_max_fraction,
              "attention_half_seq_tokens": k.attention_half_seq,
              "hbm_efficiency": k.copy_bytes_per_s / hbm_bytes_per_s}
    if "tensorwise" in k.fp8_speedup:
        values["fp8_gemm_speedup"] = k.fp8_speedup["tensorwise"]
    return {name: _bounded(name, v, notes) for name, v in values.items()}


def probed_gpu(base: GPUSpec, links: dict[str, LinkFigures | None], *, name: str, usable_memory_bytes: float,
               host_payload_bytes_per_s: float | None, sources: tuple[str, ...], notes: list[str]) -> GPUSpec:
    """``base`` with what the probe measured: memory, latencies, host link; named ``name``."""
    up, out = links.get("scale_up"), links.get("scale_out")
    kept = "the preset's" if base.name != MEASURED else "nominal latencies; the NIC as the scale-up link"
    if up is None:
        notes.append(f"scale_up_latency: not measured (one rank), {kept}")
    if out is None:
        notes.append(f"scale_out_latency, nic_bandwidth: not measured (one node), {kept}")
    gpu = replace(base, name=name, aliases=(), description=f"{base.description} (autoplan probe)".strip(),
                  usable_memory_bytes=min(mebibytes(usable_memory_bytes), base.memory_bytes),
                  scale_up_latency_s=measured(up.hop_latency_s) if up and up.hop_latency_s > 0 else base.scale_up_latency_s,
                  scale_out_latency_s=measured(out.hop_latency_s) if out and out.hop_latency_s > 0 else base.scale_out_latency_s,
                  sources=sources + base.sources)
    if host_payload_bytes_per_s:
        gpu = replace(gpu, host_bytes_per_s=measured(host_payload_bytes_per_s / HOST_LINK_EFFICIENCY))
    return gpu


def measured_base(k: KernelFit, links: dict[str, LinkFigures | None], *, memory_bytes: float,
                  ranks_per_node: int, description: str) -> GPUSpec:
    """A device without a datasheet (a CPU): its measured rates as its peaks, its efficiencies
    then 1 (``k`` fitted against a peak of 1 FLOP/s gives the asymptotic rate as its efficiency)."""
    up, out = links.get("scale_up"), links.get("scale_out")
    link = measured(up.bus_bytes_per_s if up else k.copy_bytes_per_s)
    return GPUSpec(
        name=MEASURED, aliases=(), description=description, memory_bytes=mebibytes(memory_bytes),
        usable_memory_bytes=mebibytes(memory_bytes), peak_bf16_flops_per_s=measured(k.gemm_bf16.efficiency),
        peak_fp8_flops_per_s=0.0, hbm_bytes_per_s=measured(k.copy_bytes_per_s), scale_up_bytes_per_s=link,
        scale_up_domain_size=max(ranks_per_node, 1), nic_bytes_per_s=measured(out.bus_bytes_per_s) if out else link,
        gpus_per_node=max(ranks_per_node, 1),
        scale_up_latency_s=NOMINAL_SCALE_UP_LATENCY_S, scale_out_latency_s=NOMINAL_SCALE_OUT_LATENCY_S,
        sources=("no datasheet: every rate is the one the probe measured",))


def link_parameters(gpu: GPUSpec, links: dict[str, LinkFigures | None], notes: list[str]) -> dict[str, float]:
    """scale_up_efficiency / scale_out_efficiency: the measured all-reduce bus bandwidth over the
    GPU's scale-up bandwidth and its NIC, per direction (the parameters' definitions)."""
    values = {}
    if links.get("scale_up"):
        values["scale_up_efficiency"] = links["scale_up"].bus_bytes_per_s / gpu.scale_up_bytes_per_s
    if links.get("scale_out"):
        values["scale_out_efficiency"] = links["scale_out"].bus_bytes_per_s / gpu.nic_bytes_per_s
    return {name: _bounded(name, v, notes) for name, v in values.items()}
