"""The optimizer's stored dtypes (``TrainingSpec.optimizer_state_dtype`` and ``master_weights``)
as Megatron-LM spells them. Which trainer can store which is its profile's capabilities
(``settings``) and the rule ``megatron_master_remainders``, checked by the rule table.

* Megatron-LM (core_v0.15.3, ``megatron/training/arguments.py``): ``--use-precision-aware-optimizer``
  (Transformer Engine FusedAdam; the distributed optimizer and Adam only, ``autoplan.rules.megatron``)
  with ``--exp-avg-dtype`` / ``--exp-avg-sq-dtype`` (fp32, fp16, bf16, fp8) and
  ``--main-params-dtype`` (fp32, fp16). With bf16 weights and fp32 main params it stores only the
  int16 remainders of the master copy (``OptimizerConfig.store_param_remainders``, default True,
  no command-line switch): master_weights "remainders". It always keeps a master copy, so "none"
  (Apex DistributedFusedAdam ``store_params=False``, NeMo 1) and fp32 masters beside low-precision
  moments cannot be written.
* torchtitan, nanotron, DeepSpeed: fp32 master weights and AdamW moments, with no option to store
  them otherwise in the versions the exporters pin (``autoplan.export.VERSIONS``).
"""

from __future__ import annotations

from autoplan.specs.training import TrainingSpec

Args = list[tuple[str, object]]


def megatron_args(training: TrainingSpec) -> Args:
    """The Megatron-LM flags of a setting the rules let through; [] by default."""
    if training.fp32_optimizer:
        return []
    args: Args = [("--use-precision-aware-optimizer", None)]
    if training.master_weights == "fp16":
        args.append(("--main-params-dtype", "fp16"))
    if training.optimizer_state_dtype != "fp32":
        args += [("--exp-avg-dtype", training.optimizer_state_dtype),
                 ("--exp-avg-sq-dtype", training.optimizer_state_dtype)]
    return args
