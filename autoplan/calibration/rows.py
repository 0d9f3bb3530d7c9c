"""A measured run as a row autoplan can predict, and the cost context it is predicted in.

:class:`Row` is what both sources of measurements yield: the published reference files
(:mod:`autoplan.calibration.validation`) and a user's MEASURED.csv
(:mod:`autoplan.calibration.measured`); :class:`Source` groups the rows of one published file.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from autoplan.cost.context import CostContext
from autoplan.profiles import load_profile
from autoplan.specs.hardware import load_gpu, make_cluster
from autoplan.specs.model import ModelSpec
from autoplan.specs.training import TrainingSpec

NAN = float("nan")


@dataclass(frozen=True)
class Row:
    """One measurement (published, or a user's own run) and everything needed to predict it.

    ``layout`` is a record (:func:`autoplan.layout_records.layout_from_record`): the layout knobs and
    the setup's gpus, seq_len and gbs_seqs. A missing measured
    figure is NaN. ``cell`` groups rows a ranking is compared within (playbook: model/nodes).
    """

    source: str
    row_id: str
    model: ModelSpec
    hardware: str
    trainer: str
    layout: dict[str, Any] = field(hash=False, compare=False)
    tokens_per_s_per_gpu: float = NAN
    peak_memory_bytes: float = NAN
    status: str = "ok"
    mfu: float = NAN
    cell: str = ""
    allow_uneven: bool = True
    derived: str = ""
    attention_kernel: str = "flash"  # 'eager' for the 2021-22 Megatron runs (softmax scores saved)
    # The run's own settings where it departs from its trainer profile (name, value), e.g.
    # Composer FSDP 'PURE' mixed precision reducing gradients in bf16: ("grad_reduce_bytes", 2).
    profile_overrides: tuple[tuple[str, Any], ...] = ()  # (field, value), e.g. ("options", TrainerOptions)
    nic_bytes_per_s: float = 0.0  # the cluster's NIC bandwidth per GPU; 0 = the GPU preset's
    fp8_recipe: str = "tensorwise"  # the setup's FP8 recipe where the layout's precision is fp8
    # The run's other trainer settings (TrainingSpec fields, specs.training.SETTING_FIELDS) where
    # they depart from the defaults, e.g. (("master_weights", "remainders"),).
    settings: tuple[tuple[str, Any], ...] = ()
    # Which GPU's memory the source measured: "peak" (the heaviest pipeline stage, e.g. the max
    # over PP ranks torchtitan's tables give) or "first" (the first stage's rank only, where the
    # trainer logs from world rank 0: nanotron's log_memory).
    memory_stage: str = "peak"
    # What the measured memory counts: "reserved" (torch.cuda.max_memory_reserved, nvidia-smi, the
    # trainers' usual log line) or "allocated" (torch.cuda.max_memory_allocated: tensors alone),
    # compared with the model's peak_memory_bytes or peak_allocated_memory_bytes.
    memory_kind: str = "reserved"

    @property
    def num_gpus(self) -> int:
        return int(self.layout["gpus"])

    @property
    def setup(self) -> tuple[int, int, int]:
        """(gpus, seq_len, gbs_seqs): the training setup of the run."""
        return int(self.layout["gpus"]), int(self.layout["seq_len"]), int(self.layout["gbs_seqs"])

    @property
    def context_key(self) -> tuple:
        return (self.model.name, self.hardware, self.trainer, *self.setup, self.attention_kernel,
                self.profile_overrides, self.nic_bytes_per_s, self.fp8_recipe, self.settings)

    @property
    def has_time(self) -> bool:
        return math.isfinite(self.tokens_per_s_per_gpu)

    @property
    def has_memory(self) -> bool:
        return math.isfinite(self.peak_memory_bytes)


@dataclass(frozen=True)
class Source:
    """The rows of one reference file, the rows left out (row id, reason) and its citation."""

    name: str
    file: str
    rows: tuple[Row, ...]
    excluded: tuple[tuple[str, str], ...] = ()
    notes: str = ""


@lru_cache(maxsize=None)
def _context(model: ModelSpec, hardware: str, trainer: str, setup: tuple[int, int, int],
             attention_kernel: str = "flash", profile_overrides: tuple[tuple[str, Any], ...] = (),
             nic_bytes_per_s: float = 0.0, fp8_recipe: str = "tensorwise",
             settings: tuple[tuple[str, Any], ...] = ()) -> CostContext:
    gpu = load_gpu(hardware)
    profile = load_profile(trainer).with_overrides(profile_overrides)
    num_gpus, seq_len, gbs_seqs = setup
    nic = nic_bytes_per_s if nic_bytes_per_s > 0 else None
    training = TrainingSpec(make_cluster(gpu, num_gpus, nic_bytes_per_s=nic), seq_len, gbs_seqs,
                            attention_kernel=attention_kernel, fp8_recipe=fp8_recipe, **dict(settings))
    return CostContext(model=model, training=training, profile=profile,
                       parameters=profile.parameters_for(gpu.name))


def row_context(row: Row) -> CostContext:
    """The cost context of a row (its setup) with the shipped profile's parameters for its GPU."""
    return _context(row.model, row.hardware, row.trainer, row.setup, row.attention_kernel,
                    row.profile_overrides, row.nic_bytes_per_s, row.fp8_recipe, row.settings)
