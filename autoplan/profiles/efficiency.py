"""Physical efficiencies and named empirical corrections of one (trainer, GPU) pair.

Two kinds of parameter, kept apart:

* :class:`PhysicalEfficiency`: fractions of a hardware peak (GEMM, attention, HBM, NVLink, NIC),
  fractions of a communication hidden behind compute, and the four figures of the kernels'
  work that the time model needs beside them (GEMM half-efficiency size, attention
  half-efficiency length, FP8 speed-up, element-wise HBM traffic). A physical value has a plausible range from what the hardware and
  its libraries are known to reach.
* :class:`Corrections`: empirical terms that stand in for a mechanism the cost model does not
  have. Each names the mechanism and has a neutral value (at which it changes nothing); its size
  is a measure of what the model misses.

Every field describes itself through ``dataclasses.field(metadata=...)``: ``doc``, ``unit``
("" for a fraction or ratio), ``bounds`` (hard limits: parsing and fitting never leave them),
``plausible`` (a fitted value outside is flagged) and, for a correction, ``neutral``
(:data:`PARAMETERS` collects them). Neither class has Python defaults: the values come from
``defaults.yaml`` beside this module (each with its ``source``), a profile's ``defaults:`` block
or its per-GPU ``calibrated:`` block (:mod:`autoplan.profiles.parameter_files`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace

GIB = 2.0**30  # bytes; the plausible reserve is stated in GiB


def _physical(doc: str, bounds: tuple[float, float], plausible: tuple[float, float], unit: str = ""):
    return field(metadata={"doc": doc, "unit": unit, "bounds": bounds, "plausible": plausible})


def _correction(doc: str, bounds: tuple[float, float], plausible: tuple[float, float], neutral: float,
                unit: str = "", regime: str = ""):
    """A correction's field; ``regime`` names the attention kernel whose mechanism it stands for
    (it then applies under that kernel only, and, a property of the kernel rather than of the
    measured cluster, is carried to a GPU the trainer was not measured on)."""
    return field(metadata={"doc": doc, "unit": unit, "bounds": bounds, "plausible": plausible,
                           "neutral": neutral, "regime": regime})


_FRACTION = (0.05, 1.0)  # a fraction of a peak: above 0 (a fit searches from 0.05) and at most 1
_OVERLAP = (0.0, 1.0)
_OVERLAP_DOC = ("Fraction of the {} communication hidden behind compute (0: fully exposed, "
                "1: fully hidden).")


@dataclass(frozen=True)
class PhysicalEfficiency:
    """Achieved fractions of the hardware's peaks and overlap fractions (see the module doc)."""

    gemm_efficiency_max: float = _physical(
        "Fraction of the dense BF16 peak that a large GEMM reaches (cuBLAS/cuBLASLt reach about "
        "0.6-0.85 of the datasheet peak on A100 and H100; above 0.9 is not seen).", _FRACTION, (0.5, 0.9))
    gemm_half_flops: float = _physical(
        "GEMM size at which a GEMM reaches half of gemm_efficiency_max: eff = max·F/(F + F_half), F "
        "one GEMM's FLOPs per GPU and micro-batch (cost.time.gemm_efficiency). "
        "F_half/(max·peak) is the fixed time of one GEMM (launch, tail wave): ~2-5 µs at 1e9-5e9 "
        "FLOPs on an H100, 50 µs at 5e10; more than that is not a property of one GEMM. A fit far "
        "above stands in for work that shrinks less than h² with the model (a FLOP convention that "
        "over-counts small models, element-wise and loss passes, attention) or for skinny GEMMs.",
        (1e6, 1e12), (1e8, 5e10), unit="FLOP")
    attention_efficiency: float = _physical(
        "Fraction of the dense BF16 peak that the flash-attention kernels reach, forward and "
        "backward, at long sequences where attention_half_seq_tokens is set (FlashAttention-2: 50-73% forward, less backward, on A100; FlashAttention-3: "
        "up to 75% on H100). Measured on an H100 SXM, causal, head dim 128, forward + backward "
        "(validation/h100_sxm_kernels.csv): FlashAttention-2 0.16 at seq 1K to 0.33 at 32K, cuDNN "
        "0.26 to 0.57, hence the plausible floor 0.15. Non-flash attention is the correction "
        "unfused_attention_factor; attention_kernel triton runs at its published speed instead "
        "(cost/attention_kernels.py).",
        _FRACTION, (0.15, 0.8))
    attention_half_seq_tokens: float = _physical(
        "Keys per flash-attention call at which the kernel reaches half of attention_efficiency: "
        "eff(s) = attention_efficiency·s/(s + s_half), s = seq_len/cp (one ring-attention block "
        "under context parallelism). Short sequences run below the kernel's peak: per-tile set-up "
        "and the half-empty diagonal tiles of the causal mask weigh more. Measured on an H100 SXM, "
        "causal, head dim 128, forward + backward (validation/h100_sxm_kernels.csv): "
        "FlashAttention-2 1,093, cuDNN 1,357. 0 keeps attention_efficiency at every length.",
        (0.0, 1e5), (0.0, 4096.0), unit="tokens")
    attention_half_head_dim: float = _physical(
        "Head dimension d_0 of the flash-attention kernel's fall with smaller heads: attention_efficiency "
        "is the figure at head dim 128 and scales by [d/(d + d_0)]/[128/(128 + d_0)] at head dim d (the "
        "query-key dimension): a smaller head does less work per tile load and per softmax element. "
        "Measured on an H100 SXM, head dim 64 over 128 at 1K-16K keys, forward + backward "
        "(validation/h100_sxm_attention_head_dim.csv): FlashAttention-2 0.89 (d_0 18), cuDNN 0.81 "
        "(d_0 38), medians over the lengths. 0 keeps attention_efficiency at every head dimension.",
        (0.0, 1024.0), (0.0, 128.0), unit="dims")
    fp8_gemm_speedup: float = _physical(
        "Achieved GEMM speed-up of FP8 over BF16; at most the peak ratio 2 of Hopper and Blackwell "
        "(measured tensorwise medians 1.82 on an H100, 1.91 on an H200; large GEMMs 2.0, where the BF16 "
        "kernel falls below its own ceiling: validation/h100_sxm_kernels.csv, h200_fp8_recipes.csv).",
        (1.0, 2.0), (1.2, 2.0), unit="ratio")
    moe_layer_fixed_s: float = _physical(
        "Fixed time of one MoE layer per micro-batch, forward + backward, that does not shrink with "
        "the tokens: router, permute/unpermute, the host sync of dropless routing and the launches "
        "of its small kernels (autoplan/cost/moe_time.py; an eager layer measured 0.8-1.0 ms on an "
        "H100 and an H200, validation/h100_sxm_moe_layer.csv, h200_moe_layer.csv).", (0.0, 0.01), (5e-5, 2e-3), unit="s")
    host_launch_s: float = _physical(
        "Host (CPU) time to launch one kernel from eager PyTorch: Python, the dispatcher, autograd's "
        "recording and cudaLaunchKernel (autoplan/cost/host_dispatch.py). Derived from the measured eager "
        "MoE layer (moe_layer_fixed_s, host-bound: 0.90 ms for its 52 non-expert launches forward + "
        "backward, validation/h100_sxm_moe_layer.csv, h200_moe_layer.csv); one torch.nn.Linear forward "
        "(one GEMM launch) takes 13.5 us of host time on an H100 DGX's Xeon (NVIDIA/TransformerEngine "
        "issue #2053). Stated for x86 DGX hosts; GPUSpec.host_launch_slowdown scales it for others.",
        (0.0, 1e-3), (2e-6, 5e-5), unit="s")
    elementwise_bytes_per_token_hidden: float = _physical(
        "HBM bytes that memory-bound ops (norms, activations, RoPE, residual adds) move per token "
        "per hidden unit per layer in forward; backward moves twice that. Plausible from a fused "
        "layer's to an eager one's, both measured on an H100 SXM (validation/h100_sxm_llama_layer.csv, "
        "benchmarks/kernels.py): a compiled Llama layer 37-42 B, an eager one (transformers' "
        "modeling_llama.py: fp32 RMSNorm, unfused RoPE and SwiGLU) 180 B at hbm_efficiency 0.8 "
        "(204 B at the measured copy bandwidth).",
        (0.0, 400.0), (10.0, 210.0), unit="B")
    hbm_efficiency: float = _physical(
        "Fraction of the HBM bandwidth that memory-bound kernels reach (STREAM-like copies reach "
        "0.8-0.93 on A100/H100).", _FRACTION, (0.6, 0.95))
    scale_up_efficiency: float = _physical(
        "NCCL bus bandwidth over the NVLink bandwidth per direction (nccl-tests all_reduce_perf "
        "on DGX A100/H100: about 0.7-0.85).", _FRACTION, (0.5, 0.95))
    scale_out_efficiency: float = _physical(
        "NCCL bus bandwidth over the NIC bandwidth per GPU per direction (nccl-tests across "
        "InfiniBand nodes: about 0.8-0.95).", _FRACTION, (0.5, 0.95))
    tp_overlap: float = _physical(_OVERLAP_DOC.format("tensor-parallel"), _OVERLAP, _OVERLAP)
    cp_overlap: float = _physical(
        "Fraction of the attention time behind which the context-parallel ring exchange hides.",
        _OVERLAP, _OVERLAP)
    ep_overlap: float = _physical(_OVERLAP_DOC.format("expert-parallel all-to-all"), _OVERLAP, _OVERLAP)
    pp_overlap: float = _physical(_OVERLAP_DOC.format("pipeline point-to-point"), _OVERLAP, _OVERLAP)
    dp_overlap: float = _physical(
        "Fraction of the data-parallel gradient reduction (parameter gather) hidden behind the "
        "backward of the last (forward of the first) micro-batch: its compute, and its TP "
        "collectives where those run on NVLink while the reduction runs on the NICs (under the "
        "interleaved schedule, of each model chunk, behind the chunks still running); beside a "
        "context-parallel ring, less the ring's hidden transfer on a shared tier, plus its exposed "
        "wait on another (overlap.beside_cp_window_s).", _OVERLAP, _OVERLAP)
    fsdp_overlap: float = _physical(
        "Fraction of a micro-batch's compute behind which ZeRO-3/FSDP gathers and reductions hide "
        "(beside a context-parallel ring, the window of overlap.beside_cp_window_s).",
        _OVERLAP, _OVERLAP)


