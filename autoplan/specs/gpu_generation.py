"""A GPU's architecture generation (Ampere, Hopper, Blackwell, CDNA 3, CDNA 4): the unit by which the
error bands group measurements (:mod:`autoplan.calibration.uncertainty`) and by which a profile
fitted on one GPU moves to another (:mod:`autoplan.profiles.transfer`)."""

from __future__ import annotations

from autoplan.specs.hardware import GPUSpec

UNKNOWN_GENERATION = "unknown"
# GPU name prefix -> architecture generation (NVIDIA: Ampere GA100, Hopper GH100, Blackwell
# GB100/GB202; AMD: CDNA 3 for MI300X/MI325X, CDNA 4 for MI350X/MI355X, gfx950), as the vendors'
# datasheets name them (the ROCm GPU specifications table for AMD). A GPU
# preset may also carry a ``generation`` attribute, which wins.
GENERATION_PREFIXES = (("a100", "ampere"), ("a800", "ampere"), ("h100", "hopper"), ("h200", "hopper"),
                       ("h800", "hopper"), ("gh200", "hopper"), ("b200", "blackwell"),
                       ("b300", "blackwell"), ("gb200", "blackwell"), ("gb300", "blackwell"),
                       ("mi300", "cdna3"), ("mi325", "cdna3"), ("mi350", "cdna4"), ("mi355", "cdna4"))


# FP8 scaling recipes that need more than FP8 tensor cores, and the generations that run them:
# MXFP8 (a shared 8-bit exponent per 32 elements) is a Blackwell tensor-core format, compute
# capability 10.0 (Transformer Engine transformer_engine/pytorch/fp8.py check_mxfp8_support:
# "Device compute capability 10.0 or higher required for MXFP8 execution"; on AMD gfx950, CDNA 4,
# its ROCm build's check_mxfp8_support). The other recipes run wherever FP8 GEMMs do.
FP8_RECIPE_GENERATIONS = {"mxfp8": ("blackwell", "cdna4")}


# The generations whose FP8 attention kernels exist (``TrainingSpec.fp8_attention``). Transformer
# Engine trains FP8 attention only in cuDNN's fused attention (transformer_engine/pytorch/attention/
# dot_product_attention/utils.py get_attention_backend: under fp8_dpa it switches off FlashAttention 2,
# FlashAttention 3 in training and the unfused path), whose FP8 backend needs compute capability 9.0
# (transformer_engine/common/fused_attn/fused_attn.cpp nvte_get_fused_attn_backend: sm_arch_ >= 90):
# Hopper and Blackwell. Not listed: Ada (8.9; no preset) and AMD's CDNA (ROCm's Transformer Engine
# fork, not checked).
FP8_ATTENTION_GENERATIONS = ("hopper", "blackwell")


def runs_fp8_recipe(gpu: GPUSpec | str, recipe: str) -> bool:
    """Whether ``gpu``'s tensor cores run FP8 ``recipe`` (given that it has FP8 at all)."""
    return recipe not in FP8_RECIPE_GENERATIONS or generation_of(gpu) in FP8_RECIPE_GENERATIONS[recipe]


def runs_fp8_attention(gpu: GPUSpec | str) -> bool:
    """Whether ``gpu`` has FP8 attention kernels (:data:`FP8_ATTENTION_GENERATIONS`)."""
    return generation_of(gpu) in FP8_ATTENTION_GENERATIONS


def generation_of(gpu: GPUSpec | str) -> str:
    """The architecture generation of ``gpu`` (a ``GPUSpec`` or a preset name), or 'unknown'."""
    explicit = getattr(gpu, "generation", None)
    if isinstance(explicit, str) and explicit:
        return explicit.lower()
    name = (gpu if isinstance(gpu, str) else gpu.name).lower()
    for prefix, generation in GENERATION_PREFIXES:
        if name.startswith(prefix):
            return generation
    return UNKNOWN_GENERATION
