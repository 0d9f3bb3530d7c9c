"""Which trainer shards hybrid (``Layout.hsdp``: ZeRO's states sharded inside groups of hsdp
ranks, replicated across them; ``autoplan.cost.hybrid_shard``) and what must divide what.

* torchtitan (FSDP2 HSDP): ``parallelism.data_parallel_shard_degree`` × ``data_parallel_replicate_degree``,
  FSDP (zero 3) only; the shard mesh is dp_shard × cp (``torchtitan/distributed/parallel_dims.py``:
  ``dp_replicate * dp_shard * cp * tp * pp == world_size``), so cp divides hsdp.
* Megatron-LM: ``--num-distributed-optimizer-instances`` = G/hsdp with the distributed optimizer
  (zero 1; megatron/core/parallel_state.py builds the intra- and inter-instance groups) and with
  Megatron-FSDP (zero 3, ``--outer-dp-sharding-strategy no_shard``: HSDP).
* DeepSpeed: ZeRO++ hierarchical partitioning ``zero_hpz_partition_size`` (ZeRO-3 only,
  deepspeed/runtime/zero/config.py; Wang et al. 2023, Sec. 3.2).
* nanotron, the Hugging Face Trainer profile and Composer (llmfoundry): no hybrid sharding in the
  exporters' form (nanotron's ZeRO-1 shards over the whole DP group).
"""

from __future__ import annotations

import numpy as np

from autoplan.rules.table import ALL, Rule, RuleContext

SOURCES = ("torchtitan torchtitan/distributed/parallel_dims.py (dp_replicate, dp_shard); Megatron-LM "
           "megatron/training/arguments.py (--num-distributed-optimizer-instances, "
           "--outer-dp-sharding-strategy); DeepSpeed deepspeed/runtime/zero/config.py (zero_hpz_partition_size)")


def zero_group(ctx: RuleContext, x) -> object:
    """G: the ranks ZeRO shards over, dp·cp where the trainer shards over cp, else dp."""
    return x.dp * (x.cp if ctx.profile.model_states.zero_shards_over_cp else 1)


def _hsdp_indivisible(ctx: RuleContext, b) -> np.ndarray:
    """True where hsdp is set and does not divide the ZeRO group."""
    hybrid = b.hsdp > 0
    if not np.count_nonzero(hybrid):  # (no layout shards hybrid: the same result, faster)
        return hybrid
    return hybrid & (np.mod(zero_group(ctx, b), np.maximum(b.hsdp, 1.0)) != 0)


RULES = [
    Rule("hsdp_divides", ALL, "hsdp must divide the ZeRO group (dp·cp where the trainer shards over cp, else dp)",
         lambda c, b: _hsdp_indivisible(c, b),
         lambda c, x: f"hsdp={x.hsdp}, ZeRO group {zero_group(c, x)}", SOURCES,
         fix=lambda c, x: "try --hsdp 0"),
    Rule("torchtitan_hsdp_cp", ("torchtitan",), "torchtitan's shard mesh is dp_shard × cp: cp must divide hsdp",
         lambda c, b: (b.hsdp > 0) & (np.mod(b.hsdp, b.cp) != 0),
         lambda c, x: f"hsdp={x.hsdp}, cp={x.cp}", "torchtitan torchtitan/distributed/parallel_dims.py",
         fix=lambda c, x: f"try --hsdp {x.cp * max(x.hsdp // x.cp, 1)}"),
]
