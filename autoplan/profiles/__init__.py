"""Trainer implementation profiles: how each trainer spends memory and time.

A profile has two parts:

* ``TrainerProfile``: what the trainer's code does (bytes per parameter of each model state,
  activation bytes saved per layer under each recompute mode, logits handling, pipeline
  schedule, which ZeRO stages and virtual stages it supports). Each figure cites the trainer
  source file or paper it came from (see the YAML files beside this module).
* ``Efficiency``: a few named, fitted parameters per (trainer, GPU) pair (GEMM efficiency
  curve, collective efficiency per tier, overlap fractions, memory reserve). Calibrated with
  ``autoplan calibrate`` / ``benchmarks/accuracy.py``; each YAML states which rows fitted them.
"""

from __future__ import annotations

from autoplan.profiles.profile import (  # noqa: F401
    ActivationCoefficients,
    Efficiency,
    TrainerProfile,
    list_trainers,
    load_profile,
)
