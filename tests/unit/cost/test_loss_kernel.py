"""The loss under torch.compile (setting ``compile_loss``, cost.loss_kernel): the logits' memory at
4 B per logit instead of the torchtitan profile's eager 12, and the loss's HBM traffic at 8 B per
logit instead of 32, against hand-computed values; refused for a trainer that does not compile."""

from __future__ import annotations

import dataclasses

import pytest

from autoplan.api import build_context, plan_from_record
from autoplan.cost.evaluate import evaluate
from autoplan.cost.time import loss_s
from autoplan.layout import LayoutBatch
from autoplan.rules import legality_codes

# Llama 3 8B (V = 128,256), 2 sequences of 8192 tokens per GPU, no TP or pipeline: 16,384 tokens.
LOGITS = 2 * 8192 * 128256
RECORD = {"gpus": 32, "seq_len": 8192, "gbs_seqs": 64, "zero": 3, "mbs": 2, "recompute": "selective"}


def _evaluated(compile_loss: bool, trainer: str = "torchtitan", zero: int = 3):
    layout, training = plan_from_record({**RECORD, "zero": zero}, hardware="h200")
    training = dataclasses.replace(training, compile_loss=compile_loss)
    ctx = build_context("llama3-8b", training, trainer=trainer)
    batch = LayoutBatch.from_layouts([layout])
    return ctx, batch, evaluate(ctx, batch).columns


def test_the_compiled_loss_holds_4_bytes_per_logit_where_eager_holds_12():
    _, _, eager = _evaluated(False)
    _, _, compiled = _evaluated(True)
    assert eager["mem_last_logits_and_loss_bytes"][0] == pytest.approx(LOGITS * 12)  # 23.48 GiB
    assert compiled["mem_last_logits_and_loss_bytes"][0] == pytest.approx(LOGITS * 4)  # 7.83 GiB
    assert compiled["peak_memory_bytes"][0] < eager["peak_memory_bytes"][0]


def test_the_compiled_loss_moves_a_quarter_of_the_eager_bytes():
    eager_ctx, batch, _ = _evaluated(False)
    compiled_ctx, _, _ = _evaluated(True)
    tokens = batch.mbs * 8192.0
    eager, compiled = loss_s(eager_ctx, batch, tokens)[0], loss_s(compiled_ctx, batch, tokens)[0]
    hbm = eager_ctx.effective_hbm_bytes_per_s
    assert eager == pytest.approx(LOGITS * 32 / hbm) and compiled == pytest.approx(LOGITS * 8 / hbm)


@pytest.mark.parametrize("trainer", ["megatron", "deepspeed", "nanotron"])
def test_a_trainer_that_does_not_compile_the_loss_refuses_it(trainer):
    eager_ctx, batch, _ = _evaluated(False, trainer, zero=1)
    compiled_ctx, _, _ = _evaluated(True, trainer, zero=1)
    assert legality_codes(eager_ctx, batch)[0] == 0 and legality_codes(compiled_ctx, batch)[0] != 0
