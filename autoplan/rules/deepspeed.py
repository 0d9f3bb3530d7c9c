"""DeepSpeed 0.19.8's own rules (with Megatron-DeepSpeed for tp or pp > 1)."""

from __future__ import annotations

from autoplan.rules.table import Rule, indivisible

DEEPSPEED = ("deepspeed",)

RULES = [
    Rule("deepspeed_etp", DEEPSPEED,
         "etp must be 1 or tp (--enable-expert-tensor-parallelism shards experts over TP)",
         lambda c, b: (b.etp != 1) & (b.etp != b.tp),
         lambda c, x: f"etp={x.etp}, tp={x.tp}",
         "Megatron-DeepSpeed @ 4efb479 megatron/arguments.py (--enable-expert-tensor-parallelism)",
         fix=lambda c, x: f"use --etp 1 or --etp {x.tp}"),
    Rule("deepspeed_zero3_native_moe", DEEPSPEED,
         "ZeRO-3 cannot run Megatron-DeepSpeed's MoE layers (tp or pp > 1): they are DeepSpeed's "
         "native MoE, which ZeRO-3 refuses, and AutoEP takes no tensor or pipeline parallelism from "
         "Megatron's mpu",
         lambda c, b: (c.model.moe is not None) & (b.zero == 3) & ((b.tp > 1) | (b.pp > 1)),
         lambda c, x: f"zero=3, tp={x.tp}, pp={x.pp}, model {c.model.name!r} has experts",
         "DeepSpeed 0.19.8 deepspeed/runtime/engine.py ('Native DeepSpeed MoE is not supported with ZeRO "
         "Stage 3. Use AutoEP or choose ZeRO stage 1/2'; _configure_expert_parallel: AutoEP refuses an "
         "mpu's tensor parallelism)",
         fix=lambda c, x: "try --zero 1"),
    Rule("ep_divides_dp", DEEPSPEED, "ep must divide dp (expert groups are carved from DP)",
         lambda c, b: indivisible(b.dp, b.ep),
         lambda c, x: f"ep={x.ep}, dp={x.dp}",
         "DeepSpeed 0.19.8 deepspeed/utils/groups.py (_create_expert_and_data_parallel)"),
]
