"""Library entry points used by the CLI and by users' scripts."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from autoplan.calibration.profile_file import apply_profile_file
from autoplan.cost.context import CostContext
from autoplan.layout import SETUP_FIELDS, Layout
from autoplan.layout_records import layout_from_record, record_setup
from autoplan.profiles import load_profile
from autoplan.specs.hardware import load_gpu, make_cluster
from autoplan.specs.model import ModelSpec
from autoplan.specs.models import load_model
from autoplan.specs.training import DEFAULT_FLOPS_CONVENTION, DEFAULT_GBS_TOLERANCE, SETTING_FIELDS, TrainingSpec
from autoplan.units import parse_bandwidth


def build_training(num_gpus: int, seq_len: int, gbs_seqs: int, *, hardware: str = "h100-sxm",
                   gpus_per_node: int | None = None, nic: str | None = None, gbs_tolerance: float = DEFAULT_GBS_TOLERANCE,
                   flops_convention: str = DEFAULT_FLOPS_CONVENTION, **settings: Any) -> TrainingSpec:
    """Load the GPU, build its cluster of ``num_gpus`` and the ``TrainingSpec`` around it;
    ``settings`` are the setup's other fields, the settings of ``specs.training.SETTINGS``."""
    cluster = make_cluster(load_gpu(hardware), num_gpus, gpus_per_node=gpus_per_node,
                           nic_bytes_per_s=parse_bandwidth(nic) if nic else None)
    return TrainingSpec(cluster=cluster, seq_len=seq_len, gbs_seqs=gbs_seqs, gbs_tolerance=gbs_tolerance,
                        flops_convention=flops_convention, **settings)


def build_context(model: str | ModelSpec, training: TrainingSpec, *, trainer: str = "megatron",
                  profile_path: str | None = None, trainer_version: str | None = None) -> CostContext:
    """Load the model and trainer profile into a ``CostContext`` for ``training``; the trainer's
    capabilities are those of ``trainer_version`` (default its pinned one)."""
    spec = model if isinstance(model, ModelSpec) else load_model(model)
    gpu = training.cluster.gpu
    profile = load_profile(trainer).at_version(trainer_version)
    if profile_path:
        profile = apply_profile_file(profile, gpu.name, profile_path)
    return CostContext(model=spec, training=training, profile=profile, parameters=profile.parameters_for(gpu.name))


def plan_from_record(record: Mapping[str, Any], *, hardware: str = "h100-sxm", gpus_per_node: int | None = None,
                     nic: str | None = None, flops_convention: str = DEFAULT_FLOPS_CONVENTION) -> tuple[Layout, TrainingSpec]:
    """The layout and the training setup of a record that carries gpus, seq_len and gbs_seqs
    (a plans.json or CSV row, or a dict like ``dict(gpus=64, tp=2, seq_len=8192, gbs_seqs=512)``).
    A record's gbs_seqs is the batch its plan trains with, so it must be met exactly. Setup
    settings the record names (``fp8_recipe="mxfp8"``, ``grad_reduce_in_bf16=True``: the
    ``SETTINGS`` of ``specs.training``) apply to the setup; a record without them takes the defaults."""
    setup = record_setup(record, required=SETUP_FIELDS)
    training = build_training(setup["gpus"], setup["seq_len"], setup["gbs_seqs"], hardware=hardware,
                              gpus_per_node=gpus_per_node, nic=nic, flops_convention=flops_convention,
                              gbs_tolerance=0.0)
    settings = {name: record[name] for name in SETTING_FIELDS if record.get(name) is not None}
    training = replace(training, **settings) if settings else training
    return layout_from_record(record, training), training