@dataclass(frozen=True)
class Corrections:
    """Empirical corrections, each standing in for a mechanism the cost model lacks (see the
    module doc); at its ``neutral`` value a correction changes nothing."""

    unfused_attention_factor: float = _correction(
        "Attention time multiplier for runs without flash attention: stands in for the s×s scores "
        "that unfused attention writes to and reads from HBM (score, softmax, dropout and their "
        "gradients: ~30 B per score element), which the model does not count. Counted out, that "
        "traffic adds ~1.7× the flash compute time on an A100 at head dim 128, so 1-4 is plausible. "
        "Applies under attention_kernel eager only (flash attention keeps no scores).",
        (1.0, 50.0), (1.0, 4.0), neutral=1.0, unit="ratio", regime="eager")
    step_overhead_s: float = _correction(
        "Fixed time per step: data loading, logging, optimizer launch and host synchronisation.",
        (0.0, 10.0), (0.0, 0.5), neutral=0.0, unit="s")
    collective_overhead_s: float = _correction(
        "Floor per tensor-parallel collective on one micro-batch's time through a stage with tp > 1: "
        "the stage takes at least layers × TP collectives × this, under which the GPU work runs "
        "(a host-bound layer: the host launches kernels and blocking collectives no faster). The "
        "launch and synchronisation of one blocking collective is a few to tens of µs; on the "
        "Ultra-Scale Playbook sweep (nanotron, H100) a layer inside one node takes ~4.5 ms per "
        "micro-batch at mbs 1-2 with tp 2, 4 and 8 alike, 0.5 ms per collective: the Python and "
        "launch work of nanotron's sequence-parallel layer, not one collective's.",
        (0.0, 0.01), (0.0, 5e-5), neutral=0.0, unit="s")
    pp_cross_tp_sync_s: float = _correction(
        "Floor on one micro-batch's time through a pipeline stage whose pipeline crosses the "
        "scale-up domain (pp > 1, neighbours on different nodes) with tp > 1: the stage takes at "
        "least layers × TP collectives × tp × this, however little work the micro-batch holds; "
        "above the floor it adds nothing (the work runs under it). The shape is measured on the "
        "Ultra-Scale Playbook sweep (nanotron, H100): per layer and micro-batch the clean runs take "
        "~10, 16, 24, 52 and 130-180 ms at tp 2, 4, 8, 16 and 32 from micro-batch 1 to 8-16 alike, "
        "against 4.5-8 ms at mbs 1 with the same tp and no pipeline across nodes. It stands in for "
        "a synchronisation stall: every TP collective waits for the slowest of the stage's tp ranks, "
        "each of which runs its own blocking cross-node pipeline transfers (nanotron "
        "src/nanotron/parallel/pipeline_parallel/p2p.py: metadata read back on the host before the "
        "data receive) and so its own host stalls; a stall any one rank suffers holds them all, so "
        "the wait grows with tp. Which host event it is (proxy thread, network retry) is not "
        "identified; a few tens of µs per collective would be a plain launch and sync.",
        (0.0, 0.01), (0.0, 1e-4), neutral=0.0, unit="s")
    memory_pressure_threshold: float = _correction(
        "Share of usable memory (the heaviest stage's predicted peak) from which the caching "
        "allocator's free-and-retry regime sets in (cudaMalloc fails, the cache is flushed and "
        "the allocation retried, every micro-batch); the regime ramps in over "
        "cost.evaluate.MEMORY_PRESSURE_RAMP above it. Physically where the reserved peak meets the "
        "card's ceiling less the CUDA context and NCCL buffers; below 1 by as much as the memory "
        "model under-predicts near capacity.",
        (0.5, 1.0), (0.75, 1.0), neutral=1.0)
    memory_pressure_slowdown: float = _correction(
        "Step slow-down in the allocator's retry regime (cost.evaluate.memory_pressure_s): the step "
        "grows by slowdown × its time once the peak is MEMORY_PRESSURE_RAMP above the threshold. "
        "Each retry frees the cache and each later allocation goes to cudaMalloc/cudaFree, which "
        "synchronise the device; runs in that regime have been seen at 0.13-0.30 of their speed "
        "(slow-down 2.3-6.7) on the Ultra-Scale Playbook sweep.", (0.0, 20.0), (0.0, 8.0), neutral=0.0)
    pp_extra_layers_per_microbatch: float = _correction(
        "Layer activations a pipeline stage holds per in-flight micro-batch beyond its own layers: "
        "send and receive buffers, a fraction of a layer. The 1.3 layers once fitted on nanotron "
        "were its cost-balanced split putting more than L/pp layers on rank 0, now modelled by the "
        "profile's pp_split_rule.",
        (0.0, 4.0), (0.0, 1.0), neutral=0.0)
    memory_reserve_bytes: float = _correction(
        "Memory outside the tracked tensors: CUDA context (0.3-0.6 GiB), NCCL buffers, cuBLAS and "
        "library workspaces. Beyond ~4 GiB it stands in for tensors the model does not count.",
        (0.0, 16 * GIB), (0.25 * GIB, 4 * GIB), neutral=0.0, unit="B")
    allocator_overhead: float = _correction(
        "Memory as a fraction of the bytes allocated and freed every step (activations, logits, "
        "communication buffers: cost.memory.TRANSIENT_TERMS; not the model states, allocated once): "
        "against a reserved figure, the caching allocator's fragmentation (PyTorch typically "
        "reserves a few to 20% more than it allocates; the sweep's nanotron figure and torchtitan's "
        "are reserved peaks); against an allocated figure, transient tensors the terms do not count.",
        (0.0, 0.5), (0.01, 0.2), neutral=0.0)


