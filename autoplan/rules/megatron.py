"""Megatron-LM's own rules (core_v0.15.3) beyond the common ones."""

from __future__ import annotations

from autoplan.knobs import RECOMPUTE
from autoplan.layout import PRECISION
from autoplan.rules.table import Rule


def _fp32_master_beside_low_moments(c, b) -> bool:
    """Megatron's precision-aware optimizer, the only way it stores low-precision moments, keeps a
    bf16 model's fp32 master weights as int16 remainders (store_param_remainders): fp32 masters
    beside bf16/fp16/fp8 moments cannot be written."""
    return c.training.optimizer_state_dtype != "fp32" and c.training.master_weights == "fp32"


RULES = [
    Rule("moe_tp_needs_sp", ("megatron",), "Megatron-Core MoE with tp > 1 needs sequence parallel in training",
         lambda c, b: (b.tp > 1) & (b.sp == 0),
         lambda c, x: f"tp={x.tp}, sp=false",
         "Megatron-LM core_v0.15.3 megatron/core/transformer/moe/moe_layer.py and "
         "megatron/training/arguments.py",
         fix=lambda c, x: "drop --no-sp", when=lambda c: c.model.moe is not None),
    Rule("fp8_param_gather_optimizer", ("megatron",),
         "--fp8-param-gather needs the distributed optimizer (zero >= 1)",
         lambda c, b: (b.precision == PRECISION["fp8"]) & (b.zero == 0),
         lambda c, x: f"fp8_param_gather=true, zero={x.zero}",
         "Megatron-LM core_v0.15.3 megatron/training/arguments.py (validate_args: --fp8-param-gather only "
         "supported with distributed optimizer, torch fsdp2, megatron fsdp)",
         fix=lambda c, x: "try --zero 1", when=lambda c: c.training.fp8_param_gather),
    Rule("precision_aware_optimizer", ("megatron",),
         "--use-precision-aware-optimizer (optimizer_state_dtype, master_weights) needs the distributed "
         "optimizer (zero 1; under Megatron-FSDP, zero 3, the dtypes are its own options, not mapped) and Adam",
         lambda c, b: (b.zero == 0) | (b.zero >= 3) | (b.optimizer != 0),
         lambda c, x: (f"optimizer_state_dtype={c.training.optimizer_state_dtype}, "
                       f"master_weights={c.training.master_weights}, zero={x.zero}, optimizer={x.optimizer}"),
         "Megatron-LM core_v0.15.3 megatron/core/optimizer/__init__.py (get_megatron_optimizer: only "
         "supported with distributed optimizer) and optimizer_config.py (only supported with adam)",
         fix=lambda c, x: "try --zero 1 with --optimizer adamw", when=lambda c: not c.training.fp32_optimizer),
    Rule("cuda_graphs_full_recompute", ("megatron",), "CUDA graphs cannot run with full recompute",
         lambda c, b: b.recompute == float(RECOMPUTE.index("full")),
         lambda c, x: f"cuda_graphs={c.training.cuda_graphs}, recompute=full",
         "Megatron-LM core_v0.15.3 megatron/training/arguments.py (validate_args: recompute_granularity must not "
         "be full when CUDA Graphs are enabled)",
         fix=lambda c, x: "try --recompute selective, or --cuda-graphs none",
         when=lambda c: c.training.cuda_graphs != "none"),
    Rule("megatron_master_remainders", ("megatron",),
         "Megatron's precision-aware optimizer keeps fp32 master weights as int16 remainders beside low-precision moments",
         lambda c, b: _fp32_master_beside_low_moments(c, b),
         lambda c, x: f"optimizer_state_dtype={c.training.optimizer_state_dtype}, master_weights={c.training.master_weights}",
         "Megatron-LM core_v0.15.3 megatron/core/optimizer/optimizer_config.py (store_param_remainders, "
         "default True under --use-precision-aware-optimizer)",
         fix=lambda c, x: "use --master-weights remainders"),
]
