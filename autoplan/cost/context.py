"""CostContext: everything the cost model needs besides the layouts."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from autoplan.cost.params import ParamCounts, count_params
from autoplan.profiles import CalibratedParameters, Corrections, PhysicalEfficiency, TrainerProfile
from autoplan.specs.hardware import Cluster
from autoplan.specs.model import ModelSpec

FLOPS_CONVENTIONS = ("playbook", "causal", "megatron")


@dataclass(frozen=True)
class CostContext:
    """The model, the cluster, the trainer profile and its calibrated parameters.

    ``flops_convention`` decides how *model* FLOPs (for MFU) are counted; time always uses the
    work the kernels really do (causal attention does half the score FLOPs):

    * ``playbook`` (default): 6·N·T + 6·L·s·a·(d_qk + d_v)·T, N = every parameter with a tied LM
      head counted twice, attention not halved; reproduces the Ultra-Scale Playbook's and
      Megatron-Core's published MFU (refdata README).
    * ``causal``: the same with the attention term halved (causal masking).
    * ``megatron``: Megatron's ``num_floating_point_operations`` (no embedding lookup in N).
    """

    model: ModelSpec
    cluster: Cluster
    profile: TrainerProfile
    parameters: CalibratedParameters
    flops_convention: str = "playbook"

    @cached_property
    def params(self) -> ParamCounts:
        return count_params(self.model)

    @property
    def efficiency(self) -> PhysicalEfficiency:
        return self.parameters.efficiency

    @property
    def corrections(self) -> Corrections:
        return self.parameters.corrections