def neutral_corrections() -> Corrections:
    """Every correction at its neutral value: the cost model's mechanisms alone."""
    return Corrections(**{f.name: f.metadata["neutral"] for f in fields(Corrections)})


@dataclass(frozen=True)
class Parameter:
    """One field of :class:`PhysicalEfficiency` or :class:`Corrections`, described."""

    name: str
    kind: str  # 'physical_efficiency' or 'corrections' (the YAML section that holds it)
    doc: str
    unit: str
    bounds: tuple[float, float]
    plausible: tuple[float, float]
    neutral: float | None = None
    regime: str = ""  # the attention kernel a correction applies under ('' = every run)


PHYSICAL, CORRECTIONS = "physical_efficiency", "corrections"  # the YAML section names
SECTIONS = {PHYSICAL: PhysicalEfficiency, CORRECTIONS: Corrections}
PARAMETERS: dict[str, Parameter] = {
    f.name: Parameter(f.name, kind, f.metadata["doc"], f.metadata["unit"], f.metadata["bounds"],
                      f.metadata["plausible"], f.metadata.get("neutral"), f.metadata.get("regime", ""))
    for kind, cls in SECTIONS.items() for f in fields(cls)}
LOG_SCALED = ("gemm_half_flops",)  # judged (and fitted) on a log scale


