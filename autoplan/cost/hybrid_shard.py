"""Hybrid sharding (``Layout.hsdp``): ZeRO's model states sharded inside groups of ``hsdp``
ranks of the ZeRO group G and replicated across the G/hsdp groups; ``hsdp = 0`` shards over
the whole group as plain ZeRO does.

Trainers do it two ways (``TrainerProfile.data_parallel.hybrid_shard_style``, each profile's YAML):

* **replicate** (FSDP2 HSDP, torch/distributed/fsdp/_fully_shard/_fully_shard.py ``fully_shard``
  on a 2-D (replicate, shard) device mesh, torchtitan ``parallelism.data_parallel_replicate_degree``
  × ``data_parallel_shard_degree``; Megatron-LM ``--num-distributed-optimizer-instances`` for the
  distributed optimizer, megatron/core/distributed/param_and_grad_buffer.py, and for Megatron-FSDP
  with ``--outer-dp-sharding-strategy no_shard``): every sharded state is divided by hsdp instead
  of G. Parameters are gathered and gradients reduce-scattered inside the shard group (adjacent
  ranks, NVLink when hsdp fits in the scale-up domain); the 1/hsdp gradient shard is then
  all-reduced across the G/hsdp replicas (over the NICs).
* **secondary** (DeepSpeed ZeRO++ hierarchical partitioning, ``zero_hpz_partition_size``; Wang et
  al. 2023, ZeRO++, Sec. 3.2; deepspeed/runtime/zero/stage3.py): the states stay sharded over
  all of G, and each rank also keeps a secondary bf16 copy of the parameters sharded over its
  hpZ group of hsdp ranks. The forward all-gathers over G as before; the backward (and a
  recomputed forward) gathers from the secondary copy inside the hpZ group; gradients
  reduce-scatter over G. No replica all-reduce.
"""

from __future__ import annotations

import numpy as np

from autoplan.cost.arrays import zeros_like
SECONDARY_PARAM_BYTES = 2.0  # bf16 secondary partition of hpZ (ZeRO++ Sec. 3.2)


def style(profile) -> str:
    """'replicate', 'secondary' or 'none' (a trainer without hybrid sharding; the rules refuse
    hsdp): the profile's ``hybrid_shard_style``."""
    return profile.data_parallel.hybrid_shard_style


def shard_group(hsdp: np.ndarray, group: np.ndarray, profile) -> np.ndarray:
    """Ranks a model state is divided over: hsdp where it is on and the trainer replicates
    across shard groups, else the whole group G."""
    if style(profile) != "replicate":
        return group
    return np.where(hsdp > 0, hsdp, group)


def secondary_weight_bytes(hsdp: np.ndarray, zero: np.ndarray, params: np.ndarray,
                           profile) -> np.ndarray:
    """Bytes per GPU of ZeRO++ hpZ's secondary parameter partition: SECONDARY_PARAM_BYTES ×
    params/hsdp under ZeRO-3 with hsdp > 0 where the trainer keeps one (DeepSpeed), else 0."""
    if style(profile) != "secondary":
        return zeros_like(params)
    on = (hsdp > 0) & (zero >= 3)
    return np.where(on, SECONDARY_PARAM_BYTES * params / np.maximum(hsdp, 1.0), 0.0)

