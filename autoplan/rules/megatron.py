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
]
