"""Tensor-parallel collectives per layer, on the links the rank order puts them on.

Megatron-LM and nanotron run sequence-parallel TP as two all-gathers and two reduce-scatters of
a layer's activations per pass (Korthikanti et al. 2022, Sec. 4.2.2; Megatron-Core
``tensor_parallel/mappings.py`` gather/reduce_scatter_along_first_dim, nanotron
``parallel/tensor_parallel/functional.py``), and NCCL runs all-gather and reduce-scatter as
rings (NCCL ``src/enqueue.cc``: ring is the algorithm for AllGather/ReduceScatter outside
NVLS/CollNet; nccl-tests ``doc/PERFORMANCE.md`` for the bus bandwidth). A ring of ``n`` ranks
takes ``n − 1`` steps and each step waits for its slowest hop (Thakur, Rabenseifner and Gropp
2005, Sec. 4: ``(p − 1)·α + (p − 1)/p·n·β``). Inside a scale-up domain every hop is NVLink.
A TP group larger than the domain (TP 16 and 32 on 8-GPU nodes) or spread across domains by
the rank order (``comm.strides``) has NIC hops in every ring: each step then pays the NIC's
latency, and the ring's bandwidth is that of the NIC rails its ranks drive (``comm.group_link``:
``k`` ranks per domain × NIC), so every per-layer collective of every micro-batch crosses nodes.
"""

from __future__ import annotations

import numpy as np

from autoplan.cost.comm import GroupLink


def ring_steps(size: np.ndarray) -> np.ndarray:
    """Steps of a ring all-gather or reduce-scatter over ``size`` ranks: n − 1 (0 for one rank)."""
    return np.maximum(size - 1.0, 0.0)


def tp_collective_s(link: GroupLink, num_bytes: np.ndarray) -> np.ndarray:
    """One ring all-gather (= reduce-scatter) of ``num_bytes`` (the gathered buffer) over ``link``.

    t = (n − 1)/n · S / busbw + (n − 1)·α, with busbw and α of the ring's slowest hop
    (``comm.group_link``: NVLink inside the domain, k × NIC and the NIC's latency across it).
    Source: Thakur et al. 2005, Sec. 4 (ring algorithm); NCCL rings for AllGather/ReduceScatter.
    """
    n = link.size
    return np.where(n > 1, ring_steps(n) / np.maximum(n, 1.0) * num_bytes / link.bus_bytes_per_s
                    + ring_steps(n) * link.latency_s, 0.0)
