"""Definitions of the memory columns of ``evaluate()``: the terms of each stage (which add up
to its total), the totals, the peak and the memory flags. ``cost.terms`` explains the notation.
"""

from __future__ import annotations

from autoplan.cost.memory_formulas import MEMORY_FORMULAS
from autoplan.cost.term_record import KORTHIKANTI, STAGES, ZERO, Term, stage_memory_columns

MODEL_STATE = ("zero_shards_over_cp",)
MEMORY_TERMS_DEFINED = [
    *stage_memory_columns("weights", "compute copy of the parameters held per GPU",
                          MEMORY_FORMULAS["weights"].general(),
                          f"{ZERO}; trainer profile; transformer_engine/pytorch/module/base.py (FP8 weight copies); "
                          "megatron/core/fp8_utils.py (--fp8-param-gather)",
                          ("weight_bytes", "fp8_weight_extra_bytes", "fp8_recipe", "fp8_param_gather",
                           "zero3_pp_unsharded_bytes", "SECONDARY_PARAM_BYTES", *MODEL_STATE)),
    *stage_memory_columns("gradients", "gradient buffers per GPU",
                          MEMORY_FORMULAS["gradients"].general(),
                          f"{ZERO}; trainer profile; megatron/core/distributed/distributed_data_parallel.py "
                          "(--grad-reduce-in-bf16); Llama 3 (arXiv 2407.21783) Sec. 3.3.2 (shard_gradients); "
                          "nanotron src/nanotron/optim/gradient_accumulator.py, trainer.py make_ddp (ddp_bucket_grad_bytes)",
                          ("grad_bytes", "ddp_bucket_grad_bytes", "grad_reduce_in_bf16", "shard_gradients", "BF16_BYTES",
                           *MODEL_STATE)),
    *stage_memory_columns("master_weights", "the optimizer's master weights per GPU (fp32 unless the setup says)",
                          MEMORY_FORMULAS["master_weights"].general(),
                          f"{ZERO}; megatron/training/theoretical_memory_usage.py; megatron/core/optimizer/"
                          "optimizer_config.py (store_param_remainders, --main-params-dtype); Apex "
                          "distributed_fused_adam.py (store_params, store_param_remainders)",
                          ("master_bytes", "master_weights", *MODEL_STATE)),
    *stage_memory_columns("optimizer_states", "optimizer states per GPU (0 on the GPU under offload)",
                          MEMORY_FORMULAS["optimizer_states"].general(),
                          f"{ZERO} (Adam: K = 12 with the master weights); bitsandbytes optim/optimizer.py "
                          "(Optimizer2State, blockwise absmax); Shazeer & Stern 2018 Alg. 4; Chen et al. 2023 (Lion); "
                          "Jordan et al. 2024 and Liu et al. 2025 Moonlight Sec. 2 (Muon); Megatron --exp-avg-dtype "
                          "(precision-aware optimizer), Apex DistributedFusedAdam dtype; autoplan.cost.optimizer",
                          ("optimizer_bytes", "optimizer_state_dtype", "BNB_BLOCK_ELEMENTS", *MODEL_STATE)),
    *stage_memory_columns("activations", "activations saved for backward at the stage's peak",
                          MEMORY_FORMULAS["activations"].general(),
                          f"{KORTHIKANTI} Table 2, Sec. 4.2.3; megatron/core/pipeline_parallel/schedules.py; Qi et al. "
                          "2023 (ZB-H1, ZB-V); DeepSeek-V3 report Table 2 (DualPipe); torchtitan@395a52627 "
                          "torchtitan/models/norms.py (TritonFusedRMSNorm); "
                          "Megatron-Core core_v0.15.3 transformer_block.py _checkpointed_forward (recompute_method "
                          "block), transformer_config.py (recompute_modules, cpu_offloading_num_layers); "
                          "transformer_engine/pytorch/cpu_offload.py (AsyncDoubleBufferGroupOffloadHandler)",
                          ("attention", "mlp", "gpt_residual_dropout_mask_bytes", "full_recompute_input_bytes_per_h",
                           "pp_schedule",
                           "pp_extra_layers_per_microbatch", "attention_kernel", "fp8_recipe",
                           "fp8_saves_quantized_inputs", "moe_capacity_factor", "norm_saving_bytes_per_h",
                           "NORMS_PER_LAYER", "OFFLOAD_STAGING_LAYERS")),
    *stage_memory_columns("embedding_output", "embedding output buffer",
                          MEMORY_FORMULAS["embedding_output"].general(),
                          "Megatron embedding output (first pipeline stage)", ("BF16_BYTES",)),
    *stage_memory_columns("logits_and_loss", "logits and cross-entropy buffers",
                          MEMORY_FORMULAS["logits_and_loss"].general(),
                          "trainer cross-entropy (vocab-parallel over TP); DeepSeek-V3 report Sec. 2.2 (one more "
                          "output head and loss per MTP depth); torch.compile's fused loss (autoplan/cost/loss_kernel.py)",
                          ("logits_bytes_per_vocab", "compile_loss", "COMPILED_LOSS_BYTES_PER_LOGIT")),
    *stage_memory_columns("communication_buffers", "gathered ZeRO-3 layers and the TP all-gather buffer",
                          MEMORY_FORMULAS["communication_buffers"].general(),
                          "FSDP2 prefetch and post-backward reduce-scatter (torch.distributed.fsdp); DeepSpeed stage3_max_live_parameters and "
                          "reduce_bucket_size (deepspeed/runtime/zero/partitioned_param_coordinator.py); "
                          "Megatron sequence-parallel all-gather; megatron/core/transformer/moe/token_dispatcher.py "
                          "(MoEAlltoAllTokenDispatcher)",
                          ("zero3_prefetch_layers", "zero3_max_live_params", "zero3_grad_bucket_params", "BF16_BYTES",
                           "MOE_DISPATCH_COPIES", "moe_capacity_factor", "shard_gradients", "grad_reduce_bytes")),
    *stage_memory_columns("reserve", "allocator fragmentation, CUDA context, NCCL and library workspaces",
                          MEMORY_FORMULAS["reserve"].general(),
                          "calibrated per trainer and GPU (profiles/*.yaml); PyTorch c10/cuda/CUDACachingAllocator.cpp "
                          "(block splitting: fragmentation comes from the varying allocations)", ("allocator_overhead", "memory_reserve_bytes")),
]

