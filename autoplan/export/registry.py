"""The trainers autoplan exports to, each with the version its renderer is pinned to: the one list
the export API, ``autoplan export --to`` and the contract tests read. A trainer's renderer is the
module ``autoplan.export.<name with '-' as '_'>`` (:func:`renderer_module`)."""

from __future__ import annotations

VERSIONS = {
    "megatron": "Megatron-LM core_v0.15.3",
    "megatron-bridge": "Megatron-Bridge v0.3.1 (scripts/training/run_recipe.py + recipe overrides)",
    "torchtitan": "torchtitan 0.3.0 (Python config) and 0.2.2 (TOML)",
    "nanotron": "nanotron main @ 2411b022",
    "deepspeed": "DeepSpeed 0.19.8 (+ Megatron-DeepSpeed @ 4efb479 when tp or pp > 1)",
}
TRAINERS = tuple(VERSIONS)


def renderer_module(trainer: str) -> str:
    """The module that renders ``trainer``'s files."""
    return f"autoplan.export.{trainer.replace('-', '_')}"
