"""How layers and in-flight micro-batches fall on pipeline stages (vectorised over layouts).

Two stages are costed for every layout: the *first* (embedding, the most micro-batches in
flight) and the *last* (final norm, LM head, logits and loss). Middle stages hold fewer
in-flight micro-batches than the first and no head, so the peak is at one of these two.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from autoplan.specs.model import ModelSpec


@dataclass(frozen=True)
class StageLayers:
    """Layer counts on the first and last stage; dense vs MoE split (DeepSeek-V3's dense-first)."""

    first: np.ndarray
    last: np.ndarray
    first_dense: np.ndarray
    last_dense: np.ndarray

    @property
    def first_moe(self) -> np.ndarray:
        return self.first - self.first_dense

    @property
    def last_moe(self) -> np.ndarray:
        return self.last - self.last_dense


def stage_layers(model: ModelSpec, pp: np.ndarray) -> StageLayers:
    """Split ``L`` layers over ``pp`` stages as evenly as possible, extra layers to early stages.

    Trainers require L divisible by pp·vpp unless uneven stages are configured (legal by default
    where the trainer can run them, ``autoplan.rules.stages``); an uneven
    split puts ceil(L/pp) on the first stage and floor(L/pp) on the last, the split the
    exporters write (``virtual_stage_layers``). With pp = 1 the one stage is both first and last.
    """
    num_layers = float(model.num_layers)
    base = np.floor(num_layers / pp)
    first = np.where(num_layers - base * pp > 0, base + 1.0, base)
    last = np.where(pp > 1, base, num_layers)
    num_dense = float(model.num_layers - model.num_moe_layers)
    first_dense = np.minimum(num_dense, first)
    last_dense = np.clip(num_dense - (num_layers - last), 0.0, last)
    return StageLayers(first=first, last=last, first_dense=first_dense, last_dense=last_dense)


def virtual_stage_layers(num_layers: int, pp: int, vpp: int = 1) -> list[int]:
    """Layers on each of the pp·vpp virtual stages in model order, extra layers to early ones.

    Virtual stage ``k·pp + r`` runs on rank ``r`` (Megatron's and torchtitan's interleaving), so
    rank r holds ceil(L/pp) layers for r < L mod pp and floor(L/pp) after: the split
    ``stage_layers`` costs. Exporters write this split (autoplan.rules.stages).
    """
    num_stages = pp * vpp
    base, extra = divmod(num_layers, num_stages)
    return [base + (1 if k < extra else 0) for k in range(num_stages)]


def in_flight_layers(layers: np.ndarray, pp: np.ndarray, vpp: np.ndarray, num_micro: np.ndarray,
                     stage_rank: np.ndarray, schedule: str) -> np.ndarray:
    """Layer-activations (in units of one layer × one micro-batch) a stage holds at its peak.

    1F1B (``megatron/core/pipeline_parallel/schedules.py``): rank r runs ``pp - r - 1`` warm-up
    forwards, so it holds ``min(pp - r, m)`` micro-batches of its ``L/pp`` layers. Interleaved
    1F1B with ``v`` chunks per rank warms up ``2(pp - r - 1) + (v - 1)·pp`` chunk-forwards, so
    rank r holds ``min(2(pp-r-1) + (v-1)pp + 1, m·v)`` chunks of ``L/(pp·v)`` layers; for r = 0
    this is ``L·(1 + (pp-1)/(pp·v))``, Korthikanti et al. 2022, Sec. 4.2.3. All-forward-all-
    backward (``afab``) holds all ``m`` micro-batches.
    """
    if schedule == "afab":
        return layers * num_micro
    plain = layers * np.minimum(pp - stage_rank, num_micro)
    chunks = np.minimum(2.0 * (pp - stage_rank - 1.0) + (vpp - 1.0) * pp + 1.0, num_micro * vpp)
    interleaved = layers / vpp * chunks
    return np.where(vpp > 1, interleaved, plain)
