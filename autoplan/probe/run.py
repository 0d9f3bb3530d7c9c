"""``autoplan probe`` as a library call: measure (PyTorch), fit, and write the two YAML files.

:func:`run_probe` measures through :mod:`autoplan.probe.launch` (which needs PyTorch), fits with
:mod:`autoplan.probe.fit` and :mod:`autoplan.probe.calibrated` (numpy only), and writes the
output folder with :mod:`autoplan.probe.files`. Under torchrun or srun every rank calls it and
rank 0 writes; the others return None.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from autoplan.calibration.host_link import host_link_figures
from autoplan.probe import TORCH_MISSING, ProbeError, torch_available
from autoplan.probe.calibrated import MEASURED, Probed, kernel_parameters, link_parameters, measured_base, probed_gpu
from autoplan.probe.fit import KernelFit, LinkFigures, fit_collectives, fit_kernels, link_figures, with_bandwidths
from autoplan.probe.files import HARDWARE_FILE, PROFILE_FILE, check_out, hardware_text, profile_text, write_all
from autoplan.probe.tables import as_table
from autoplan.specs.hardware import GPUSpec, load_gpu


@dataclass(frozen=True)
class ProbeOptions:
    device: str = "cpu"  # 'cpu' or 'cuda'
    quick: bool = False
    nproc: int = 1  # local ranks to spawn when not started by torchrun / srun
    ranks_per_node: int | None = None  # None: torchrun's LOCAL_WORLD_SIZE, else nproc
    model: object = None  # a ModelSpec whose shapes are timed (on CUDA)
    out: str = "results/probe"
    trainer: str = "megatron"  # the trainer profile the probed parameters go on top of
    hardware: str | None = None  # the datasheet preset; None: matched by the device's name
    name: str | None = None  # the probed GPU's name; None: '<preset>-probed'
    attention_backend: str = ""  # attention_<backend> rows for the profile; '' the first of fit.ATTENTION_KINDS


@dataclass(frozen=True)
class ProbeResult:
    probed: Probed
    kernels: KernelFit
    links: dict[str, LinkFigures | None]
    collectives: list  # fit.CollectiveFit per collective and level
    meta: dict
    files: list[Path]


def preset_for(device_name: str) -> GPUSpec | None:
    """The hardware_db preset of a device name ('NVIDIA H100 80GB HBM3' -> h100-80gb, an alias of
    h100-sxm): the longest leading run of its words that names a preset, 'NVIDIA' left out."""
    words = [w for w in device_name.lower().replace("_", " ").split() if w != "nvidia"]
    for end in range(len(words), 0, -1):
        try:
            return load_gpu("-".join(words[:end]))
        except ValueError:
            continue
    return None


def _base(options: ProbeOptions, meta: dict, notes: list[str]) -> GPUSpec | None:
    if options.hardware:
        return load_gpu(options.hardware)
    if options.device == "cpu":
        return None
    base = preset_for(str(meta.get("device", "")))
    if base is None:
        notes.append(f"no hardware_db preset for {meta.get('device')!r}: its measured rates stand for its peaks "
                     "(name the preset with --hardware)")
    return base


def fit_measured(measured: dict, options: ProbeOptions) -> tuple[Probed, KernelFit, dict, list]:
    """The fitted figures and what they become in the cost model's terms."""
    meta, notes = measured["meta"], []
    table = as_table(meta, measured["kernels"])
    fits = fit_collectives(measured["collectives"])
    links = {level: link_figures(fits, level) for level in ("scale_up", "scale_out")}
    base = _base(options, meta, notes)
    large = measured["large_gemm_flops"]
    if base is None:
        rates = fit_kernels(table, 1.0, large, options.attention_backend)
        base = measured_base(rates, links, memory_bytes=meta["memory_bytes"], ranks_per_node=meta["ranks"] // meta["nodes"],
                             description=f"{meta.get('device', 'a device')} (rates measured, no datasheet)")
    k = fit_kernels(table, base.compute_peak_bf16_flops_per_s, large, options.attention_backend)
    host = host_link_figures(as_table(meta, measured["host_link"]), 1.0).one_way if measured["host_link"] else None
    name = options.name or (f"{base.name}-probed" if base.name != MEASURED else f"{options.device}-probed")
    gpu = probed_gpu(base, links, name=name, usable_memory_bytes=meta["memory_bytes"],
                     host_payload_bytes_per_s=host,
                     sources=(f"autoplan probe, {meta['date']}: measured on this machine (the tables beside this file)",),
                     notes=notes)
    parameters = {**kernel_parameters(k, gpu.hbm_bytes_per_s, notes), **link_parameters(gpu, links, notes)}
    return Probed(gpu, parameters, tuple(notes)), k, links, fits


