"""Trainer options that change what the time model hides or how it runs a layer.

A profile's optional ``options:`` block states which of these switches the trainer runs with;
the time model honours them (``autoplan.cost.overlap``) and an exporter writes the matching
flags. Absent keys keep the value that reproduces the model's behaviour before the switch
existed (the efficiency applies as calibrated).

=======================  =====================================================================
option                   trainer flags it stands for
=======================  =====================================================================
tp_comm_overlap          Megatron ``--tp-comm-overlap`` (Transformer Engine userbuffers);
                         torchtitan ``parallelism.enable_async_tensor_parallel``. Off: the
                         sequence-parallel collectives block (``tp_overlap`` does not apply).
overlap_grad_reduce      Megatron ``--overlap-grad-reduce``; PyTorch DDP / nanotron bucket hooks;
                         DeepSpeed ``overlap_comm``. Off: ``dp_overlap`` does not apply to the
                         gradient reduction.
overlap_param_gather     Megatron ``--overlap-param-gather`` (ZeRO-1/2 parameter all-gather behind
                         the next forward). Off: the gather after the optimizer step is exposed.
moe_grouped_gemm         Megatron ``--moe-grouped-gemm``; torchtitan ``_grouped_mm``: one GEMM
                         over all local experts' tokens. Off: one GEMM per local expert.
moe_token_dedup          Megatron ``--moe-enable-deepep`` (flex dispatcher, DeepEP): a token goes
                         to a remote node once, however many of its experts live there.
moe_fp8_dispatch         DeepEP FP8 dispatch under fp8 (1 byte + a 4-byte scale per 128 values);
                         the combine stays bf16 (DeepSeek-V3 report, Sec. 3.3).
moe_a2a_overlap          Megatron ``--overlap-moe-expert-parallel-comm`` (a micro-batch's
                         all-to-all behind another's compute). Off: ``ep_overlap`` does not apply.
=======================  =====================================================================
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from autoplan.errors import SpecError, shown
from autoplan.specs.yaml_io import check_keys


@dataclass(frozen=True)
class TrainerOptions:
    """The switches of the table in the module doc (defaults: the behaviour before them)."""

    tp_comm_overlap: bool = False
    overlap_grad_reduce: bool = True
    overlap_param_gather: bool = True
    moe_grouped_gemm: bool = True
    moe_token_dedup: bool = False
    moe_fp8_dispatch: bool = False
    moe_a2a_overlap: bool = True


OPTION_NAMES = tuple(f.name for f in fields(TrainerOptions))


def options_from_mapping(data: Any, where: str) -> TrainerOptions:
    """Parse a profile's ``options:`` block (booleans only; unknown names refused)."""
    if data is None:
        return TrainerOptions()
    if not isinstance(data, dict):
        raise SpecError(where, f"options: expected a mapping of option: true|false, got {shown(data)}")
    check_keys(data, f"{where}: options", required=[], optional=OPTION_NAMES)
    for key, value in data.items():
        if not isinstance(value, bool):
            raise SpecError(where, f"options.{key}: expected true or false, got {shown(value)}")
    return TrainerOptions(**data)
