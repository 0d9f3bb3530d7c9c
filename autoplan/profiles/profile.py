"""Dataclasses and YAML loading for trainer profiles (see ``autoplan/profiles/*.yaml``)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

from autoplan.errors import SpecError, UnknownNameError
from autoplan.specs.yaml_io import check_keys, read_mapping

_PROFILE_DIR = Path(__file__).resolve().parent


@dataclass(frozen=True)
class ActivationCoefficients:
    """Bytes saved for backward per token of one layer, as a linear form in the layer's widths.

    bytes/token = h·h_size/(tp if sp else 1) + (q·q_size + kv·kv_size + f·ffn)/tp
                  + lse·heads/tp + tok + s2·heads·seq/(tp·cp)

    where the ``s2`` term is the s×s attention matrices of non-flash attention (Korthikanti et
    al. 2022, eq. 1: 5·a·s/h per token and h). MoE blocks add ``moe_kh·k·h + moe_kf·k·f_e/etp +
    moe_e·E + moe_k·k`` per token (actmem README, Mixtral grouped_mm fit).
    """

    h: float = 0.0
    q: float = 0.0
    kv: float = 0.0
    f: float = 0.0
    lse: float = 0.0
    tok: float = 0.0
    s2: float = 0.0
    moe_kh: float = 0.0
    moe_kf: float = 0.0
    moe_e: float = 0.0
    moe_k: float = 0.0
    moe_tok: float = 0.0  # per-token bytes a MoE block saves beyond the dense MLP's ``tok``


@dataclass(frozen=True)
class Efficiency:
    """Named efficiency parameters of one (trainer, GPU) pair; all dimensionless unless named.

    * ``gemm_efficiency_max``: fraction of dense peak a large GEMM reaches.
    * ``gemm_half_flops``: FLOPs of one GEMM at which it reaches half of that (small shards at high
      TP run less efficiently): eff = max · F / (F + F_half).
    * ``attention_efficiency``: fraction of peak of the flash-attention kernels.
    * ``fp8_gemm_speedup``: effective GEMM speed-up of FP8 over BF16 (not simply 2×).
    * ``elementwise_bytes_per_token_hidden``: HBM bytes moved per token per hidden unit per layer
      in forward by memory-bound ops (norms, activations, RoPE, residuals); backward moves 2×.
    * ``hbm_efficiency``, ``scale_up_efficiency``, ``scale_out_efficiency``: achieved fraction
      of HBM, NVLink and NIC bandwidth (NCCL bus bandwidth / link bandwidth).
    * ``*_overlap``: fraction of that communication hidden behind compute.
    * ``step_overhead_s``: fixed per-step time (data loading, logging, launch latency).
    * ``collective_overhead_s``: fixed, never-hidden time per TP collective (launch, sync);
      ``pp_collective_overhead_factor`` multiplies it when pp > 1 (pipelined ranks wait on
      each other's collectives).
    * ``memory_pressure_threshold`` / ``memory_pressure_slowdown``: above the threshold
      (fraction of usable memory) the caching allocator frees and retries; the step slows by
      ``slowdown × (peak/usable − threshold)/(1 − threshold)``.
    * ``pp_extra_layers_per_microbatch``: layer-activations a pipeline stage holds per in-flight
      micro-batch beyond its own layers (empirical: the playbook's nanotron runs hold about one
      more layer per micro-batch in flight; the cause is not identified in nanotron's source).
    * ``memory_reserve_bytes``: CUDA context, NCCL and library workspaces.
    * ``allocator_overhead``: fractional fragmentation over tracked tensor bytes.
    """

    gemm_efficiency_max: float = 0.75
    gemm_half_flops: float = 2e9
    attention_efficiency: float = 0.45
    fp8_gemm_speedup: float = 1.4
    elementwise_bytes_per_token_hidden: float = 40.0
    hbm_efficiency: float = 0.8
    scale_up_efficiency: float = 0.75
    scale_out_efficiency: float = 0.8
    tp_overlap: float = 0.0
    cp_overlap: float = 0.8
    ep_overlap: float = 0.0
    pp_overlap: float = 0.5
    dp_overlap: float = 0.9
    fsdp_overlap: float = 0.8
    step_overhead_s: float = 0.0
    collective_overhead_s: float = 0.0
    pp_collective_overhead_factor: float = 1.0
    memory_pressure_threshold: float = 1.0
    memory_pressure_slowdown: float = 0.0
    pp_extra_layers_per_microbatch: float = 0.0
    memory_reserve_bytes: float = 2.0 * 2**30
    allocator_overhead: float = 0.05
    fitted_on: str = ""

    def bounds(self) -> dict[str, tuple[float, float]]:
        """Physically sensible ranges, enforced by calibration (efficiencies never exceed 1)."""
        unit = (0.05, 1.0)
        return {
            "gemm_efficiency_max": unit, "gemm_half_flops": (1e6, 1e12),
            "attention_efficiency": unit, "fp8_gemm_speedup": (1.0, 2.0),
            "elementwise_bytes_per_token_hidden": (0.0, 400.0), "hbm_efficiency": unit,
            "scale_up_efficiency": unit, "scale_out_efficiency": unit,
            "tp_overlap": (0.0, 1.0), "cp_overlap": (0.0, 1.0), "ep_overlap": (0.0, 1.0),
            "pp_overlap": (0.0, 1.0), "dp_overlap": (0.0, 1.0), "fsdp_overlap": (0.0, 1.0),
            "step_overhead_s": (0.0, 10.0), "collective_overhead_s": (0.0, 0.01),
            "pp_collective_overhead_factor": (1.0, 100.0), "memory_pressure_threshold": (0.5, 1.0),
            "memory_pressure_slowdown": (0.0, 10.0), "pp_extra_layers_per_microbatch": (0.0, 4.0),
            "memory_reserve_bytes": (0.0, 16 * 2**30),
            "allocator_overhead": (0.0, 0.5),
        }


@dataclass(frozen=True)
class TrainerProfile:
    """What one trainer's implementation does; see the YAML of each trainer for sources."""

    name: str
    description: str
    weight_bytes: float  # compute copy of each parameter (bf16)
    grad_bytes: float  # gradient buffer per parameter
    master_bytes: float  # fp32 master weights
    optimizer_bytes: float  # Adam moments
    fp8_weight_extra_bytes: float  # fp8 copies (and transposes) of linear weights under fp8
    zero_shards_over_cp: bool  # Megatron's distributed optimizer shards over DP×CP
    allowed_zero: tuple[int, ...]
    max_zero_with_pp: int
    supports_vpp: bool
    supports_cp: bool
    supports_ep: bool
    pp_schedule: str  # '1f1b' (in flight: min(pp - stage, m)) or 'afab' (all m in flight)
    attention: dict[str, ActivationCoefficients]  # per recompute mode: none, selective
    mlp: dict[str, ActivationCoefficients]
    full_recompute_input_bytes_per_h: float  # layer input kept per token per h under full
    logits_bytes_per_vocab: float  # peak bytes per token per vocab entry of logits + loss
    zero3_prefetch_layers: float  # unsharded layers held by ZeRO-3 (current + prefetch)
    zero3_pp_unsharded_bytes: float  # per param kept unsharded by ZeRO-3 when pp > 1
    selective_recompute_matmul_fraction: float  # share of layer matmul FLOPs recomputed
    selective_recomputes_attention: bool  # Megatron 'core_attn': attention scores recomputed
    sources: tuple[str, ...] = ()
    efficiency: dict[str, Efficiency] = field(default_factory=dict)

    def efficiency_for(self, gpu_name: str) -> Efficiency:
        """The calibrated parameters for ``gpu_name``, else the profile's ``default`` ones."""
        return self.efficiency.get(gpu_name, self.efficiency["default"])

    def with_efficiency(self, gpu_name: str, eff: Efficiency) -> TrainerProfile:
        return replace(self, efficiency={**self.efficiency, gpu_name: eff})


_COEF_KEYS = [f.name for f in fields(ActivationCoefficients)]
_EFF_KEYS = [f.name for f in fields(Efficiency)]
_PROFILE_KEYS = [f.name for f in fields(TrainerProfile)]


def _coefficients(data: Any, where: str) -> ActivationCoefficients:
    if not isinstance(data, dict):
        raise SpecError(where, f"expected a mapping of coefficients, got {data!r}")
    check_keys(data, where, required=[], optional=_COEF_KEYS)
    return ActivationCoefficients(**{k: float(v) for k, v in data.items()})


def efficiency_from_mapping(data: dict, where: str, base: Efficiency | None = None) -> Efficiency:
    """Parse an ``Efficiency`` mapping (only known keys), on top of ``base``."""
    check_keys(data, where, required=[], optional=_EFF_KEYS)
    values = {}
    for key, value in data.items():
        if key == "fitted_on":
            values[key] = str(value)
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise SpecError(where, f"{key}: expected a number, got {value!r}")
        low, high = Efficiency().bounds()[key]
        if not low <= float(value) <= high:
            raise SpecError(where, f"{key}: must lie in [{low}, {high}], got {value}")
        values[key] = float(value)
    return replace(base or Efficiency(), **values)


def profile_from_mapping(data: dict, where: str) -> TrainerProfile:
    """Build a ``TrainerProfile`` from a parsed YAML mapping."""
    required = [k for k in _PROFILE_KEYS if k not in ("sources", "efficiency")]
    check_keys(data, where, required=required, optional=["sources", "efficiency"])
    values = dict(data)
    for key in ("attention", "mlp"):
        values[key] = {mode: _coefficients(c, f"{where}: {key}.{mode}") for mode, c in data[key].items()}
        if set(values[key]) != {"none", "selective"}:
            raise SpecError(where, f"{key}: needs coefficients for 'none' and 'selective'")
    effs = data.get("efficiency") or {}
    default = efficiency_from_mapping(effs.get("default", {}), f"{where}: efficiency.default")
    values["efficiency"] = {"default": default}
    for gpu, params in effs.items():
        if gpu != "default":
            values["efficiency"][gpu] = efficiency_from_mapping(params, f"{where}: efficiency.{gpu}", default)
    values["allowed_zero"] = tuple(int(z) for z in data["allowed_zero"])
    values["sources"] = tuple(data.get("sources", ()))
    return TrainerProfile(**values)


@lru_cache(maxsize=None)
def _builtin_profiles() -> dict[str, TrainerProfile]:
    profiles = {}
    for path in sorted(_PROFILE_DIR.glob("*.yaml")):
        profile = profile_from_mapping(read_mapping(path), str(path))
        profiles[profile.name] = profile
    return profiles


def list_trainers() -> list[str]:
    return sorted(_builtin_profiles())


def load_profile(name: str) -> TrainerProfile:
    """A built-in trainer profile by name (megatron, torchtitan, nanotron, deepspeed, hf)."""
    profiles = _builtin_profiles()
    key = name.strip().lower()
    if key not in profiles:
        raise UnknownNameError("trainer", name, profiles)
    return profiles[key]