@dataclass(frozen=True)
class CalibratedParameters:
    """The physical efficiencies and corrections of one (trainer, GPU) pair.

    ``fitted_on`` says where fitted values came from; ``fitted`` names the parameters a
    calibration set (the rest are the profile's sourced defaults).
    """

    efficiency: PhysicalEfficiency
    corrections: Corrections
    fitted_on: str = ""
    fitted: tuple[str, ...] = ()

    def value(self, name: str) -> float:
        part = self.efficiency if PARAMETERS[name].kind == PHYSICAL else self.corrections
        return float(getattr(part, name))

    def values(self) -> dict[str, float]:
        return {name: self.value(name) for name in PARAMETERS}

    def with_values(self, values: Mapping[str, float], *, fitted_on: str | None = None,
                    fitted: bool = True) -> CalibratedParameters:
        """A copy with ``values`` (names of either kind) set, and marked as fitted if ``fitted``."""
        unknown = [n for n in values if n not in PARAMETERS]
        if unknown:
            raise KeyError(f"unknown parameter(s) {unknown}")
        physical = {n: float(v) for n, v in values.items() if PARAMETERS[n].kind == PHYSICAL}
        corrections = {n: float(v) for n, v in values.items() if PARAMETERS[n].kind == CORRECTIONS}
        return CalibratedParameters(
            replace(self.efficiency, **physical), replace(self.corrections, **corrections),
            self.fitted_on if fitted_on is None else fitted_on,
            tuple(dict.fromkeys(self.fitted + tuple(values))) if fitted else self.fitted)


