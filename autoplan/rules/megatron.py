"""Megatron-LM's own rules (core_v0.15.3) beyond the common ones."""

from __future__ import annotations

from autoplan.rules.table import Rule

RULES = [
    Rule("moe_tp_needs_sp", ("megatron",), "Megatron-Core MoE with tp > 1 needs sequence parallel in training",
         lambda c, b: (c.model.moe is not None) & (b.tp > 1) & (b.sp == 0),
         lambda c, x: f"tp={x.tp}, sp=false",
         "Megatron-LM core_v0.15.3 megatron/core/transformer/moe/moe_layer.py and "
         "megatron/training/arguments.py",
         fix=lambda c, x: "drop --no-sp"),
    Rule("fp8_param_gather_optimizer", ("megatron",),
         "--fp8-param-gather needs the distributed optimizer (zero >= 1)",
         lambda c, b: (b.precision == 1) & c.training.fp8_param_gather & (b.zero == 0),
         lambda c, x: f"fp8_param_gather=true, zero={x.zero}",
         "Megatron-LM core_v0.15.3 megatron/training/arguments.py (validate_args: --fp8-param-gather only "
         "supported with distributed optimizer, torch fsdp2, megatron fsdp)",
         fix=lambda c, x: "try --zero 1"),
    Rule("precision_aware_optimizer", ("megatron",),
         "--use-precision-aware-optimizer (optimizer_state_dtype, master_weights) needs the distributed "
         "optimizer (zero 1; under Megatron-FSDP, zero 3, the dtypes are its own options, not mapped) and Adam",
         lambda c, b: (not c.training.fp32_optimizer) & ((b.zero == 0) | (b.zero >= 3) | (b.optimizer != 0)),
         lambda c, x: (f"optimizer_state_dtype={c.training.optimizer_state_dtype}, "
                       f"master_weights={c.training.master_weights}, zero={x.zero}, optimizer={x.optimizer}"),
         "Megatron-LM core_v0.15.3 megatron/core/optimizer/__init__.py (get_megatron_optimizer: only "
         "supported with distributed optimizer) and optimizer_config.py (only supported with adam)",
         fix=lambda c, x: "try --zero 1 with --optimizer adamw"),
]
