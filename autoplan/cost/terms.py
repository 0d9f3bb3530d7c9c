"""One definition per column that ``evaluate()`` returns: kind, unit, meaning, formula, source.

Everything that shows a cost term reads it from here: ``autoplan explain``, the column
dictionary of a search's results and the derivation page ``docs/cost-model.md``
(``python -m autoplan.report.derivation`` regenerates it). The formula of a memory or time term is its declaration in ``cost.memory_formulas`` /
``cost.time_formulas`` (an expression over named intermediates the code computes, checked against
the column by tests/unit/cost/test_formulas.py); ``parameters`` names the context fields
(``PhysicalEfficiency``, ``Corrections``, ``TrainerProfile``, ``GPUSpec``, ``Cluster``) and the
module constants (``CONSTANTS``) each term reads.

Notation (per GPU, for one micro-batch unless said): tokens = mbs·seq_len/cp;
h_div = tp if sp else 1; h the hidden size, V the vocabulary, L_S the layers of stage S
(n_dense + n_moe of them); P_dense, P_expert the non-expert and expert parameters one GPU holds
on the stage (twice a stage's under pp_schedule dualpipe: ``cost.schedule.parameter_copies``); G the ZeRO group, G_e = max(G·tp/(ep·etp), 1) the expert-data-parallel group;
AG, RS, AR, A2A(S): ring all-gather, reduce-scatter, all-reduce, all-to-all of S bytes over a
group (``cost/comm.py``: AG = RS = (n−1)/n·S/busbw + log2(n)·α, AR twice that, busbw from
``scale_up_efficiency`` or ``scale_out_efficiency``). Data-parallel collectives (``cost/data_parallel.py``)
pay NCCL's latency per collective instead: ring (n − N)·α_up + (N − 1)·α_out over N nodes
(twice for AR), or for AR the tree's 2·(log2(k)·α_up + log2(N)·α_out) when smaller.
"""

from __future__ import annotations

from autoplan.cost.time_formulas import TIME_FORMULAS
from autoplan.cost.memory_columns import MEMORY_TERMS_DEFINED, MEMORY_TOTALS
from autoplan.cost.formula import Constant
from autoplan.cost.term_record import KINDS, KORTHIKANTI, SC21, STAGES, STEP_TIME, ZERO, Term

__all__ = ["CONSTANTS", "KINDS", "STAGES", "STEP_TIME", "Term", "BY_COLUMN", "TERMS", "memory_terms", "summands", "term",
           "time_terms"]


GEMM = ("gemm_efficiency_max", "gemm_half_flops", "fp8_gemm_speedup", "attention_efficiency", "attention_half_seq_tokens",
        "attention_half_head_dim",
        "elementwise_bytes_per_token_hidden", "hbm_efficiency", "peak_bf16_flops_per_s",
        "power_limited_clock_fraction", "hbm_bytes_per_s", "exp_ops_per_s",
        "ATTENTION_BACKWARD_FACTOR", "REPLICATED_ELEMENTWISE_SHARE", "unfused_attention_factor",
        "BACKWARD_MATMUL_FACTOR")
LINKS = ("scale_up_efficiency", "scale_out_efficiency", "scale_up_bytes_per_s", "nic_bytes_per_s",
         "scale_up_latency_s", "scale_out_latency_s", "scale_up_domain_size")

