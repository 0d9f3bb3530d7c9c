"""The GPU's host link as offloading uses it: the payload rate per direction.

Both offloads cost their traffic with it: the optimizer-state offload (``cost/offload.py``) and the
activation offload (``cost/recompute.py``, ``offload_exposed_s``).
"""

from __future__ import annotations

from autoplan.cost.context import CostContext

# Payload share of the host link's datasheet rate per direction, measured: pinned copies of 64 MiB
# to 1 GiB on an H200 whose PCIe link nvidia-smi reported at Gen5 x16 moved 55.3-55.5 GB/s each way
# of the nominal 64 (validation/h200_host_link.csv, benchmarks/gpu_host_link.py, read by
# autoplan/calibration/host_link.py): 128b/130b encoding and the TLP/DLLP headers of 256-byte
# payloads. With both directions busy each got 0.79; a GEMM beside copies in both directions ran
# 8% slower (the copy engines' memory traffic), which is not charged. The same share is assumed
# for NVLink-C2C (GH200/GB200: 450 GB/s per direction nominal); no C2C copy was measured.
HOST_LINK_EFFICIENCY = 0.865


def host_link_bytes_per_s(ctx: CostContext) -> float:
    """Payload bandwidth of the GPU's host link, per direction."""
    return ctx.cluster.gpu.host_bytes_per_s * HOST_LINK_EFFICIENCY
