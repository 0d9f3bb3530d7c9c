"""Trainer implementation profiles: how each trainer spends memory and time.

A profile has two parts:

* ``TrainerProfile``: what the trainer's code does, in small grouped records (``groups.py``):
  ``model_states`` (bytes per parameter of each model state), ``activations`` (bytes saved per
  layer under each recompute mode, logits and loss), ``recompute``, ``zero3``, ``pipeline``,
  ``data_parallel`` and ``context_parallel``, each a block of the profile's YAML; beside them its
  ``capabilities`` (which ZeRO stages, schedules, ... it supports) and ``options``. Each figure
  cites the trainer source file or paper it came from (see the YAML files beside this module).
* ``CalibratedParameters`` per (trainer, GPU) pair, in two kinds: ``PhysicalEfficiency``
  (fractions of a hardware peak, overlap fractions; bounded, with a plausible range) and
  ``Corrections`` (named empirical terms standing in for a missing mechanism, each with its
  neutral value). Defaults with their sources live in ``defaults.yaml`` and a profile's
  ``defaults:`` block; fitted values (``autoplan calibrate`` / ``benchmarks/accuracy.py --fit``)
  in its ``calibrated:`` block, which states the rows that fitted them.
"""

from __future__ import annotations

from autoplan.profiles.efficiency import (  # noqa: F401
    PARAMETERS,
    CalibratedParameters,
    Corrections,
    Flag,
    PhysicalEfficiency,
    flag_fitted,
    flag_values,
)
from autoplan.profiles.profile import (  # noqa: F401
    ActivationCoefficients,
    TrainerProfile,
    builtin_trainer_names,
    list_trainers,
    load_profile,
)
