"""Formula text of the cost terms (``cost/terms.py``) for one layout, and the parameter values.

A term's formula holds ``{placeholders}`` for the pieces that depend on the layout or the
trainer profile (``VARIANTS``): each has a general text (the derivation page) and the text that
applies to a given context and layout (``autoplan explain``). Parameters a formula names are
looked up as fields of the context (efficiency, profile, cluster, GPU) or, for a quantity the
code still keeps as a constant, in ``CODE_CONSTANTS``.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable
from dataclasses import dataclass, fields, is_dataclass
from typing import Any

from autoplan.cost import hybrid_shard
from autoplan.cost.terms import Term


@dataclass(frozen=True)
class Variant:
    """A piece of formula text that depends on the layout or the profile."""

    general: str
    pick: Callable[[Any, Any], str]  # (CostContext, Layout) -> the text that applies


def _zero_group(ctx, lay) -> str:
    if lay.hsdp and hybrid_shard.style(ctx.profile) == "replicate":
        return "hsdp"
    return "dp·cp" if ctx.profile.zero_shards_over_cp else "dp"


def _shard(stage: int, expert: bool, gradients: bool = False) -> Variant:
    """The divisor of a model state that ZeRO shards from ``stage`` on (``model_states.shard_divisor``);
    ``gradients``: from stage 1 under the setup's shard_gradients (``model_states.gradient_shard_stage``)."""
    def pick(ctx, lay) -> str:
        if lay.zero < (1 if gradients and ctx.training.shard_gradients else stage):
            return "1"
        group = _zero_group(ctx, lay)
        return f"max({group}·tp/(ep·etp), 1)" if expert else f"({group})"
    since = f"zero ≥ {stage}" + (" (≥ 1 under shard_gradients)" if gradients else "")
    return Variant(f"({'G_e' if expert else 'G'} if {since} else 1)", pick)


def _weight_bytes(ctx, lay) -> str:
    text = "weight_bytes"
    if lay.precision == "fp8":
        recipe = f"fp8_weight_extra_bytes·FP8_WEIGHT_ELEMENT_BYTES[{ctx.training.fp8_recipe}]"
        text = recipe if ctx.training.fp8_param_gather else f"{text} + {recipe}"
    if lay.zero >= 3 and lay.pp > 1:
        group = _zero_group(ctx, lay)
        text += f" + zero3_pp_unsharded_bytes·{group} (when {group} > 1)"
    if lay.zero == 2 and ctx.profile.zero2_is_shard_grad_op:
        text += " + BF16_BYTES (SHARD_GRAD_OP: the stage stays unsharded from forward to backward)"
    return text if text == "weight_bytes" else f"({text})"


def _by_recompute(none: str, selective: str, full: str) -> Callable[[Any, Any], str]:
    return lambda ctx, lay: {"none": none, "selective": selective, "full": full}[lay.recompute]


def _if(condition: Callable[[Any], bool], yes: str, no: str = "") -> Callable[[Any, Any], str]:
    return lambda ctx, lay: yes if condition(lay) else no


def _selective_share(ctx, lay) -> str:
    attention = 1 if ctx.profile.selective_recomputes_attention else 0
    if lay.recompute == "selective" and lay.recompute_modules:
        return f"the modules {lay.recompute_modules}' forward (recompute.module_recompute_s)"
    return _by_recompute("(f_mm, f_att, f_ew) = 0",
                         f"(f_mm, f_att, f_ew) = (selective_recompute_matmul_fraction, {attention}, 0)",
                         "(f_mm, f_att, f_ew) = (s, s, s)")(ctx, lay)