# --- flags: fitted values on a bound or outside their plausible range --------------------------

@dataclass(frozen=True)
class Flag:
    """A fitted value worth a look: on a hard bound, or outside its plausible range."""

    name: str
    value: float
    reason: str

    def text(self) -> str:
        return f"{self.name} = {shown(self.name, self.value)}: {self.reason}"


BOUND_TOLERANCE = 1e-3  # within 0.1% of the bounds' span (log span for LOG_SCALED) counts as on it


def shown(name: str, value: float) -> str:
    """``value`` of parameter ``name`` as text (bytes in GiB)."""
    if PARAMETERS[name].unit == "B" and name != "elementwise_bytes_per_token_hidden":
        return f"{value / GIB:.3g} GiB"
    return f"{value:.4g}"


def _position(name: str, value: float, low: float, high: float) -> float:
    if name in LOG_SCALED:
        return (math.log(value) - math.log(low)) / (math.log(high) - math.log(low))
    return (value - low) / (high - low)


def flag_value(name: str, value: float) -> Flag | None:
    """Flag ``value`` of parameter ``name`` when it sits on a bound or outside its plausible range."""
    p = PARAMETERS[name]
    low, high = p.bounds
    position = _position(name, max(value, low) if name in LOG_SCALED else value, low, high)
    if position <= BOUND_TOLERANCE or position >= 1.0 - BOUND_TOLERANCE:
        side = low if position <= 0.5 else high
        neutral = " = its neutral value: not needed on these rows" if side == p.neutral else ""
        return Flag(name, value, f"on its bound {shown(name, side)}{neutral} "
                                 f"(bounds [{shown(name, low)}, {shown(name, high)}])")
    lo, hi = p.plausible
    if not lo <= value <= hi:
        return Flag(name, value, f"outside its plausible range [{shown(name, lo)}, {shown(name, hi)}]")
    return None


def flag_values(values: Mapping[str, float]) -> list[Flag]:
    """The flags of ``values`` (name -> fitted value), in the order given."""
    flags = (flag_value(name, float(value)) for name, value in values.items())
    return [f for f in flags if f is not None]


def flag_fitted(params: CalibratedParameters) -> list[Flag]:
    """The flags of the values a calibration set in ``params``."""
    return flag_values({name: params.value(name) for name in params.fitted})
