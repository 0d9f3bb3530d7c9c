"""Where a probe's figures were measured: device, driver, library versions, date, nodes.

Needs PyTorch. The same mapping heads every table the probe writes and sits in its profile's
``fit:`` block and its hardware file's ``notes:``.
"""

from __future__ import annotations

import os
import platform
import subprocess
import time

import torch


def _nvidia_smi(query: str) -> str:
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return ""
    return out.strip().splitlines()[0] if out.strip() else ""


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def host_memory_bytes() -> float:
    """Physical memory of this host (the memory a CPU rank has)."""
    return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def provenance(device: torch.device, *, ranks: int, nodes: int, backend: str) -> dict:
    """The measuring setup of this rank's ``device``."""
    meta = {"date": time.strftime("%Y-%m-%d"), "torch": str(torch.__version__), "nodes": nodes, "ranks": ranks,
            "backend": backend}
    if device.type == "cuda":
        nccl = torch.cuda.nccl.version() if hasattr(torch.cuda, "nccl") else ""
        meta.update(device=torch.cuda.get_device_name(device), cuda=str(torch.version.cuda or ""),
                    cudnn=str(torch.backends.cudnn.version() or ""),
                    nccl=".".join(map(str, nccl)) if isinstance(nccl, tuple) else str(nccl),
                    driver=_nvidia_smi("driver_version"),
                    nvidia_smi=_nvidia_smi("name,power.limit,clocks.max.sm,clocks.mem,pcie.link.gen.current,"
                                           "pcie.link.width.current"),
                    memory_bytes=float(torch.cuda.get_device_properties(device).total_memory))
    else:
        meta.update(device=_cpu_name(), threads=torch.get_num_threads(), memory_bytes=host_memory_bytes())
    return meta
