"""DeepSpeed 0.19.8's own rules (with Megatron-DeepSpeed for tp or pp > 1)."""

from __future__ import annotations

from autoplan.rules.table import Rule

DEEPSPEED = ("deepspeed",)

RULES = [
    Rule("deepspeed_etp", DEEPSPEED,
         "etp must be 1 or tp (--enable-expert-tensor-parallelism shards experts over TP)",
         lambda c, b: (b.etp != 1) & (b.etp != b.tp),
         lambda c, x: f"etp={x.etp}, tp={x.tp}",
         "Megatron-DeepSpeed @ 4efb479 megatron/arguments.py (--enable-expert-tensor-parallelism)",
         fix=lambda c, x: f"use --etp 1 or --etp {x.tp}"),
    Rule("ep_divides_dp", DEEPSPEED, "ep must divide dp (expert groups are carved from DP)",
         lambda c, b: b.dp % b.ep != 0,
         lambda c, x: f"ep={x.ep}, dp={x.dp}",
         "DeepSpeed 0.19.8 deepspeed/utils/groups.py (_create_expert_and_data_parallel)"),
]