# Module constants the terms' parameters name: the value is read from its module, the meaning
# is written here once.
CONSTANTS: dict[str, Constant] = {c.name: c for c in (
    Constant("BF16_BYTES", "time", "bytes of one bf16 element"),
    Constant("MOE_DISPATCH_COPIES", "memory",
             "routed-token copies an all-to-all dispatch holds at once (send and receive buffers)"),
    Constant("ATTENTION_BACKWARD_FACTOR", "time",
             "flash-attention backward time over its forward (FlashAttention-2 Sec. 3)"),
    Constant("REPLICATED_ELEMENTWISE_SHARE", "time",
             "share of element-wise work replicated over TP without SP "
             "(Korthikanti et al. 2022, Table 2: 10 of 34 sbh)"),
    Constant("TP_COLLECTIVES_PER_PASS", "time",
             "TP collectives per layer and pass (2 all-gathers + 2 reduce-scatters)"),
    Constant("EAGER_SCORE_BYTES_FORWARD", "time",
             "HBM bytes per s×s score element of eager attention's forward "
             "(QKᵀ write, softmax read + write, PV read)"),
    Constant("EAGER_SCORE_BYTES_BACKWARD", "time",
             "HBM bytes per s×s score element of eager attention's backward "
             "(dprobs write, softmax backward read 2 + write, dV read, dQ and dK reads)"),
    Constant("BACKWARD_MATMUL_FACTOR", "time",
             "matmul backward time over its forward (input and weight gradients; SC'21 Sec. 5.1)"),
    Constant("SECONDARY_PARAM_BYTES", "hybrid_shard",
             "bytes of one parameter in ZeRO++ hpZ's bf16 secondary partition"),
    Constant("PARAM_GATHER_BYTES", "data_parallel", "bytes of one gathered parameter (bf16 param_dtype)"),
    Constant("ZERO3_GATHERS_PER_MICROBATCH", "data_parallel",
             "ZeRO-3 parameter gathers per layer and micro-batch: forward and backward"),
    Constant("SHARD_GRAD_OP_GATHERS_PER_MICROBATCH", "data_parallel",
             "FSDP SHARD_GRAD_OP (ZeRO-2) parameter gathers per layer and micro-batch: the forward's only"),
    Constant("NORMS_PER_LAYER", "recompute", "normalisations per transformer layer (pre-attention, pre-MLP)"),
    Constant("OFFLOAD_STAGING_LAYERS", "recompute",
             "layers of activations an offloading stage keeps in transfer (TE's double buffer)"),
    Constant("BNB_BLOCK_ELEMENTS", "optimizer", "elements per fp32 absmax of bitsandbytes' blockwise 8-bit states"),
    Constant("NEWTON_SCHULZ_ITERATIONS", "optimizer", "Muon's Newton–Schulz steps per update (Jordan et al. 2024)"),
    Constant("HOST_LINK_EFFICIENCY", "host_link",
             "payload share of the host link's rate per direction (measured: pinned copies, H200)"),
    Constant("BACKWARD_LAUNCH_FACTOR", "host_dispatch",
             "kernel launches of a layer's backward over its forward's (data and weight gradients)"),
    Constant("COMPILED_LOSS_BYTES_PER_LOGIT", "loss_kernel",
             "bytes per logit at the compiled cross-entropy's peak: the bf16 logits saved and their bf16 gradient"),
    Constant("COMPILED_LOSS_HBM_BYTES_PER_LOGIT", "loss_kernel",
             "HBM bytes per logit the compiled cross-entropy moves: two forward reads, a backward read and write"),
    Constant("DISPATCH_SHARE_BOUND", "host_dispatch",
             "the MoE dispatch's share of a pass's EP exchange, at most (no more bytes than the combine)"),
    Constant("HOST_MEMORY_EFFICIENCY", "offload",
             "share of host DRAM bandwidth a streaming CPU kernel reaches (STREAM triad)"),
)}


def _time(term: str, meaning: str, formula: str, source: str, parameters: tuple[str, ...] = ()) -> Term:
    return Term(f"time_{term}_s", term, "time", "s", meaning, formula, source, parameters, adds_to=STEP_TIME)


