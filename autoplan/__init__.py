"""autoplan: plan parallel layouts for training large language models on GPU clusters.

The library in five steps (the ``autoplan`` command line calls the same functions)::

    import autoplan

    training = autoplan.build_training(512, seq_len=8192, gbs_seqs=512, hardware="h100-sxm")
    ctx = autoplan.build_context("llama3-70b", training, trainer="megatron")

    # one layout: memory, step time, tokens/s, MFU (a batch of one; every column is an array)
    layout = autoplan.resolve_layout({"tp": 8, "pp": 4, "zero": 1, "recompute": "selective"}, training)
    table = autoplan.evaluate(ctx, autoplan.LayoutBatch.from_layouts([layout]))
    print(table.record(0)["tokens_per_s_per_gpu"], table["peak_memory_gib"][0])
    for row in autoplan.explain_terms(ctx, table, 0):   # every term, its formula and source
        print(row["term"], row["value"], row["unit"], row["formula"])

    # the search: fit, then global batch, then throughput
    result = autoplan.search_layouts(ctx, autoplan.load_space("default"))
    best = result.top_records(1)[0]

    # the best plan as a trainer's launch files
    files = autoplan.render("megatron", ctx.model, autoplan.layout_from_record(best, training), training)

The inputs are separate small dataclasses: ``ModelSpec`` (architecture), ``Cluster`` (GPUs,
nodes, links), ``TrainingSpec`` (cluster, sequence, global batch, FLOP convention),
``TrainerProfile`` with its calibrated parameters, and the ``Layout`` (the parallel knobs).
Names are loaded on first use, so ``import autoplan`` stays cheap.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

# public name -> module that defines it
_EXPORTS = {
    # inputs
    "ModelSpec": "autoplan.specs.model",
    "load_model": "autoplan.specs.models",
    "list_models": "autoplan.specs.models",
    "model_from_hf_config": "autoplan.specs.hf_config",
    "GPUSpec": "autoplan.specs.hardware",
    "Cluster": "autoplan.specs.hardware",
    "load_gpu": "autoplan.specs.hardware",
    "make_cluster": "autoplan.specs.hardware",
    "TrainingSpec": "autoplan.specs.training",
    "TrainerProfile": "autoplan.profiles",
    "load_profile": "autoplan.profiles",
    "build_training": "autoplan.api",
    "build_context": "autoplan.api",
    "plan_from_record": "autoplan.api",
    # layouts
    "Layout": "autoplan.layout",
    "LayoutBatch": "autoplan.layout",
    "resolve_layout": "autoplan.layout",
    "layout_from_record": "autoplan.layout_records",
    # the cost model
    "CostContext": "autoplan.cost.context",
    "CostTable": "autoplan.cost.evaluate",
    "evaluate": "autoplan.cost.evaluate",
    "count_params": "autoplan.cost.params",
    "TERMS": "autoplan.cost.terms",
    # rules, search, reports, export
    "legality_codes": "autoplan.rules",
    "SearchSpace": "autoplan.space",
    "load_space": "autoplan.space",
    "SearchOptions": "autoplan.search",
    "SearchResult": "autoplan.search",
    "explain_terms": "autoplan.report.explain",
    "render": "autoplan.export",
    "export_plan": "autoplan.export",
    "LaunchOptions": "autoplan.export",
    "AutoplanError": "autoplan.errors",
}
# ``autoplan.search`` is the search package, so its entry point is exported under this name
_RENAMED = {"search_layouts": ("autoplan.search", "search")}

__all__ = ["__version__", *sorted(_EXPORTS), *sorted(_RENAMED)]


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        module, attribute = _EXPORTS[name], name
    elif name in _RENAMED:
        module, attribute = _RENAMED[name]
    else:
        raise AttributeError(f"module 'autoplan' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), attribute)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