def _dp_collectives(ctx, lay) -> str:
    buckets = "in ⌈P/dp_bucket_params⌉ buckets"
    if lay.pp > 1 and lay.zero <= 1 and ctx.profile.pp_grad_all_reduce_bytes > 0:
        gather = ", Gth = AG(P·PARAM_GATHER_BYTES)" if lay.zero == 1 else ", Gth = 0"
        return (f"R = AR(P·pp_grad_all_reduce_bytes) {buckets} (the pipeline engine's full all-reduce of "
                f"fp32 gradients){gather}, Z3 = 0, F = 0")
    if lay.zero == 0:
        return f"R = AR(P·grad_reduce_bytes) {buckets}, Gth = 0, Z3 = 0, F = 0"
    per_step = lay.pp > 1 and ctx.profile.zero3_pp_unsharded_bytes > 0
    if lay.zero == 2 and ctx.profile.zero2_is_shard_grad_op:
        return ("R = 0, Gth = 0, Z3 = AG(P·PARAM_GATHER_BYTES) + RS(P·grad_reduce_bytes), one collective per "
                "layer, one gather (SHARD_GRAD_OP_GATHERS_PER_MICROBATCH: FSDP SHARD_GRAD_OP keeps the layer "
                "unsharded through the backward); F = (AG + RS)/L_S")
    if lay.zero <= 2 or per_step:
        if per_step:
            return ("R = RS(P·grad_reduce_bytes), Gth = AG(P·PARAM_GATHER_BYTES) per layer, once per step "
                    "(pipeline keeps the stage unsharded), Z3 = 0, F = 0")
        gather = ("in ⌈P/param_gather_bucket_params⌉ collectives" if ctx.profile.param_gather_bucket_params > 0
                  else buckets)
        return (f"R = RS(P·grad_reduce_bytes) {buckets}, Gth = AG(P·PARAM_GATHER_BYTES) {gather}, "
                "Z3 = 0, F = 0")
    return ("R = 0, Gth = 0, Z3 = g·AG(P·PARAM_GATHER_BYTES) + RS(P·grad_reduce_bytes), one collective per "
            "layer, g = ZERO3_GATHERS_PER_MICROBATCH (+ the recomputed forward's gather of layers over "
            "zero3_reuse_distance_params); F = (AG + RS)/L_S") + _hybrid_collectives(ctx, lay)


def _hybrid_collectives(ctx, lay) -> str:
    """What hybrid sharding adds (``data_parallel.hybrid_comm_s``); '' without it."""
    if not lay.hsdp:
        return ""
    if hybrid_shard.style(ctx.profile) == "secondary":
        return (f"; hpZ: the backward's (g − 1) gathers over the secondary partition of {lay.hsdp} ranks "
                "(DeepSpeed zero_hpz_partition_size)")
    return (f"; AG and RS inside the shard group of hsdp = {lay.hsdp} ranks, R += AR(P·grad_reduce_bytes/hsdp) "
            f"across the dp·cp/hsdp = {lay.dp * lay.cp // lay.hsdp} replicas once per step")


