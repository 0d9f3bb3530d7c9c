"""``autoplan probe``: measure on this cluster what the cost model's parameters stand for.

The package is split by what each part is: ``plan`` (what to time), ``kernels`` (GEMMs,
attention, copies, host link on one device), ``collectives`` (torch.distributed at several
sizes), ``launch`` (the ranks: spawned, torchrun or srun), ``provenance`` (device, versions,
date), ``tables`` (the rows and their CSV), ``fit`` (latency + size/bandwidth, the GEMM and
attention curves), ``calibrated`` (the fits as a GPU and parameter values), ``files`` (the
YAML files and tables written whole) and ``run`` (the library call behind the command).

Only ``kernels``, ``collectives``, ``launch`` and ``provenance`` import PyTorch (the optional
extra ``autoplan[probe]``); importing this package or any other command never does.
"""

from __future__ import annotations

import importlib.util

from autoplan.errors import AutoplanError

TORCH_MISSING = "autoplan probe needs PyTorch: pip install 'autoplan[probe]' (or pip install torch)"


class ProbeError(AutoplanError):
    """The probe could not run or fit here: no such device, ranks that do not divide into nodes,
    a measurement that gave nothing to fit."""


def torch_available() -> bool:
    return importlib.util.find_spec("torch") is not None