TIME_TERMS_DEFINED = [
    _time("compute", "forward and backward compute of the slowest stage",
          TIME_FORMULAS["compute"].general(),
          f"{SC21} Sec. 5.1 (backward = 2 × forward); FlashAttention-2 (Dao 2023) Sec. 3, Fig. 4 and 7 "
          "(attention_kernel triton at its published speed: autoplan/cost/attention_kernels.py); FlashAttention-4 "
          "(Zadouri et al. 2026) Sec. 3 (the forward bound by the slower of tensor cores and exp units: "
          "time.exp_floor_s); PyTorch "
          "cross_entropy (log_softmax + nll_loss) passes over the logits; autoplan/cost/fp8.py "
          "(DeepSeek-V3 report Sec. 3.3.2, Transformer Engine recipes); autoplan/cost/moe_time.py (Megatron-Core "
          "--moe-grouped-gemm, MoEAlltoAllTokenDispatcher); nanotron src/nanotron/optim/gradient_accumulator.py "
          "(FP32GradientAccumulator._accumulate_grad); DeepSpeed pipe/engine.py _exec_backward_pass "
          "(BF16_Optimizer.update_hp_grads); Megatron-LM megatron/model/fused_softmax.py (eager attention); "
          "Williams, Waterman and Patterson 2009, CACM 52(4) (roofline: the expert weight read)",
          (*GEMM, "attention_kernel", "loss_hbm_bytes_per_logit", "compile_loss", "COMPILED_LOSS_HBM_BYTES_PER_LOGIT",
           "moe_layer_fixed_s", "fp8_recipe", "fp8_attention",
           "grad_accumulation_bytes_per_param",
           "EAGER_SCORE_BYTES_FORWARD", "EAGER_SCORE_BYTES_BACKWARD", "eager_attention_dropout_bytes",
           "pp_grad_all_reduce_bytes")),
    _time("recompute", "forward work recomputed in backward",
          TIME_FORMULAS["recompute"].general(),
          f"{KORTHIKANTI} Sec. 5, Appendix A; Megatron-Core core_v0.15.3 transformer_block.py "
          "_checkpointed_forward, transformer_config.py recompute_modules",
          ("selective_recompute_matmul_fraction", "selective_recomputes_attention",
           "full_recompute_skips_last_linear", *GEMM)),
    _time("offload_exposed", "activation offload traffic over the host link not hidden by compute",
          TIME_FORMULAS["offload_exposed"].general(),
          "Megatron-Core cpu_offloading_num_layers; transformer_engine/pytorch/cpu_offload.py "
          "(AsyncDoubleBufferGroupOffloadHandler: one layer in transfer while the next computes)",
          ("host_bytes_per_s", "HOST_LINK_EFFICIENCY", "BACKWARD_MATMUL_FACTOR")),
    _time("host_exposed", "host (CPU) kernel-launch time not hidden behind the GPU's work",
          TIME_FORMULAS["host_exposed"].general(),
          "PyTorch CUDA semantics (asynchronous execution: the host runs ahead until a sync); Megatron-Core "
          "token_dispatcher.py MoEAlltoAllTokenDispatcher._maybe_dtoh_and_synchronize (the dropless host sync per "
          "MoE layer, at before_ep_alltoall); Johnson 1954 (Naval Res. Logist. Q. 1(1): a two-machine flow shop's "
          "makespan, host launching and GPU running in launch order); Transformer Engine make_graphed_callables, Megatron-Core transformer/cuda_graphs.py and "
          "full_cuda_graph.py (--cuda-graph-impl, --cuda-graph-scope); autoplan/cost/host_dispatch.py",
          ("host_launch_s", "host_launch_slowdown", "cuda_graphs", "moe_capacity_factor", "BACKWARD_LAUNCH_FACTOR",
           "DISPATCH_SHARE_BOUND")),
    _time("tp_exposed", "tensor-parallel communication not hidden by compute",
          TIME_FORMULAS["tp_exposed"].general(),
          f"{KORTHIKANTI} Sec. 4.2.2 (sequence parallelism: 2 all-gathers + 2 reduce-scatters per layer "
          "and pass); Thakur et al. 2005 Sec. 4 (ring); autoplan/cost/tp_comm.py",
          ("tp_overlap", "tp_comm_overlap", "collective_overhead_s", "pp_cross_tp_sync_s",
           "selective_recompute_tp_collectives", "BF16_BYTES", "TP_COLLECTIVES_PER_PASS", *LINKS)),
    _time("cp_exposed", "context-parallel K/V exchange not hidden by attention",
          TIME_FORMULAS["cp_exposed"].general(),
          "ring attention (Liu et al. 2023); Megatron-Core context parallelism; PyTorch's context_parallel "
          "allgather rotate method (torch/distributed/tensor/experimental/_attention.py); autoplan/cost/cp_comm.py",
          ("cp_overlap", "cp_rotate_method", "cp_kv_repeated", "cp_grad_exchange_bytes", "BF16_BYTES",
           "ATTENTION_BACKWARD_FACTOR", *LINKS)),
    _time("ep_exposed", "expert-parallel all-to-all not hidden by compute",
          TIME_FORMULAS["ep_exposed"].general(),
          "Megatron-Core MoE token dispatcher (dispatch + combine); DeepSeek-V3 report Sec. 2.1.2, 3.2.2 "
          "(node-limited routing, DeepEP), Sec. 3.2.1 (DualPipe); autoplan/cost/moe_time.py",
          ("ep_overlap", "moe_a2a_overlap", "moe_token_dedup", "moe_fp8_dispatch", "BF16_BYTES", *LINKS)),
    _time("pp_exposed", "pipeline point-to-point sends not hidden",
          TIME_FORMULAS["pp_exposed"].general(),
          f"{SC21} Sec. 2.2; autoplan.cost.schedule (chunks_per_rank, hides_pipeline_and_expert_comm); nanotron "
          "src/nanotron/parallel/pipeline_parallel/p2p.py (P2P._send_meta, _recv_meta)",
          ("pp_overlap", "pp_blocking_metadata_messages", "BF16_BYTES", *LINKS)),
    _time("dp_exposed", "data-parallel gradient reduction and parameter gathers not hidden",
          TIME_FORMULAS["dp_exposed"].general(),
          f"PyTorch DDP gradient buckets; Megatron-Core distributed_data_parallel.py (register_grad_ready, "
          f"start_grad_sync on its own stream), pipeline_parallel/schedules.py (grad_sync_func, param_sync_func "
          f"per model chunk); {ZERO}, Sec. 7 (2Ψ, 3Ψ per step); FSDP2 prefetch; NVIDIA/nccl "
          "src/graph/tuning.cc (ring and tree latency); DeepSpeed partitioned_param_coordinator.py "
          "(stage3_max_reuse_distance); Megatron-LM finalize_model_grads.py _allreduce_word_embedding_grads, "
          "DeepSpeed pipe/schedule.py ReduceTiedGrads, nanotron tied_parameters.py sync_tied_weights_gradients",
          ("dp_overlap", "fsdp_overlap", "grad_reduce_bytes", "PARAM_GATHER_BYTES", "BACKWARD_MATMUL_FACTOR",
           "ZERO3_GATHERS_PER_MICROBATCH", "SHARD_GRAD_OP_GATHERS_PER_MICROBATCH", "dp_bucket_params", "dp_bucket_params_per_rank", "param_gather_bucket_params",
           "zero3_reuse_distance_params",
           "zero3_pp_unsharded_bytes", "pp_overlaps_grad_reduce", "pp_grad_all_reduce_bytes", *LINKS)),
    _time("bubble", "pipeline fill and drain",
          TIME_FORMULAS["bubble"].general(),
          f"{SC21} Sec. 2.2 (1F1B, interleaved); Qi et al. 2023 Zero Bubble Pipeline Parallelism Sec. 3 (ZB-H1, "
          "ZB-H2), Qi et al. 2024 Pipeline Parallelism with Controllable Memory (ZB-V); DeepSeek-V3 report Table 2 "
          "(DualPipe); autoplan.cost.schedule.bubble_micro_batches", ("BACKWARD_MATMUL_FACTOR",)),
    _time("optimizer", "optimizer step on the GPU (memory-bound update; 0 under offload)",
          TIME_FORMULAS["optimizer"].general(),
          "update memory traffic: read the gradient, master weight and states, write master and states "
          "and the compute copy (autoplan.cost.optimizer.step_bytes_per_param)",
          ("grad_bytes", "master_bytes", "master_weights", "optimizer_bytes", "optimizer_state_dtype", "weight_bytes",
           "zero_shards_over_cp", "hbm_bytes_per_s", "hbm_efficiency")),
    _time("muon", "Muon's Newton–Schulz iterations and its gradient gather (0 for other optimizers)",
          TIME_FORMULAS["muon"].general(),
          "Jordan et al. 2024 (Muon, zeropower_via_newtonschulz5); Liu et al. 2025 Moonlight Sec. 2.3 "
          "(distributed Muon, Algorithm 3); Megatron --muon-tp-mode duplicated; autoplan.cost.optimizer_step",
          ("peak_bf16_flops_per_s", "power_limited_clock_fraction", "gemm_efficiency_max", "grad_reduce_bytes",
           "NEWTON_SCHULZ_ITERATIONS")),
    _time("optimizer_offload", "optimizer step on the host with its transfers (offload, else 0)",
          TIME_FORMULAS["optimizer_offload"].general(),
          "Ren et al. 2021 ZeRO-Offload Sec. 4 (CPU Adam, overlap of the gradient copy with backward); "
          "DeepSpeed csrc/adam/cpu_adam_impl.cpp; autoplan.cost.offload",
          ("grad_reduce_bytes", "host_bytes_per_s", "host_memory_bytes_per_s", "HOST_LINK_EFFICIENCY",
           "HOST_MEMORY_EFFICIENCY", "BF16_BYTES")),
    _time("overhead", "fixed per-step time (data loading, logging, launches)", TIME_FORMULAS["overhead"].general(),
          "calibrated per trainer and GPU (profiles/*.yaml)", ("step_overhead_s",)),
    _time("memory_pressure", "allocator frees and retries near the memory limit",
          TIME_FORMULAS["memory_pressure"].general(), "c10/cuda/CUDACachingAllocator.cpp (release_cached_blocks and retry, num_alloc_retries); "
          "pytorch/pytorch#193391; autoplan.cost.evaluate.memory_pressure_s (calibrated)",
          ("memory_pressure_slowdown", "memory_pressure_threshold", "usable_memory_bytes")),
]

