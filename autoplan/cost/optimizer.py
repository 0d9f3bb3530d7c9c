"""Optimizers (``Layout.optimizer``): bytes of state per parameter, the step's memory traffic, and
Muon's Newton–Schulz work and gather.

State bytes per parameter (fp32 unless said):

* adamw: the profile's ``optimizer_bytes`` (m and v, 8 B: Loshchilov & Hutter 2019), or two moments of
  ``TrainingSpec.optimizer_state_dtype`` (``CostContext.adam_state_bytes``; also muon's AdamW share).
* adamw8bit: two 8-bit states with one fp32 absmax per block of 2048 elements each, 2·(1 + 4/2048)
  B (bitsandbytes ``bitsandbytes/optim/optimizer.py`` ``Optimizer2State.init_state``:
  ``state1``/``state2`` uint8, ``blocks = n // 2048`` (+1), ``absmax1``/``absmax2`` float32;
  Dettmers et al. 2022, "8-bit Optimizers via Block-wise Quantization", Sec. 2). The fp32 master
  weights stay (the trainer's mixed precision).
* adafactor: the factored second moment, rows + columns of each matrix, full for vectors, no
  first moment (Shazeer & Stern 2018, Alg. 4 with β1 = 0; torch.optim.Adafactor and
  transformers' ``Adafactor`` default ``beta1=None``), from the model's matrix shapes
  (``optimizer_shapes``): 4·Σ(r + c)/Σ(r·c) per parameter.
* sgd: the momentum buffer, 4 B (torch.optim.SGD ``momentum_buffer``).
* lion: one momentum, 4 B (Chen et al. 2023, "Symbolic Discovery of Optimization Algorithms", Alg. 1).
* muon: one momentum (4 B) for the 2-D hidden matrices, AdamW for the embedding, the head and
  the vectors (Jordan et al. 2024, Muon; Liu et al. 2025, Moonlight arXiv:2502.16982 Sec. 2).

The share of each kind in a stage's parameters is the model's (a mean over the layers: the
first and last stages, which hold the embedding and head, err by their share).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from autoplan.cost.arrays import zeros_like
from autoplan.cost import optimizer_shapes as shapes
from autoplan.cost.broadcast import once_per_batch
from autoplan.cost.context import CostContext
from autoplan.cost.params import count_params
from autoplan.layout import OPTIMIZERS, LayoutBatch
from autoplan.specs.model import ModelSpec

CODE = {name: float(i) for i, name in enumerate(OPTIMIZERS)}
FP32_BYTES = 4.0
BNB_BLOCK_ELEMENTS = 2048.0  # bitsandbytes blockwise quantisation of optimizer states
ADAMW_8BIT_STATE_BYTES = 2.0 * (1.0 + FP32_BYTES / BNB_BLOCK_ELEMENTS)  # 2 uint8 states + absmax
ONE_MOMENTUM_BYTES = FP32_BYTES  # sgd, lion, muon's matrices
NEWTON_SCHULZ_ITERATIONS = 5  # Muon's ns_steps (Jordan et al. 2024; Megatron --muon-num-ns-steps 5)


@lru_cache(maxsize=256)
def _model_shares(m: ModelSpec) -> dict[str, float]:
    """Per non-expert and expert parameter: Adafactor's factored elements, Muon's matrix share
    and Newton–Schulz FLOPs (of the full, unsharded matrices). Read-only (cached per model)."""
    pc, s = count_params(m), shapes.matrix_shapes(m)
    vec = shapes.vector_params(m)
    n_dense, n_moe = pc.num_dense_layers, pc.num_moe_layers
    non_expert = float(pc.total - n_moe * pc.expert_per_layer)
    hidden = n_dense * shapes.elements(s.dense_layer) + n_moe * shapes.elements(s.moe_layer_shared)
    factored = (n_dense * shapes.factored_elements(s.dense_layer) + n_moe * shapes.factored_elements(s.moe_layer_shared)
                + shapes.factored_elements(s.ends) + n_dense * vec["dense"] + n_moe * vec["moe"]
                + pc.final_norm)
    ns = NEWTON_SCHULZ_ITERATIONS
    ns_hidden = n_dense * shapes.newton_schulz_flops(s.dense_layer, ns) + n_moe * shapes.newton_schulz_flops(
        s.moe_layer_shared, ns)
    experts = max(shapes.elements(s.experts), 1.0)
    return {"adafactor_dense": factored / non_expert,
            "adafactor_expert": (shapes.factored_elements(s.experts) + vec["experts"]) / experts,
            "muon_matrix_share": hidden / non_expert,
            "ns_flops_dense": ns_hidden / non_expert,
            "ns_flops_expert": shapes.newton_schulz_flops(s.experts, ns) / experts}


@once_per_batch
def state_bytes_per_param(ctx: CostContext, b: LayoutBatch) -> tuple[np.ndarray, np.ndarray]:
    """(non-expert, expert) bytes of optimizer state per parameter of each layout (see module)."""
    adam = ctx.adam_state_bytes
    if not np.count_nonzero(b.optimizer):  # every layout on AdamW: the setup's AdamW bytes, as before
        return np.full_like(b.tp, adam), np.full_like(b.tp, adam)
    share = _model_shares(ctx.model)
    muon_dense = share["muon_matrix_share"] * ONE_MOMENTUM_BYTES + (1.0 - share["muon_matrix_share"]) * adam
    codes = b.optimizer.astype(int)
    out = []
    for adafactor, muon in ((share["adafactor_dense"], muon_dense), (share["adafactor_expert"], ONE_MOMENTUM_BYTES)):
        by_code = [adam, ADAMW_8BIT_STATE_BYTES, FP32_BYTES * adafactor, ONE_MOMENTUM_BYTES, ONE_MOMENTUM_BYTES, muon]
        out.append(np.asarray(by_code, dtype=np.float64)[codes])
    return out[0], out[1]


def step_bytes_per_param(ctx: CostContext, state_bytes: np.ndarray, on_host: np.ndarray) -> np.ndarray:
    """Memory bytes one optimizer step moves per parameter it updates.

    Read the gradient, the master weight and the states; write the master weight, the states and
    the compute copy of the weight, each once (a fused multi-tensor step; caches hold none of it):
    grad + 2·(master + state) + weight, the master in the setup's dtype (``CostContext.master_bytes``).
    AdamW under Megatron (weight 2, grad 4, master 4, states 8): 30 B. On the host (``on_host``,
    optimizer offload) the gradient arrives in fp32 and the compute copy is written to a pinned
    staging buffer (DeepSpeed ``DeepSpeedCPUAdam``, csrc/adam/cpu_adam_impl.cpp).
    """
    p = ctx.profile
    grad = np.where(on_host, FP32_BYTES, p.model_states.grad_bytes)
    return grad + 2.0 * (ctx.master_bytes + state_bytes) + p.model_states.weight_bytes


def muon_work(ctx: CostContext, b: LayoutBatch, updated_dense: np.ndarray,
              updated_expert: np.ndarray) -> np.ndarray:
    """Newton–Schulz FLOPs per GPU and step under Muon (0 for the other optimizers).

    Each matrix is orthogonalised whole (Megatron ``--muon-tp-mode duplicated``, the default:
    the TP shards are gathered and every TP rank runs the full matrix), and each matrix by one
    rank of the ZeRO group (Megatron's layer-wise distributed optimizer; Moonlight Sec. 2.3): a
    GPU's share is the parameters it updates (``updated_*``, already ÷ the ZeRO group) times tp
    (etp for experts) times the FLOPs per parameter of ``optimizer_shapes.newton_schulz_flops``.
    """
    if not np.count_nonzero(b.optimizer == CODE["muon"]):
        return zeros_like(b.tp)
    share = _model_shares(ctx.model)
    flops = (updated_dense * b.tp * share["ns_flops_dense"] + updated_expert * b.etp * share["ns_flops_expert"])
    return np.where(b.optimizer == CODE["muon"], flops, 0.0)


def muon_gather_bytes(ctx: CostContext, b: LayoutBatch, stage_dense: np.ndarray,
                      stage_expert: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(non-expert, expert) bytes of the hidden matrices' gradients that distributed Muon gathers
    per step: the rank that orthogonalises a matrix needs all of it, where ZeRO (zero >= 1)
    leaves each rank a shard (Moonlight Sec. 2.3, Algorithm 3 'DP Gather'). The gradient
    travels in the trainer's reduction dtype (``grad_reduce_bytes``); 0 without sharding."""
    muon = (b.optimizer == CODE["muon"]) & (b.zero >= 1)
    if not np.count_nonzero(muon):
        return zeros_like(b.tp), zeros_like(b.tp)
    share = _model_shares(ctx.model)["muon_matrix_share"]
    grad = ctx.grad_reduce_bytes
    return (np.where(muon, stage_dense * share * grad, 0.0), np.where(muon, stage_expert * grad, 0.0))
