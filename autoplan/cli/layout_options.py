"""Options that describe one layout (estimate, explain, export, calibrate)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import click

from autoplan.layout import (
    MAX_DEGREE,
    OFFLOADS,
    OPTIMIZERS,
    PLACEMENTS,
    PP_SCHEDULES,
    PP_SPLITS,
    PRECISIONS,
    RECOMPUTE,
)
from autoplan.recompute_modules import RECOMPUTE_MODULES


def layout_options(func: Callable) -> Callable:
    """The knobs of one layout; unspecified ones take resolve_layout's defaults."""
    pos = click.IntRange(1, MAX_DEGREE)
    options = [
        click.option("--tp", type=pos, default=1, show_default=True, help="Tensor-parallel size."),
        click.option("--pp", type=pos, default=1, show_default=True, help="Pipeline-parallel size."),
        click.option("--vpp", type=pos, default=1, show_default=True, help="Virtual stages per pipeline rank."),
        click.option("--cp", type=pos, default=1, show_default=True, help="Context-parallel size."),
        click.option("--ep", type=pos, default=1, show_default=True, help="Expert-parallel size."),
        click.option("--etp", type=pos, default=1, show_default=True, help="Expert tensor-parallel size."),
        click.option("--dp", type=pos, default=None, help="Data-parallel size (default gpus/(tp·pp·cp))."),
        click.option("--zero", type=click.IntRange(0, 3), default=1, show_default=True,
                     help="ZeRO stage: 0 none, 1 optimizer, 2 +gradients, 3 +weights (FSDP)."),
        click.option("--mbs", type=pos, default=1, show_default=True, help="Micro-batch size in sequences."),
        click.option("--grad-acc", type=pos, default=None, help="Micro-batches per step (default from the batch)."),
        click.option("--recompute", type=click.Choice(RECOMPUTE), default="none", show_default=True,
                     help="Activation recomputation."),
        click.option("--recompute-layers", type=click.IntRange(0), default=0, show_default=True,
                     help="Full recompute of this many layers per (virtual) stage (0 = every layer)."),
        click.option("--recompute-modules", default="", metavar="M1,M2",
                     help=f"Selective recompute of these modules: {', '.join(RECOMPUTE_MODULES)} "
                          "[default: the trainer's own selective recompute]."),
        click.option("--offload-layers", type=click.IntRange(0), default=0, show_default=True,
                     help="Layers per stage whose activations are offloaded to host memory."),
        click.option("--precision", type=click.Choice(PRECISIONS), default="bf16", show_default=True,
                     help="Matmul precision: bf16, or fp8 (needs FP8 tensor cores)."),
        click.option("--sp/--no-sp", default=None, help="Sequence parallel (default: on when tp > 1)."),
        click.option("--placement", type=click.Choice(PLACEMENTS), default=PLACEMENTS[0], show_default=True,
                     help="Rank order, innermost first."),
        click.option("--pp-schedule", type=click.Choice(PP_SCHEDULES), default=PP_SCHEDULES[0], show_default=True,
                     help="Pipeline schedule (default: the trainer's own, 1F1B or interleaved with vpp > 1); "
                          "zb-v and dualpipev run two chunks per rank (vpp 2)."),
        click.option("--pp-split", type=click.Choice(PP_SPLITS), default=PP_SPLITS[0], show_default=True,
                     help="Layers on pipeline stages: balanced, or embed-loss (the embedding and the loss "
                          "count as one layer each, Llama 3's split)."),
        click.option("--optimizer", type=click.Choice(OPTIMIZERS), default=OPTIMIZERS[0], show_default=True,
                     help="Optimizer: adamw, adamw8bit (bitsandbytes), adafactor, sgd (momentum), lion, "
                          "muon (AdamW for embeddings, head and norms)."),
        click.option("--offload", type=click.Choice(OFFLOADS), default=OFFLOADS[0], show_default=True,
                     help="Model states in host memory: none; optimizer (optimizer states and fp32 master "
                          "weights, CPU optimizer step); params (also the ZeRO-3 weight shards)."),
        click.option("--hsdp", type=click.IntRange(0, MAX_DEGREE), default=0, show_default=True,
                     help="Hybrid sharding: ZeRO shards the model states inside groups of this many "
                          "data-parallel ranks, replicated across groups (0 = over the whole group)."),
    ]
    return functools.reduce(lambda f, opt: opt(f), reversed(options), func)


LAYOUT_KEYS = ("tp", "pp", "vpp", "cp", "ep", "etp", "dp", "zero", "mbs", "grad_acc", "recompute",
               "precision", "sp", "placement", "recompute_layers", "recompute_modules", "offload_layers",
               "pp_schedule", "pp_split", "optimizer", "offload", "hsdp")


def layout_values(kwargs: dict[str, Any]) -> dict[str, Any]:
    """The layout knobs given in ``kwargs`` (for :func:`autoplan.layout.resolve_layout`)."""
    return {k: kwargs[k] for k in LAYOUT_KEYS if kwargs.get(k) is not None}