MEMORY_TOTALS = [
    *[Term(f"mem_{s}_total_bytes", "total", "memory", "bytes", "memory per GPU of the stage",
           "sum of the stage's memory terms", "autoplan/cost/memory.py", stage=s) for s in STAGES],
    Term("peak_memory_bytes", "peak_memory", "memory", "bytes", "peak memory per GPU over the pipeline stages",
         "max(mem_first_total_bytes, mem_middle_total_bytes, mem_last_total_bytes)", "autoplan/cost/stages.py (the "
         "peak is on the first, an interior or the last stage)"),
    Term("firm_peak_memory_bytes", "firm_peak_memory", "memory", "bytes",
         "peak memory per GPU less the allocator's cache: the least a run needs (a lower bound)",
         "max over stages of (mem_<stage>_total_bytes − allocator_overhead × the stage's transient bytes)",
         "PyTorch c10/cuda/CUDACachingAllocator.cpp (DeviceCachingAllocator::malloc frees cached blocks "
         "and retries before raising OOM; only segments with no live block are freed)",
         ("allocator_overhead",)),
    Term("peak_allocated_memory_bytes", "peak_allocated_memory", "memory", "bytes",
         "peak memory per GPU that tensors hold, as torch.cuda.max_memory_allocated reports it (no cache, "
         "no CUDA context or NCCL workspaces)",
         "max over stages of (mem_<stage>_total_bytes − mem_<stage>_reserve_bytes)",
         "PyTorch torch/cuda/memory.py max_memory_allocated (allocated) against max_memory_reserved "
         "(the caching allocator's segments); the reserve, autoplan/cost/stage_memory.py",
         ("allocator_overhead", "memory_reserve_bytes")),
    Term("peak_memory_gib", "peak_memory", "memory", "GiB", "peak memory per GPU in GiB",
         "peak_memory_bytes / 2^30", "units.GiB"),
    Term("memory_headroom_gib", "memory_headroom", "memory", "GiB", "usable memory left at the peak",
         "(usable_memory_bytes − peak_memory_bytes) / 2^30", "hardware_db/gpus/*.yaml (usable_memory)",
         ("usable_memory_bytes",)),
    Term("host_memory_bytes", "host_memory", "memory", "bytes",
         "model states and activations offloaded to host memory per GPU (offload, offload_layers; 0 without)",
         "master weights + optimizer states (+ weight shards under offload params) + 4 × owned parameters "
         "(the fp32 gradient copy) + the offloaded layers' share of the in-flight activations",
         "Ren et al. 2021 ZeRO-Offload Fig. 2; DeepSpeed stage_1_and_2.py; autoplan.cost.offload; "
         "Megatron-Core transformer_engine cpu_offload (activation offload)"),
    Term("host_memory_fits", "host_memory_fits", "flag", "bool", "offloaded bytes fit in host memory per GPU",
         "host_memory_bytes ≤ host_memory_bytes (of the GPU)", "hardware_db/gpus/*.yaml (host_memory)",
         ("host_memory_bytes",)),
    Term("peak_stage", "peak_stage", "code", "stage rank", "pipeline rank that holds the peak",
         "0, the middle rank or pp − 1: the first of the first, middle and last stage with the largest total",
         "autoplan/cost/memory.py"),
    Term("layers_first_stage", "layers_first_stage", "count", "layers", "transformer layers on the first stage",
         "ceil(L/pp) (L when pp = 1)", "Megatron uneven stages (--decoder-first-pipeline-num-layers)"),
    Term("layers_last_stage", "layers_last_stage", "count", "layers", "transformer layers on the last stage",
         "floor(L/pp) (L when pp = 1)", "Megatron uneven stages (--decoder-first-pipeline-num-layers)"),
]
