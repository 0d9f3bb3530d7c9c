"""Which trainer runs which optimizer (``Layout.optimizer``) and which offload (``Layout.offload``).

* Megatron-LM ``--optimizer``: adam (AdamW with ``--weight-decay``, decoupled) and sgd in
  core_v0.15.3; muon from core_v0.16.0, lion from core_v0.17.1 (``megatron/training/
  arguments.py``); the emerging optimizers (muon, lion) refuse Megatron-FSDP and torch FSDP2
  ('Emerging optimizer does not support Megatron-FSDP for now', validate_args), and Muon the
  distributed optimizer and the overlapped gradient reduction and parameter gather (validate_args'
  Muon check, core_v0.16.0 to core_v0.17.1). CPU offload:
  ``--optimizer-cpu-offload`` with ``--use-precision-aware-optimizer``, for adam and sgd only
  (``megatron/core/optimizer/__init__.py``: CPUAdam / CPUSGD); no parameter offload.
* torchtitan ``optimizer.name``: torch.optim Adam/AdamW (``torchtitan/components/optimizer.py``,
  ``build_optimizers``; DistMuon only on main after the 0.3.0 the exporter writes);
  ``training.enable_cpu_offload`` applies FSDP2's ``CPUOffloadPolicy`` (parameters, gradients and
  optimizer states on the CPU: offload=params, with FSDP, zero 3).
* nanotron ``optimizer.optimizer_factory.name``: adamW or sgd (``src/nanotron/config/config.py``
  ``AdamWOptimizerArgs``, ``SGDOptimizerArgs``); no offload.
* DeepSpeed ``optimizer.type``: its own Adam/AdamW, Lion, Muon (``deepspeed/runtime/config.py``
  ``DEEPSPEED_OPTIMIZERS``) or any ``torch.optim`` class by name (SGD, Adafactor; engine.py
  ``_configure_basic_optimizer``). ``offload_optimizer`` (ZeRO >= 1) runs DeepSpeedCPUAdam or
  DeepSpeedCPULion on the host (engine.py); ``offload_param`` needs ZeRO-3 (zero/config.py).
* 8-bit AdamW (bitsandbytes) is native to none of these configs; Hugging Face Trainer names it
  ``optim="adamw_bnb_8bit"`` (transformers ``training_args.py`` ``OptimizerNames``), with
  ``adafactor``, ``sgd`` and ``lion_32bit``.
"""

from __future__ import annotations


from autoplan.cost.offload import CODE as OFFLOAD
from autoplan.cost.optimizer import CODE as OPTIMIZER
from autoplan.rules.table import ALL, Rule, one_of

# Which optimizer and offload each trainer runs: its profile's capabilities (optimizers,
# state_offloads, cpu_optimizers; autoplan.rules.capabilities). These rules are what must go with what.
SOURCES = ("Megatron-LM core_v0.19.0 megatron/training/arguments.py (--optimizer, --optimizer-cpu-offload) and "
           "megatron/core/optimizer/__init__.py; torchtitan torchtitan/components/optimizer.py, "
           "torchtitan/config/configs.py (enable_cpu_offload); nanotron src/nanotron/config/config.py; "
           "deepspeed/runtime/config.py (DEEPSPEED_OPTIMIZERS), deepspeed/runtime/engine.py; "
           "transformers training_args.py (OptimizerNames)")


RULES = [
    Rule("megatron_emerging_optimizer_fsdp", ("megatron",),
         "Megatron's emerging optimizers (muon, lion) do not run under Megatron-FSDP (zero 3)",
         lambda c, b: one_of(b.optimizer, [OPTIMIZER["muon"], OPTIMIZER["lion"]]) & (b.zero >= 3),
         lambda c, x: f"optimizer={x.optimizer}, zero={x.zero}",
         "Megatron-LM core_v0.19.0 megatron/training/arguments.py (validate_args, emerging optimizer check)",
         fix=lambda c, x: "try --zero 1"),
    Rule("megatron_muon_data_parallel", ("megatron",),
         "Megatron-LM's Muon runs without the distributed optimizer (zero 0) and without overlapping the "
         "gradient reduction, which the profile's time model assumes wherever dp·cp > 1 (options: "
         "overlap_grad_reduce)",
         lambda c, b: (b.optimizer == OPTIMIZER["muon"])
         & ((b.zero >= 1) | ((b.dp * b.cp > 1) & c.profile.options.overlap_grad_reduce)),
         lambda c, x: f"optimizer=muon, zero={x.zero}, dp·cp={x.dp * x.cp}, "
                      f"overlap_grad_reduce={c.profile.options.overlap_grad_reduce}",
         "Megatron-LM core_v0.16.0 megatron/training/arguments.py validate_args (Muon optimizer check: "
         "assert not overlap_grad_reduce, overlap_param_gather, use_distributed_optimizer; as core_v0.17.1 "
         "for --optimizer muon)",
         fix=lambda c, x: "try --zero 0 with dp·cp = 1, or --optimizer adamw"),
    Rule("deepspeed_megatron_optimizer", ("deepspeed",),
         "Megatron-DeepSpeed (DeepSpeed with tp > 1 or pp > 1) runs --optimizer adam or sgd",
         lambda c, b: ((b.tp > 1) | (b.pp > 1)) & ~one_of(b.optimizer, [OPTIMIZER["adamw"], OPTIMIZER["sgd"]]),
         lambda c, x: f"optimizer={x.optimizer}, tp={x.tp}, pp={x.pp}",
         "deepspeedai/Megatron-DeepSpeed megatron/arguments.py (--optimizer choices adam, sgd)",
         fix=lambda c, x: "try --optimizer adamw or --tp 1 --pp 1"),
    Rule("offload_params_zero3", ALL, "parameter offload needs ZeRO-3 / FSDP (zero 3)",
         lambda c, b: (b.offload >= OFFLOAD["params"]) & (b.zero < 3),
         lambda c, x: f"offload={x.offload}, zero={x.zero}",
         "deepspeed/runtime/zero/config.py (offload_param: stage 3 only); torchtitan FSDP2 CPUOffloadPolicy",
         fix=lambda c, x: "try --zero 3"),
    Rule("offload_needs_zero", ("deepspeed",), "DeepSpeed's offload_optimizer needs ZeRO (zero >= 1)",
         lambda c, b: (b.offload >= OFFLOAD["optimizer"]) & (b.zero < 1),
         lambda c, x: f"offload={x.offload}, zero={x.zero}", "deepspeed/runtime/zero/config.py (offload_optimizer)",
         fix=lambda c, x: "try --zero 1"),
]