VARIANTS: dict[str, Variant] = {
    "G": Variant("dp·cp if zero_shards_over_cp else dp; hsdp under hybrid sharding where the trainer "
                 "replicates across shard groups (cost.hybrid_shard)", _zero_group),
    "z1": _shard(1, False), "z1e": _shard(1, True),
    "z2": _shard(2, False, True), "z2e": _shard(2, True, True),
    "z3": _shard(3, False), "z3e": _shard(3, True),
    "weight_bytes": Variant("(weight_bytes (none under fp8 with fp8_param_gather) + fp8_weight_extra_bytes·"
                            "FP8_WEIGHT_ELEMENT_BYTES[fp8_recipe] under fp8 + zero3_pp_unsharded_bytes·G "
                            "when zero ≥ 3, pp > 1 and G > 1)", _weight_bytes),
    "hpz": Variant(" + SECONDARY_PARAM_BYTES·(P_dense + P_expert)/hsdp under DeepSpeed ZeRO++ hpZ (hsdp > 0, zero 3)",
                   lambda ctx, lay: (" + SECONDARY_PARAM_BYTES·(P_dense + P_expert)/hsdp (hpZ secondary partition)"
                                     if lay.hsdp and lay.zero >= 3
                                     and hybrid_shard.style(ctx.profile) == "secondary" else "")),
    "passes": Variant("passes (= 2: forward and backward; 3 under full recompute)",
                      _if(lambda lay: lay.recompute == "full", "3", "2")),
    "cp_passes": Variant("(3, or 4 under full recompute)", _if(lambda lay: lay.recompute == "full", "4", "3")),
    "fp8": Variant("(× S_fp8 under fp8: 1 + (fp8_gemm_speedup − 1)·(peak_fp8/peak_bf16 − 1)·RECIPE_GAIN_SHARE, "
                   "autoplan/cost/fp8.py)", _if(lambda lay: lay.precision == "fp8",
                                                "× S_fp8 (fp8_gemm_speedup scaled by the GPU's FP8/BF16 peak ratio "
                                                "and the recipe's RECIPE_GAIN_SHARE)")),
    "pp_floor": Variant(" + grad_acc × the wait that lifts each micro-batch's stage time (every exposed term) to at "
                        "least L_S·passes·TP_COLLECTIVES_PER_PASS·(collective_overhead_s + tp·pp_cross_tp_sync_s "
                        "where the pipeline crosses the scale-up domain) when tp > 1",
                        _if(lambda lay: lay.tp > 1,
                            " + grad_acc × the wait up to L_S·passes·TP_COLLECTIVES_PER_PASS·(collective_overhead_s "
                            "+ tp·pp_cross_tp_sync_s if the pipeline crosses nodes) per micro-batch")),
    "layer_bytes": Variant("a = A_none (no recompute), A_selective (selective: the profile's own set, or with "
                           "recompute_modules A_none less each named module's bytes, recompute.py), "
                           "s·tokens·full_recompute_input_bytes_per_h·h/h_div + (1 − s)·A_none (full; s = 1, "
                           "or min(recompute_layers·vpp, L_S)/L_S with recompute_layers)",
                           _by_recompute("a = A_none", "a = A_selective",
                                         "a = s·tokens·full_recompute_input_bytes_per_h·h/h_div + (1 − s)·A_none")),
    "working": Variant("working = max(A_none − tokens·full_recompute_input_bytes_per_h·h/h_div, 0) under full, "
                       "A_none − A_selective under selective, else 0",
                       _by_recompute("working = 0", "working = A_none − A_selective",
                                     "working = max(A_none − tokens·full_recompute_input_bytes_per_h·h/h_div, 0)")),
    "recompute_share": Variant("(f_mm, f_att, f_ew) = (s, s, s) under full (s as for the activations, per stage); "
                               "(selective_recompute_matmul_fraction, 1 if selective_recomputes_attention else 0, 0) "
                               "under selective, or with recompute_modules each named module's matmul share of t_mm "
                               "(norms and SwiGLU at HBM speed); else 0",
                               _selective_share),
    "dp_collectives": Variant("R = AR(P·grad_reduce_bytes) under zero 0, RS(P·grad_reduce_bytes) under zero 1–2 "
                              "(grad_reduce_bytes = 2 under grad_reduce_in_bf16), "
                              "in ⌈P/dp_bucket_params⌉ buckets (with pp > 1 and zero ≤ 1 AR(P·pp_grad_all_reduce_bytes) "
                              "where the profile states it: DeepSpeed's bf16 pipeline engine); Gth = AG(P·PARAM_GATHER_BYTES) under zero 1–2 "
                              "(in ⌈P/param_gather_bucket_params⌉ collectives where the profile states it: nanotron's one "
                              "coalesced gather); "
                              "Z3 = g·AG(P·PARAM_GATHER_BYTES) + RS(P·grad_reduce_bytes) per micro-batch under "
                              "zero 3, one collective per layer, g = ZERO3_GATHERS_PER_MICROBATCH (+ the "
                              "recomputed forward's gather where a layer exceeds zero3_reuse_distance_params); "
                              "F = (AG + RS)/L_S, ZeRO-3's first gather and last reduce-scatter; ZeRO-3 over a "
                              "pipeline that keeps the stage unsharded (zero3_pp_unsharded_bytes > 0) reduces "
                              "and gathers once per step like zero 2; each 0 otherwise. Hybrid sharding (hsdp > 0): "
                              "AG and RS inside the shard group of hsdp ranks and R += AR(P·grad_reduce_bytes/hsdp) "
                              "across the dp·cp/hsdp replicas once per step (FSDP2 HSDP, Megatron optimizer "
                              "instances); DeepSpeed hpZ: the backward's gathers inside the hpZ group",
                              _dp_collectives),
    "flops_n": Variant("N = the flops_convention's parameter count (playbook: active parameters with a tied "
                       "head counted again; causal: the same with the attention term halved; megatron: "
                       "without the embedding lookup)",
                       lambda ctx, lay: f"N = the {ctx.flops_convention} convention's parameter count"),
}