TOTALS_AND_RATES = [
    Term(STEP_TIME, "step", "time", "s", "time of one optimizer step", "sum of the time terms",
         f"{SC21} Sec. 2.2: (m + (p − 1)/v)·t_micro + data-parallel, optimizer and fixed time"),
    Term("bubble_fraction", "bubble_fraction", "ratio", "1", "share of the step spent in the pipeline bubble",
         "time_bubble_s / step_time_s", f"{SC21} Sec. 2.2"),
    Term("model_flops_per_step", "model_flops", "count", "FLOPs", "model FLOPs of one step (the MFU convention)",
         "(6·(N + D·N_mtp) + 3·(L + D)·2·k̄·a·(d_qk + d_v), halved attention under causal) × gbs_seqs·seq_len; "
         "k̄ = seq_len, or fewer keys per query under a sliding window or chunks (flops.attention_keys); "
         "N = the flops_convention's parameter count (playbook: active parameters with a tied "
         "head counted again; causal: the same with the attention term halved; megatron: without the embedding "
         "lookup); D = num_mtp_layers under mtp_in_model_flops (default), else 0; N_mtp = one MTP depth's "
         "active block, projection, norms and the LM head matmul",
         f"Kaplan et al. 2020 Sec. 2.1 (6·N·T); {SC21} Sec. 5.1 (attention); Jiang et al. 2023 (Mistral 7B) "
         "Sec. 2 (sliding window); docs/conventions.md; Megatron-LM "
         "megatron/training/training.py num_floating_point_operations (MTP layers, norms and proj, logits × (mtp + 1))",
         ("flops_convention", "mtp_in_model_flops")),
    Term("tokens_per_s_per_gpu", "tokens_per_s_per_gpu", "rate", "tokens/s", "training throughput per GPU",
         "gbs_seqs·seq_len / (step_time_s·gpus)", "definition"),
    Term("model_tflops_per_gpu", "model_tflops_per_gpu", "rate", "TFLOP/s", "model FLOP rate per GPU",
         "model_flops_per_step / (step_time_s·gpus) / 10^12", "definition (MFU numerator)"),
    Term("hardware_tflops_per_gpu", "hardware_tflops_per_gpu", "rate", "TFLOP/s",
         "FLOP rate per GPU the kernels run, recomputation included (the same under every flops_convention)",
         "(3·(layer matmuls + 2·V·h + L·k̄·a·(d_qk + d_v)) + recompute FLOPs) per token × gbs_seqs·seq_len "
         "/ (step_time_s·gpus) / 10^12; causal attention as executed, no embedding lookup",
         f"{SC21} Sec. 5.1 (3 forwards); {KORTHIKANTI} Appendix A eq. 7–9 (recompute FLOPs); Jiang et al. 2023 "
         "(Mistral 7B) Sec. 2 (sliding window)",
         ("selective_recompute_matmul_fraction", "selective_recomputes_attention",
          "full_recompute_skips_last_linear")),
    Term("mfu", "mfu", "ratio", "1", "model FLOPs utilisation",
         "model_tflops_per_gpu·10^12 / peak_bf16_flops_per_s", "PaLM (Chowdhery et al. 2022) Appendix B",
         ("peak_bf16_flops_per_s",)),
    Term("hfu", "hfu", "ratio", "1", "hardware FLOPs utilisation (recompute counted)",
         "hardware_tflops_per_gpu·10^12 / peak_bf16_flops_per_s", f"{KORTHIKANTI} Sec. 6",
         ("peak_bf16_flops_per_s",)),
    Term("fits", "fits", "flag", "bool", "the layout is legal and its peak fits in usable memory",
         "reason_code = 0 and peak_memory_bytes ≤ usable_memory_bytes and host_memory_fits",
         "autoplan/rules/ (the rule table)",
         ("usable_memory_bytes",)),
    Term("fits_with_retries", "fits_with_retries", "flag", "bool",
         "the layout is legal and fits at least in the allocator's free-and-retry regime: it fits, or "
         "only its cache is beyond the card (may run, slowly, or fail)",
         "reason_code = 0 and firm_peak_memory_bytes ≤ usable_memory_bytes and host_memory_fits",
         "autoplan/cost/stage_memory.py (memory_table); autoplan/cost/evaluate.py (memory_pressure_s)",
         ("usable_memory_bytes",)),
    Term("reason_code", "reason_code", "code", "code", "the first broken rule (0 when legal)",
         "index into rules.REASON_CODES", "autoplan/rules/evaluate.py"),
]

TERMS: tuple[Term, ...] = (*MEMORY_TERMS_DEFINED, *MEMORY_TOTALS, *TIME_TERMS_DEFINED, *TOTALS_AND_RATES)
BY_COLUMN: dict[str, Term] = {t.column: t for t in TERMS}


def term(column: str) -> Term:
    """The definition of ``column``."""
    return BY_COLUMN[column]


def summands(total: str) -> tuple[Term, ...]:
    """The terms that add up to ``total`` (a stage's memory total or the step time), in order."""
    return tuple(t for t in TERMS if t.adds_to == total)


def memory_terms(stage: str) -> tuple[Term, ...]:
    """The memory terms of ``stage`` ('first' or 'last'), which add up to its total."""
    return summands(f"mem_{stage}_total_bytes")


def time_terms() -> tuple[Term, ...]:
    """The time terms, which add up to ``step_time_s``."""
    return summands(STEP_TIME)
