"""torchtitan 0.3.0's own rules beyond the common ones.

torchtitan builds one device mesh from ``ParallelDims`` (``torchtitan/distributed/
parallel_dims.py``): with ZeRO-3 the data-parallel degree is ``dp_shard`` (FSDP2), without it
``dp_replicate`` (DDP) and ``dp_shard = 1``; experts shard over the ``efsdp`` mesh
``dp_shard·cp·tp / ep``, so ep must divide ``dp_shard·cp·tp``.
"""

from __future__ import annotations

import numpy as np

from autoplan.rules.table import Rule, indivisible, seq_len_of

TITAN = ("torchtitan",)
DIMS = "torchtitan 0.3.0 torchtitan/distributed/parallel_dims.py"
TRAINER = "torchtitan 0.3.0 torchtitan/trainer.py"


def dp_shard(b):
    """torchtitan's FSDP degree: dp with ZeRO-3, 1 (pure replication) otherwise."""
    return np.where(b.zero == 3, b.dp, 1)


def seq_divisor(b):
    """torchtitan/trainer.py: the sequence is cut (tp if sequence parallel) × (2·cp if cp > 1)."""
    return np.where(b.sp > 0, b.tp, 1) * np.where(b.cp > 1, 2 * b.cp, 1)


def _fix_ep_mesh(c, x) -> str:
    return "try --zero 3 (FSDP makes dp part of the expert mesh)" if x.zero != 3 else ""


RULES = [
    Rule("tied_pp", TITAN, "weight tying is not supported with pipeline parallelism",
         lambda c, b: b.pp > 1,
         lambda c, x: f"model {c.model.name!r} ties its embeddings, pp={x.pp}",
         "torchtitan 0.3.0 torchtitan/models/llama3/infra/pipeline.py (tied weights across stages)",
         fix=lambda c, x: "use --pp 1", when=lambda c: c.model.tied_embeddings),
    Rule("ep_mesh", TITAN, "ep must divide dp_shard·cp·tp (the efsdp mesh)",
         lambda c, b: indivisible(dp_shard(b) * b.cp * b.tp, b.ep),
         lambda c, x: f"ep={x.ep}, dp_shard({int(dp_shard(x))})·cp({x.cp})·tp({x.tp}) = "
                      f"{int(dp_shard(x)) * x.cp * x.tp} (dp_shard = dp only with zero=3)",
         DIMS, fix=_fix_ep_mesh),
    Rule("sequence_shards", TITAN, "seq_len must be divisible by (tp if sp) × (2·cp if cp > 1)",
         lambda c, b: indivisible(seq_len_of(c, b), seq_divisor(b)),
         lambda c, x: f"seq_len={seq_len_of(c, x)}, divisor={int(seq_divisor(x))} "
                      f"(tp={x.tp}, sp={x.sp}, cp={x.cp})",
         TRAINER),
]

# torchtitan/trainer.py also checks global_batch_size % (local_batch_size × dp) == 0; the export
# writes global_batch_size = dp·mbs·grad_acc and local_batch_size = mbs·grad_acc (PP) or mbs, so it
# holds by construction and is no rule here.
