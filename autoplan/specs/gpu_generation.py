"""A GPU's architecture generation (Ampere, Hopper, Blackwell, CDNA 3): the unit by which the
error bands group measurements (:mod:`autoplan.calibration.uncertainty`) and by which a profile
fitted on one GPU moves to another (:mod:`autoplan.profiles.transfer`)."""

from __future__ import annotations

from autoplan.specs.hardware import GPUSpec

UNKNOWN_GENERATION = "unknown"
# GPU name prefix -> architecture generation (NVIDIA: Ampere GA100, Hopper GH100, Blackwell
# GB100/GB202; AMD: CDNA 3 for MI300X/MI325X), as the vendors' datasheets name them. A GPU
# preset may also carry a ``generation`` attribute, which wins.
GENERATION_PREFIXES = (("a100", "ampere"), ("a800", "ampere"), ("h100", "hopper"), ("h200", "hopper"),
                       ("h800", "hopper"), ("gh200", "hopper"), ("b200", "blackwell"),
                       ("b300", "blackwell"), ("gb200", "blackwell"), ("gb300", "blackwell"),
                       ("mi300", "cdna3"), ("mi325", "cdna3"))


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
