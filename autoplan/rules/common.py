"""Rules every trainer shares: degrees, heads over TP, sequence shards, experts, the batch.

Each restates a check that every trainer makes in its own words; the source named is the one
the wording follows (Megatron-LM core_v0.15.3 ``megatron/training/arguments.py``
``validate_args``, torchtitan 0.3.0 ``torchtitan/distributed/parallel_dims.py``).
"""

from __future__ import annotations

import numpy as np

from autoplan.cost.schedule import V_SHAPED, is_schedule
from autoplan.layout import PRECISION
from autoplan.rules.stages import fix_pp
from autoplan.specs.gpu_generation import (
    FP8_ATTENTION_GENERATIONS,
    FP8_RECIPE_GENERATIONS,
    generation_of,
    runs_fp8_attention,
    runs_fp8_recipe,
)
from autoplan.rules.table import (
    ALL,
    Rule,
    gpus_of,
    indivisible,
    nearest,
    num_experts,
    seq_len_of,
)

MEGATRON_ARGS = "Megatron-LM core_v0.15.3 megatron/training/arguments.py (validate_args)"
# Trainers whose pipeline schedules are torch.distributed.pipelining's.
TORCH_PIPELINING = ("torchtitan",)
TITAN_DIMS = "torchtitan 0.3.0 torchtitan/distributed/parallel_dims.py (ParallelDims._validate)"


def _fix_tp(ctx, x) -> str:
    m = ctx.model
    tp = nearest(x.tp, lambda t: m.num_attention_heads % t == 0 and m.num_kv_heads % t == 0
                 and gpus_of(ctx, x) % (t * x.pp * x.cp) == 0)
    return f"try --tp {tp}" if tp else ""


def _fix_cp_seq(ctx, x) -> str:
    return f"try --seq-len {(seq_len_of(ctx, x) // (2 * x.cp) + 1) * 2 * x.cp} or a smaller --cp"


def _ep_grid_broken(b) -> np.ndarray:
    """True where ep·etp does not divide dp·cp·tp."""
    grid, group = b.ep * b.etp, b.dp * b.cp * b.tp
    if (grid == 1.0).all():  # (every grid 1: indivisible(group, 1) without the division and product)
        return np.floor(group) != group
    return indivisible(group, grid)


RULES = [
    Rule("degrees", ALL, "dp·tp·pp·cp must equal gpus",
         lambda c, b: b.dp * b.tp * b.pp * b.cp != gpus_of(c, b),
         lambda c, x: f"dp({x.dp})·tp({x.tp})·pp({x.pp})·cp({x.cp}) = {x.dp * x.tp * x.pp * x.cp} "
                      f"!= gpus({gpus_of(c, x)})",
         TITAN_DIMS),
    Rule("tp_heads", ALL, "attention heads and KV heads (query groups) must be divisible by tp",
         lambda c, b: indivisible(c.model.num_attention_heads, b.tp) | indivisible(c.model.num_kv_heads, b.tp),
         lambda c, x: f"heads={c.model.num_attention_heads}, kv_heads={c.model.num_kv_heads}, tp={x.tp}",
         MEGATRON_ARGS, fix=_fix_tp),
    Rule("pp_layers", ALL, "pp·vpp must not exceed the number of layers (+2 where pp_split counts the embedding and loss)",
         lambda c, b: b.pp * b.vpp > c.model.num_layers + 2.0 * (b.pp_split == 1),
         lambda c, x: f"layers={c.model.num_layers}, pp({x.pp})·vpp({x.vpp}) = {x.pp * x.vpp}",
         MEGATRON_ARGS, fix=fix_pp),
]

