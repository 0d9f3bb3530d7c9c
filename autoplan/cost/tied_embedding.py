"""All-reduce of a tied embedding's gradient between the first and the last pipeline stage.

With tied input embedding and output head (``ModelSpec.tied_embeddings``) and pp > 1, the
first stage holds the word embedding and the last stage a copy of it as the LM head; each
computes a gradient for its copy, and every trainer sums the two once per step, after the
last micro-batch's backward and before the optimizer step, with nothing left to hide it behind:

* Megatron-LM: ``_allreduce_word_embedding_grads`` (megatron/core/distributed/
  finalize_model_grads.py), an all-reduce of the embedding's fp32 ``main_grad`` over the
  embedding group (the first and last stage of each (tp, dp) position), after
  ``finish_grad_sync``;
* DeepSpeed's pipeline engine (Megatron-DeepSpeed, BLOOM): the ``ReduceTiedGrads`` instruction
  that ``TrainSchedule`` appends after the last ``BackwardPass`` (deepspeed/runtime/pipe/
  schedule.py; engine.py ``_exec_reduce_tied_grads``);
* nanotron: ``sync_tied_weights_gradients`` (src/nanotron/parallel/tied_parameters.py), an
  ``all_reduce_coalesced`` of the gradient accumulator's buffers after the pipeline's backward.

Volume: the rank's shard of the V × h embedding (vocab-parallel over tp) in the trainer's
gradient-reduction dtype (``grad_reduce_bytes``; DeepSpeed's pipeline under bf16 reduces the tied
weight's fp32 ``_hp_grad``, ``pp_grad_all_reduce_bytes`` = 4, engine.py ``_exec_reduce_tied_grads``). A two-rank ring all-reduce moves 2(n − 1)/n = 1
times the buffer each way and takes two latency steps (Thakur et al. 2005, Sec. 4). The two
ranks are (pp − 1) pipeline strides apart: on the scale-up links when the whole pipeline sits in
one domain (the test of ``comm.p2p_s``), else over each rank's own NIC (every (tp, dp) position
runs its pair at once, one NIC per GPU on a rail-optimised cluster).
"""

from __future__ import annotations

import numpy as np

from autoplan.cost import comm
from autoplan.cost.context import CostContext
from autoplan.cost.data_parallel import engine_all_reduces_grads
from autoplan.layout import LayoutBatch


def tied_embedding_allreduce_s(ctx: CostContext, b: LayoutBatch, pp_stride: np.ndarray) -> np.ndarray:
    """Seconds per step of the tied-embedding gradient all-reduce (0 when untied or pp = 1).

    t = V·h/tp·grad_reduce_bytes / busbw + 2·α, busbw and α of the scale-up links when
    pp·pp_stride fits in the scale-up domain, else of the NIC (module doc).
    """
    m = ctx.model
    if not m.tied_embeddings:  # untied: the where below gives 0 everywhere
        return np.zeros(np.shape(b.pp))
    bus = comm.p2p_bus_bytes_per_s(ctx, pp_stride, b.pp)
    latency = comm.p2p_latency_s(ctx, pp_stride, b.pp)
    p = ctx.profile
    dtype_bytes = np.where(engine_all_reduces_grads(ctx, b), p.pipeline.grad_all_reduce_bytes, ctx.grad_reduce_bytes)
    grad_bytes = m.vocab_size * m.hidden_size / b.tp * dtype_bytes
    applies = (b.pp > 1) & bool(m.tied_embeddings)
    return np.where(applies, grad_bytes / bus + 2.0 * latency, 0.0)
