"""Library entry points used by the CLI and by users' scripts."""

from __future__ import annotations

from autoplan.cost.context import CostContext
from autoplan.profiles import load_profile
from autoplan.calibration.profile_file import apply_profile_file
from autoplan.specs.hardware import load_gpu, make_cluster
from autoplan.specs.models import load_model
from autoplan.units import parse_bandwidth


def build_context(model: str, num_gpus: int, *, hardware: str = "h100-sxm", trainer: str = "megatron",
                  gpus_per_node: int | None = None, nic: str | None = None,
                  profile_path: str | None = None, flops_convention: str = "playbook") -> CostContext:
    """Load the model, GPU, cluster and trainer profile into a ``CostContext``."""
    spec = load_model(model)
    gpu = load_gpu(hardware)
    cluster = make_cluster(gpu, num_gpus, gpus_per_node=gpus_per_node,
                           nic_bytes_per_s=parse_bandwidth(nic) if nic else None)
    profile = load_profile(trainer)
    if profile_path:
        profile = apply_profile_file(profile, gpu.name, profile_path)
    return CostContext(model=spec, cluster=cluster, profile=profile,
                       parameters=profile.parameters_for(gpu.name), flops_convention=flops_convention)
