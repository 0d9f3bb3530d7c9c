"""DeepSpeed 0.19.8's own rules (with Megatron-DeepSpeed for tp or pp > 1)."""

from __future__ import annotations

from autoplan.rules.table import Rule, indivisible
from autoplan.specs.model import ModelSpec

DEEPSPEED = ("deepspeed",)


def megatron_deepspeed_gaps(m: ModelSpec) -> list[str]:
    """What Megatron-DeepSpeed's GPT model (the DeepSpeed path for tp or pp > 1) cannot build of
    ``m`` that sizes it: no latent attention (megatron/model/transformer.py ParallelAttention), and
    MoE layers of --ffn-hidden-size experts in every layer (megatron/model/transformer.py
    ParallelTransformerLayer: --num-experts per layer, no shared or dense leading layers)."""
    moe = m.moe
    return [text for bad, text in [
        (m.mla is not None, "latent attention (MLA)"),
        (moe is not None and moe.num_shared_experts > 0, "shared experts"),
        (moe is not None and moe.num_dense_layers > 0, "dense leading layers"),
        (moe is not None and moe.expert_ffn_hidden_size != m.ffn_hidden_size,
         f"experts {moe.expert_ffn_hidden_size if moe else 0} wide beside ffn {m.ffn_hidden_size}")] if bad]

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
         lambda c, b: (b.zero == 3) & ((b.tp > 1) | (b.pp > 1)),
         lambda c, x: f"zero=3, tp={x.tp}, pp={x.pp}, model {c.model.name!r} has experts",
         "DeepSpeed 0.19.8 deepspeed/runtime/engine.py ('Native DeepSpeed MoE is not supported with ZeRO "
         "Stage 3. Use AutoEP or choose ZeRO stage 1/2'; _configure_expert_parallel: AutoEP refuses an "
         "mpu's tensor parallelism)",
         fix=lambda c, x: "try --zero 1", when=lambda c: c.model.moe is not None),
    Rule("megatron_deepspeed_model", DEEPSPEED,
         "Megatron-DeepSpeed (tp or pp > 1) builds only its GPT model: no latent attention, and MoE layers "
         "of --ffn-hidden-size experts in every layer without shared experts",
         lambda c, b: (b.tp > 1) | (b.pp > 1),
         lambda c, x: f"tp={x.tp}, pp={x.pp}, model {c.model.name!r} has {', '.join(megatron_deepspeed_gaps(c.model))}",
         "Megatron-DeepSpeed @ 4efb479 megatron/model/transformer.py (ParallelAttention, ParallelTransformerLayer "
         "with --num-experts)",
         fix=lambda c, x: "use tp=1 pp=1 (plain DeepSpeed trains the Hugging Face model), or another trainer",
         when=lambda c: bool(megatron_deepspeed_gaps(c.model))),
    Rule("ep_divides_dp", DEEPSPEED, "ep must divide dp (expert groups are carved from DP)",
         lambda c, b: indivisible(b.dp, b.ep),
         lambda c, x: f"ep={x.ep}, dp={x.dp}",
         "DeepSpeed 0.19.8 deepspeed/utils/groups.py (_create_expert_and_data_parallel)"),
]