def figures(k: KernelFit, links: dict, fits: list) -> dict:
    """The fitted figures as plain numbers, for the profile's ``fit:`` block and the summary."""
    out = {"gemm_bf16": {"efficiency": k.gemm_bf16.efficiency, "half_flops": k.gemm_bf16.half_flops,
                         "fixed_s": k.gemm_bf16.fixed_s, "median_error": k.gemm_bf16.median_error, "n": k.gemm_bf16.n},
           "attention": {"backend": k.attention_backend, "max_fraction": k.attention_max_fraction,
                         "half_seq_tokens": k.attention_half_seq},
           "copy_bytes_per_s": k.copy_bytes_per_s, "fp8_speedup": dict(k.fp8_speedup)}
    if k.gemm_fp32 is not None:
        out["gemm_fp32"] = {"efficiency": k.gemm_fp32.efficiency, "half_flops": k.gemm_fp32.half_flops}
    out["collectives"] = [{"collective": f.collective, "level": f.level, "ranks": f.ranks, "latency_s": f.latency_s,
                           "hop_latency_s": f.hop_latency_s, "busbw_bytes_per_s": f.busbw_bytes_per_s,
                           "median_error": f.median_error} for f in fits]
    out["links"] = {level: None if v is None else {"bus_bytes_per_s": v.bus_bytes_per_s,
                                                   "hop_latency_s": v.hop_latency_s} for level, v in links.items()}
    return out


def _measure(options: ProbeOptions, progress: Callable[[str], None]) -> dict | None:
    from autoplan.probe import launch

    started = launch.launched_ranks(options.ranks_per_node)
    if started is not None:
        return launch.measure(started, options.device, options.quick, options.model, progress)
    if options.nproc > 1:
        per_node = options.ranks_per_node or options.nproc
        return launch.spawned(options.nproc, per_node, options.device, options.quick, options.model, progress)
    return launch.measure(launch.checked_ranks(0, 1, 1), options.device, options.quick, options.model, progress)


def run_probe(options: ProbeOptions, progress: Callable[[str], None] = lambda message: None) -> ProbeResult | None:
    """Measure, fit and write ``options.out``; None on a rank other than 0."""
    if not torch_available():
        raise ProbeError(TORCH_MISSING)
    out = check_out(options.out)
    measured = _measure(options, progress)
    if measured is None:
        return None
    try:
        probed, k, links, fits = fit_measured(measured, options)
    except ValueError as exc:  # a fit with nothing to fit (every attention backend failed, ...)
        if isinstance(exc, ProbeError):
            raise
        raise ProbeError(f"the probe's timings could not be fitted: {exc}") from None
    meta, numbers = measured["meta"], figures(k, links, fits)
    texts = {HARDWARE_FILE: hardware_text(probed.gpu, meta, list(probed.notes)),
             PROFILE_FILE: profile_text(options.trainer, probed.gpu.name, probed.parameters, meta, numbers,
                                        list(probed.notes))}
    files = write_all(out, texts, {**measured, "collectives": with_bandwidths(measured["collectives"])})
    return ProbeResult(probed, k, links, fits, meta, files)
