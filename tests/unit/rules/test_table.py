"""The rule table: well-formed data, one evaluation for a batch and for one layout."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from autoplan.api import build_context, build_training
from autoplan.layout import LayoutBatch, resolve_layout
from autoplan.profiles import list_trainers, load_profile
from autoplan.rules import (
    ALL,
    REASON_CODES,
    RULES,
    RuleContext,
    broken_rules,
    explain_reason,
    legality_codes,
    rules_for,
    suggest_fix,
)
from autoplan.specs.models import load_model


def context(model: str, gpus: int, *, trainer: str = "megatron", seq_len: int = 4096, gbs_seqs: int = 96,
            hardware: str = "h100-sxm"):
    return build_context(model, build_training(gpus, seq_len, gbs_seqs, hardware=hardware), trainer=trainer)


TRAINING_16 = build_training(16, 4096, 96)


def test_every_rule_names_its_trainers_words_and_source():
    known = set(list_trainers())
    for rule in RULES:
        assert rule.trainers == ALL or set(rule.trainers) <= known, rule.name
        assert rule.invariant and rule.source, rule.name
    assert len(REASON_CODES) == len(RULES) + 1 and REASON_CODES[0] == "ok"


def test_generic_rules_bind_every_trainer_including_hf():
    for trainer in list_trainers():
        names = {rule.name for rule in rules_for(RuleContext(load_model("llama3-8b"), load_profile(trainer), TRAINING_16))}
        assert {"degrees", "tp_heads", "trainer_zero"} <= names, trainer


def test_hardware_rules_read_the_cluster():
    h100, a100 = context("llama3-8b", 8), context("llama3-8b", 8, hardware="a100-80gb")
    fp8 = LayoutBatch.from_layouts([resolve_layout(dict(precision="fp8"), h100.training)])
    assert REASON_CODES[int(legality_codes(h100, fp8)[0])] == "ok"
    assert REASON_CODES[int(legality_codes(a100, fp8)[0])] == "fp8_hardware"


def _layouts():
    """A small grid of layouts on 16 GPUs, legal and not."""
    out = []
    for tp, pp, vpp, cp, ep, zero, mbs in itertools.product((1, 2, 16), (1, 3, 4), (1, 2), (1, 2), (1, 2, 8),
                                                             (0, 1, 2, 3), (1, 2)):
        try:
            out.append(resolve_layout(dict(tp=tp, pp=pp, vpp=vpp, cp=cp, ep=ep, zero=zero, mbs=mbs),
                                      TRAINING_16))
        except Exception:  # degrees that do not divide are refused before the rules
            continue
    return out


@pytest.mark.parametrize("trainer", ["megatron", "torchtitan", "nanotron", "deepspeed", "hf"])
@pytest.mark.parametrize("allow_uneven", [False, True])
def test_batch_equals_one_by_one(trainer, allow_uneven):
    ctx = build_context("mixtral-8x7b", TRAINING_16, trainer=trainer)
    layouts = _layouts()
    batch = LayoutBatch.from_layouts(layouts)
    codes = legality_codes(ctx, batch, allow_uneven=allow_uneven)
    assert (codes > 0).any() and (codes == 0).any()
    for i, layout in enumerate(layouts):
        one = legality_codes(ctx, LayoutBatch.from_layouts([layout]), allow_uneven=allow_uneven)[0]
        assert one == codes[i]
        broken = broken_rules(ctx, batch, i, allow_uneven=allow_uneven)
        assert (codes[i] == 0) == (broken == [])
        if codes[i]:  # the first broken rule is the reason, with the same text
            assert broken[0][0] == REASON_CODES[codes[i]]
            assert broken[0][1] == explain_reason(ctx, batch, i, int(codes[i]))


def test_messages_state_the_invariant_and_the_values():
    ctx = context("llama3-8b", 16, gbs_seqs=64)
    batch = LayoutBatch.from_layouts([resolve_layout(dict(tp=16), ctx.training)])
    code = int(legality_codes(ctx, batch)[0])
    assert REASON_CODES[code] == "tp_heads"
    assert explain_reason(ctx, batch, 0, code) == ("attention heads and KV heads (query groups) must be "
                                                   "divisible by tp (heads=32, kv_heads=8, tp=16)")
    assert suggest_fix(ctx, batch, 0, code) == "try --tp 8"


@pytest.mark.parametrize(("trainer", "values", "fix"), [
    ("torchtitan", dict(zero=1), "try --zero 3"),
    ("deepspeed", dict(pp=2, zero=3), "try --zero 1"),
    ("megatron", dict(cp=2, seq_len=4097), "try --seq-len 4100 or a smaller --cp"),
    ("megatron", dict(pp=5), "try --pp 4 or drop --even-stages-only"),
    ("deepspeed", dict(pp=5), "try --pp 4 or drop --even-stages-only"),
    ("torchtitan", dict(ep=8, zero=0), "try --zero 3 (FSDP makes dp part of the expert mesh)"),
])
def test_suggest_fix_names_the_nearest_change(trainer, values, fix):
    values = dict(values)
    ctx = context("qwen3-30b-a3b", 40 if values.get("pp") == 5 else 16, trainer=trainer,
                  seq_len=values.pop("seq_len", 4096))
    layout = resolve_layout(values, ctx.training)
    batch = LayoutBatch.from_layouts([layout])
    code = int(legality_codes(ctx, batch, allow_uneven=False)[0])
    assert code and suggest_fix(ctx, batch, 0, code) == fix


def test_codes_are_indices_of_the_first_broken_rule():
    ctx = context("llama3-8b", 16, trainer="nanotron", gbs_seqs=64)
    layout = resolve_layout(dict(tp=16, vpp=2, zero=2), ctx.training)
    batch = LayoutBatch.from_layouts([layout])
    names = [name for name, _ in broken_rules(ctx, batch, 0)]
    assert names == ["tp_heads", "vpp_needs_pp", "trainer_zero", "trainer_vpp"]
    assert REASON_CODES[int(legality_codes(ctx, batch)[0])] == names[0]
    assert np.all(legality_codes(ctx, batch.take(np.array([0, 0, 0]))) == REASON_CODES.index("tp_heads"))
