"""legality_codes (one row per live rule, rules whose condition on the context fails left out)
agrees with its definition: per layout, the first rule of the table, of those that bind the
trainer, whose ``broken_mask`` is True."""

from __future__ import annotations

import numpy as np
import pytest

from autoplan.api import build_context, build_training
from autoplan.layout import FIELDS, LayoutBatch
from autoplan.rules import legality_codes
from autoplan.rules.evaluate import RULES
from autoplan.rules.table import RuleContext

CASES = [("llama3-70b", "megatron", {}), ("mixtral-8x7b", "megatron", {"fp8_attention": True}),
         ("llama3-8b", "torchtitan", {}), ("qwen3-30b-a3b", "deepspeed", {}), ("llama3.2-1b", "nanotron", {})]


def random_batch(seed: int, size: int = 400) -> LayoutBatch:
    rng = np.random.default_rng(seed)
    values = {"tp": [1, 2, 4, 8], "pp": [1, 2, 4, 8], "vpp": [1, 2, 3], "cp": [1, 2], "ep": [1, 2, 8],
              "etp": [1, 2], "zero": [0, 1, 2, 3], "mbs": [1, 2], "grad_acc": [1, 2, 4, 16], "sp": [0, 1],
              "recompute": [0, 1, 2], "precision": [0, 1], "pp_schedule": [0, 1, 2, 3, 4, 5],
              "offload_layers": [0, 1], "recompute_layers": [0, 1], "optimizer": [0, 1, 2], "offload": [0, 1, 2],
              "hsdp": [0, 2]}
    arrays = {name: rng.choice(np.asarray(values.get(name, [0]), dtype=float), size) for name in FIELDS}
    # dp·tp·pp·cp = 64 GPUs but in every 10th layout (the first rule, degrees, would hide the others)
    arrays["dp"] = 64.0 / (arrays["tp"] * arrays["pp"] * arrays["cp"]) + (np.arange(size) % 10 == 0)
    return LayoutBatch(arrays)


@pytest.mark.parametrize("model, trainer, settings", CASES)
def test_codes_are_the_first_broken_rule(model, trainer, settings):
    ctx = build_context(model, build_training(64, 4096, 256, **settings), trainer=trainer)
    batch = random_batch(len(model))
    rctx = RuleContext.of(ctx)
    expected = np.zeros(len(batch), dtype=np.int64)
    for index, rule in reversed(list(enumerate(RULES, start=1))):
        if rule.binds(rctx):
            expected[rule.broken_mask(rctx, batch)] = index
    assert len(np.unique(expected)) >= 8  # the batch breaks many rules first
    np.testing.assert_array_equal(legality_codes(ctx, batch), expected)
