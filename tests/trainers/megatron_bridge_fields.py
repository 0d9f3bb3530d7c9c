"""Write tests/unit/export/data/megatron_bridge_fields.yaml: the field names of each section of
Megatron-Bridge's ConfigContainer at a tag, the names the megatron-bridge export may write.

Megatron-Bridge does not import on a CPU (megatron/bridge/peft/lora_layers.py imports
transformer_engine.pytorch, a CUDA build), so its own dataclasses are read from the source with
``ast`` (annotated class attributes, walking the base classes defined in Bridge), and the
Megatron-Core bases (TransformerConfig, DistributedDataParallelConfig, OptimizerConfig,
GPTDatasetConfig) with ``dataclasses.fields`` from the megatron-bridge trainer env
(megatron-core 0.16.1, the core v0.3.1 ships as its 3rdparty/Megatron-LM submodule, core_v0.16.1):

  git clone https://github.com/NVIDIA-NeMo/Megatron-Bridge && git -C Megatron-Bridge checkout v0.3.1
  $AUTOPLAN_MEGATRON_BRIDGE_PYTHON tests/trainers/megatron_bridge_fields.py Megatron-Bridge [COMMIT] \
      > tests/unit/export/data/megatron_bridge_fields.yaml
"""

from __future__ import annotations

import ast
import dataclasses
import subprocess
import sys
from pathlib import Path

# section -> (Bridge source file, class) ; the Megatron-Core base each Bridge class extends
SECTIONS = {
    "train": ("src/megatron/bridge/training/config.py", "TrainingConfig"),
    "scheduler": ("src/megatron/bridge/training/config.py", "SchedulerConfig"),
    "checkpoint": ("src/megatron/bridge/training/config.py", "CheckpointConfig"),
    "logger": ("src/megatron/bridge/training/config.py", "LoggerConfig"),
    "rng": ("src/megatron/bridge/training/config.py", "RNGConfig"),
    "dataset": ("src/megatron/bridge/training/config.py", "GPTDatasetConfig"),
    "ddp": ("src/megatron/bridge/training/config.py", "DistributedDataParallelConfig"),
    "optimizer": ("src/megatron/bridge/training/config.py", "OptimizerConfig"),
    "tokenizer": ("src/megatron/bridge/training/tokenizers/config.py", "TokenizerConfig"),
    "mixed_precision": ("src/megatron/bridge/training/mixed_precision.py", "MixedPrecisionConfig"),
    "comm_overlap": ("src/megatron/bridge/training/comm_overlap.py", "CommOverlapConfig"),
    "model": ("src/megatron/bridge/models/gpt_provider.py", "GPTModelProvider"),
    "": ("src/megatron/bridge/training/config.py", "ConfigContainer"),
}
MCORE = {"DistributedDataParallelConfig": "megatron.core.distributed:DistributedDataParallelConfig",
         "OptimizerConfig": "megatron.core.optimizer:OptimizerConfig",
         "MCoreDistributedDataParallelConfig": "megatron.core.distributed:DistributedDataParallelConfig",
         "MCoreOptimizerConfig": "megatron.core.optimizer:OptimizerConfig",
         "MCoreGPTDatasetConfig": "megatron.core.datasets.gpt_dataset:GPTDatasetConfig",
         "TransformerConfig": "megatron.core.transformer.transformer_config:TransformerConfig"}


def _classes(root: Path) -> dict[str, ast.ClassDef]:
    out = {}
    for path in (root / "src/megatron/bridge").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                out.setdefault(node.name, node)
    return out


def _mcore(name: str) -> set[str]:
    import importlib

    module, cls = MCORE[name].split(":")
    return {f.name for f in dataclasses.fields(getattr(importlib.import_module(module), cls))}


def fields_of(name: str, classes: dict[str, ast.ClassDef]) -> set[str]:
    if name in MCORE and name not in classes or name.startswith("MCore") or name == "TransformerConfig":
        return _mcore(name)
    node = classes[name]
    names = {t.target.id for t in node.body if isinstance(t, ast.AnnAssign) and isinstance(t.target, ast.Name)}
    for base in node.bases:
        base_name = base.id if isinstance(base, ast.Name) else getattr(base, "attr", "")
        if base_name in MCORE or base_name in classes:
            names |= fields_of(base_name, classes)
    return names


def main(root: Path) -> None:
    classes = _classes(root)
    commit = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True,
                            text=True).stdout.strip() if len(sys.argv) < 3 else sys.argv[2]
    print(f"# Written by tests/trainers/megatron_bridge_fields.py from NVIDIA-NeMo/Megatron-Bridge at {commit}")
    import megatron.core

    print(f"# (tag v0.3.1) with megatron-core {megatron.core.__version__}'s dataclasses; section '' is "
          "ConfigContainer's own fields.")
    print(f"source_commit: {commit}")
    print("sections:")
    for section, (_, cls) in SECTIONS.items():
        print(f"  '{section}': [{', '.join(sorted(n for n in fields_of(cls, classes) if not n.startswith('_')))}]")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