# Quantities the code keeps as module constants or still as bare numbers, by the name a formula
# uses: (module, attribute or None for a bare number, its value then, meaning).
CODE_CONSTANTS: dict[str, tuple[str, str | None, float, str]] = {
    "BF16_BYTES": ("autoplan.cost.time", "BF16_BYTES", 2.0, "bytes of one bf16 element"),
    "MOE_DISPATCH_COPIES": ("autoplan.cost.memory", "MOE_DISPATCH_COPIES", 2.0,
                            "routed-token copies an all-to-all dispatch holds at once (send and receive buffers)"),
    "ATTENTION_BACKWARD_FACTOR": ("autoplan.cost.time", "ATTENTION_BACKWARD_FACTOR", 2.5,
                                  "flash-attention backward time over its forward (FlashAttention-2 Sec. 3)"),
    "REPLICATED_ELEMENTWISE_SHARE": ("autoplan.cost.time", "REPLICATED_ELEMENTWISE_SHARE", 10.0 / 34.0,
                                     "share of element-wise work replicated over TP without SP "
                                     "(Korthikanti et al. 2022, Table 2: 10 of 34 sbh)"),
    "TP_COLLECTIVES_PER_PASS": ("autoplan.cost.time", "TP_COLLECTIVES_PER_PASS", 4.0,
                                "TP collectives per layer and pass (2 all-gathers + 2 reduce-scatters)"),
    "EAGER_SCORE_BYTES_FORWARD": ("autoplan.cost.time", "EAGER_SCORE_BYTES_FORWARD", 8.0,
                                  "HBM bytes per s×s score element of eager attention's forward (QKᵀ write, "
                                  "softmax read + write, PV read)"),
    "EAGER_SCORE_BYTES_BACKWARD": ("autoplan.cost.time", "EAGER_SCORE_BYTES_BACKWARD", 14.0,
                                   "HBM bytes per s×s score element of eager attention's backward (dprobs write, "
                                   "softmax backward read 2 + write, dV read, dQ and dK reads)"),
    "BACKWARD_MATMUL_FACTOR": ("autoplan.cost.time", "BACKWARD_MATMUL_FACTOR", 2.0,
                               "matmul backward time over its forward (input and weight gradients; SC'21 Sec. 5.1)"),
    "SECONDARY_PARAM_BYTES": ("autoplan.cost.hybrid_shard", "SECONDARY_PARAM_BYTES", 2.0,
                              "bytes of one parameter in ZeRO++ hpZ's bf16 secondary partition"),
    "PARAM_GATHER_BYTES": ("autoplan.cost.data_parallel", "PARAM_GATHER_BYTES", 2.0,
                           "bytes of one gathered parameter (bf16 param_dtype)"),
    "ZERO3_GATHERS_PER_MICROBATCH": ("autoplan.cost.data_parallel", "ZERO3_GATHERS_PER_MICROBATCH", 2.0,
                                     "ZeRO-3 parameter gathers per layer and micro-batch: forward and backward"),
    "NORMS_PER_LAYER": ("autoplan.cost.recompute", "NORMS_PER_LAYER", 2.0,
                        "normalisations per transformer layer (pre-attention, pre-MLP)"),
    "OFFLOAD_STAGING_LAYERS": ("autoplan.cost.recompute", "OFFLOAD_STAGING_LAYERS", 1.0,
                               "layers of activations an offloading stage keeps in transfer (TE's double buffer)"),
    "BNB_BLOCK_ELEMENTS": ("autoplan.cost.optimizer", "BNB_BLOCK_ELEMENTS", 2048.0,
                           "elements per fp32 absmax of bitsandbytes' blockwise 8-bit states"),
    "NEWTON_SCHULZ_ITERATIONS": ("autoplan.cost.optimizer", "NEWTON_SCHULZ_ITERATIONS", 5.0,
                                 "Muon's Newton–Schulz steps per update (Jordan et al. 2024)"),
    "HOST_LINK_EFFICIENCY": ("autoplan.cost.host_link", "HOST_LINK_EFFICIENCY", 0.865,
                             "payload share of the host link's rate per direction (measured: pinned copies, H200)"),
    "HOST_MEMORY_EFFICIENCY": ("autoplan.cost.offload", "HOST_MEMORY_EFFICIENCY", 0.75,
                               "share of host DRAM bandwidth a streaming CPU kernel reaches (STREAM triad)"),
}


def constant_value(name: str) -> float:
    """A ``CODE_CONSTANTS`` value, read from its module where the code names it."""
    module, attribute, value, _ = CODE_CONSTANTS[name]
    if attribute is None:
        return value
    return float(getattr(importlib.import_module(module), attribute))


def formula_text(t: Term, ctx: Any = None, layout: Any = None) -> str:
    """The formula of ``t``: general, or (given ``ctx`` and ``layout``) the form that applies."""
    if ctx is None or layout is None:
        pieces = {name: v.general for name, v in VARIANTS.items()}
    else:
        pieces = {name: v.pick(ctx, layout) for name, v in VARIANTS.items()}
    text = " ".join(t.formula.format(**pieces).split())
    return re.sub(r" / 1(?=[ )])", "", text)  # an unsharded state: P / 1 reads as P


def _field(obj: Any, name: str) -> tuple[bool, Any]:
    """(found, value) of field ``name`` of dataclass ``obj`` or of a dataclass nested in it."""
    for f in fields(obj):
        value = getattr(obj, f.name)
        if f.name == name:
            return True, value
        if is_dataclass(value) and not isinstance(value, type):
            found = _field(value, name)
            if found[0]:
                return found
    return False, None


def parameter_value(ctx: Any, name: str) -> Any:
    """The value of a parameter a formula names: a field of the context, or a code constant."""
    for source in (ctx.efficiency, ctx.profile, ctx.cluster, ctx.cluster.gpu, ctx.training, ctx):
        found, value = _field(source, name)
        if found:
            return value
    if name in CODE_CONSTANTS:
        return constant_value(name)
    raise KeyError(f"parameter '{name}' is neither a field of the cost context nor in CODE_CONSTANTS")