# After the pipeline-stage rules (autoplan.rules.stages):
PIPELINE_RULES = [
    Rule("vpp_needs_pp", ALL, "virtual stages (vpp > 1) need pp > 1",
         lambda c, b: (b.vpp > 1) & (b.pp == 1),
         lambda c, x: f"vpp={x.vpp}, pp={x.pp}",
         MEGATRON_ARGS, fix=lambda c, x: "use --vpp 1 or --pp > 1"),
    # Megatron's interleaved 1F1B runs micro-batches in groups of microbatch_group_size_per_vp_stage
    # (default pp); the last group must be whole or hold >= pp (forward_backward_pipelining_with_
    # interleaving): with the default, grad_acc divisible by pp. torch.distributed.pipelining
    # (torchtitan) relaxes it: the next rule.
    Rule("vpp_microbatches", ALL, "the interleaved schedule needs micro-batches (grad_acc) divisible by pp",
         lambda c, b: (b.vpp > 1) & indivisible(b.grad_acc, b.pp),
         lambda c, x: f"grad_acc={x.grad_acc}, pp={x.pp}, vpp={x.vpp}",
         "Megatron-LM core_v0.15.3 megatron/core/pipeline_parallel/schedules.py (interleaved 1F1B)",
         fix=lambda c, x: f"try a global batch whose micro-batch count is a multiple of pp={x.pp}, or --vpp 1",
         when=lambda c: c.profile.name not in TORCH_PIPELINING),
    Rule("vpp_microbatch_rounds", TORCH_PIPELINING,
         "torch's interleaved schedules need micro-batches (grad_acc) divisible by their rounds, max(1, grad_acc // pp)",
         lambda c, b: (b.vpp > 1) & ~is_schedule(b.pp_schedule, *V_SHAPED)
         & indivisible(b.grad_acc, np.maximum(1.0, np.floor(b.grad_acc / b.pp))),
         lambda c, x: f"grad_acc={x.grad_acc}, pp={x.pp}, rounds={max(1, x.grad_acc // x.pp)}, vpp={x.vpp}",
         "torch 2.13.0 torch/distributed/pipelining/schedules.py (ScheduleInterleaved1F1B, "
         "ScheduleInterleavedZeroBubble: number_of_rounds; ZBVZeroBubble and DualPipeV have no such rule)",
         fix=lambda c, x: "try a global batch whose micro-batch count is a multiple of "
                          f"{max(1, x.grad_acc // x.pp)}, or --pp-schedule zb-v with --vpp 2"),
    Rule("cp_seq", ALL, "seq_len must be divisible by 2·cp",
         lambda c, b: (b.cp > 1) & indivisible(seq_len_of(c, b), 2 * b.cp),
         lambda c, x: f"seq_len={seq_len_of(c, x)}, 2·cp={2 * x.cp}",
         MEGATRON_ARGS + " (load-balanced causal context parallelism)", fix=_fix_cp_seq),
    Rule("ep_dense", ALL, "ep > 1 or etp > 1 need a mixture-of-experts model",
         lambda c, b: (b.ep > 1) | (b.etp > 1),
         lambda c, x: f"ep={x.ep}, etp={x.etp}, model {c.model.name!r} is dense",
         MEGATRON_ARGS, when=lambda c: c.model.moe is None),
    Rule("ep_experts", ALL, "routed experts must be divisible by ep",
         lambda c, b: indivisible(num_experts(c), b.ep),
         lambda c, x: f"experts={num_experts(c)}, ep={x.ep}",
         MEGATRON_ARGS, when=lambda c: c.model.moe is not None),
    Rule("ep_grid", ALL, "ep·etp must divide dp·cp·tp (the expert grid of a stage)",
         lambda c, b: _ep_grid_broken(b),
         lambda c, x: f"ep({x.ep})·etp({x.etp}) = {x.ep * x.etp}, dp·cp·tp = {x.dp * x.cp * x.tp}",
         "Megatron-LM core_v0.15.3 megatron/core/parallel_state.py (expert rank generator)"),
    Rule("sp_needs_tp", ALL, "sequence parallel needs tp > 1",
         lambda c, b: (b.sp > 0) & (b.tp == 1),
         lambda c, x: f"sp=true, tp={x.tp}",
         MEGATRON_ARGS, fix=lambda c, x: "drop --sp or use --tp > 1"),
    Rule("sp_seq", ALL, "with sequence parallel, seq_len must be divisible by cp·tp",
         lambda c, b: (b.sp > 0) & indivisible(seq_len_of(c, b) / b.cp, b.tp),
         lambda c, x: f"seq_len={seq_len_of(c, x)}, cp·tp={x.cp * x.tp}",
         MEGATRON_ARGS),
]

# After the trainer-specific structure rules. (Whether a layout reaches the global batch is not a
# rule: layout.derive_batch_knobs decides it, the search's recipe counts it as its own step and
# resolve_layout refuses a layout that misses it.)
BATCH_RULES = [
    Rule("seq_positions", ALL, "seq_len must not exceed the model's learned position embeddings",
         lambda c, b: (c.model.position_embedding == "learned")
         & (seq_len_of(c, b) > c.model.max_position_embeddings),
         lambda c, x: f"seq_len={seq_len_of(c, x)} > {c.model.max_position_embeddings}",
         MEGATRON_ARGS + " (seq_length <= max_position_embeddings)"),
    Rule("fp8_hardware", ALL, "fp8 needs a GPU with FP8 tensor cores",
         lambda c, b: b.precision == PRECISION["fp8"],
         lambda c, x: f"precision=fp8, gpu={c.cluster.gpu.name}",
         "Transformer Engine: FP8 GEMMs need compute capability >= 8.9",
         fix=lambda c, x: "use --precision bf16", when=lambda c: c.cluster.gpu.peak_fp8_flops_per_s <= 0),
    Rule("fp8_recipe_hardware", ALL, "the FP8 recipe must be one the GPU's tensor cores run",
         lambda c, b: b.precision == PRECISION["fp8"],
         lambda c, x: f"fp8_recipe={c.training.fp8_recipe}, gpu={c.cluster.gpu.name} "
                      f"({generation_of(c.cluster.gpu)}); {c.training.fp8_recipe} needs "
                      f"{' or '.join(FP8_RECIPE_GENERATIONS.get(c.training.fp8_recipe, ()))}",
         "specs/gpu_generation.py FP8_RECIPE_GENERATIONS (Transformer Engine fp8.py check_mxfp8_support)",
         fix=lambda c, x: "try --fp8-recipe tensorwise",
         when=lambda c: not runs_fp8_recipe(c.cluster.gpu, c.training.fp8_recipe)),
    Rule("fp8_attention_hardware", ALL, "FP8 attention runs only in the fused (flash) kernel of a GPU that has it",
         lambda c, b: b.precision == PRECISION["fp8"],
         lambda c, x: f"fp8_attention=true, attention_kernel={c.training.attention_kernel}, gpu={c.cluster.gpu.name} "
                      f"({generation_of(c.cluster.gpu)}); FP8 attention needs the flash kernel on "
                      f"{' or '.join(FP8_ATTENTION_GENERATIONS)}",
         "specs/gpu_generation.py FP8_ATTENTION_GENERATIONS (Transformer Engine fused_attn.cpp "
         "nvte_get_fused_attn_backend, dot_product_attention/utils.py get_attention_backend)",
         fix=lambda c, x: "drop --fp8-attention",
         when=lambda c: c.training.fp8_attention
         and (c.training.attention_kernel == "eager" or not runs_fp8_attention(c.cluster.gpu))),
]
