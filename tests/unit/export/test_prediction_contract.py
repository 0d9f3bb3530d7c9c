"""Contract (issue 46): an exported file runs exactly the plan its header predicts.

For every golden export case and trainer, and for each trainer's plan of ``search --export``, the
layout is read back from the exported files with the formats' own parsers (test_roundtrip's
readers) and estimated again with that trainer's profile; the header's ``Predicted:`` line must
be that estimate's (same text: same figures at the printed precision). A setting a trainer
cannot run must be refused by the rule table (the search then picks another plan), never written
as something else under the same prediction. Knobs no file states (placement, hsdp, offload,
optimizer, ...) are taken from the plan, so the check covers what the files say.
"""

from __future__ import annotations

import functools

import pytest

from autoplan.api import build_context, build_training, plan_from_record
from autoplan.cost.evaluate import evaluate
from autoplan.export import TRAINERS, LaunchOptions, plan_training, render
from autoplan.export.common import Prediction
from autoplan.export.per_trainer import best_plans
from autoplan.layout import LayoutBatch
from autoplan.layout_records import layout_from_record
from autoplan.search import search
from autoplan.space import load_space
from tests.unit.export.test_roundtrip import (
    CASES,
    COMPARED,
    GOLDEN,
    VERSIONS,
    from_deepspeed,
    from_megatron,
    from_megatron_bridge,
    from_nanotron,
    from_torchtitan_module,
    load_model,
)

PREDICTED = ("peak_memory_gib", "step_time_s", "tokens_per_s_per_gpu", "mfu")


def _estimate(model, layout, training, trainer: str, version: str | None = None) -> Prediction:
    """What `autoplan estimate --trainer TRAINER` predicts for ``layout`` (its columns)."""
    ctx = build_context(model, training, trainer=trainer, trainer_version=version)
    record = evaluate(ctx, LayoutBatch.from_layouts([layout])).record(0)
    return Prediction.from_record(record, trainer)


def _read_back(trainer: str, files: dict[str, str], model, plan: dict) -> dict:
    """The plan as the exported files state it: the readers' knobs over the plan's record."""
    gpus = plan["gpus"]
    got = {"megatron": lambda: from_megatron(files, model),
           "megatron-bridge": lambda: from_megatron_bridge(files, model),
           "torchtitan": lambda: from_torchtitan_module(files, model, gpus),
           "nanotron": lambda: from_nanotron(files, model),
           "deepspeed": lambda: from_deepspeed(files, model)}[trainer]()
    got.pop("plan", None)
    if got.get("seq_len") is None:  # plain DeepSpeed: the training script owns seq_len
        got["seq_len"] = plan["seq_len"]
    return {**plan, **{key: got[key] for key in COMPARED}}


def _header_prediction(files: dict[str, str]) -> set[str]:
    """The ``Predicted:`` line of every file that has a header comment."""
    lines = {line.split("Predicted: ", 1)[1] for text in files.values() for line in text.splitlines()
             if line.startswith("# Predicted: ")}
    assert lines, "no file states the prediction"
    return lines


def _check(trainer: str, model, files: dict[str, str], plan: dict, training, version: str | None = None):
    stated = _read_back(trainer, files, model, plan)
    layout = layout_from_record(stated, training)
    assert _header_prediction(files) == {_estimate(model, layout, training, trainer, version).describe()}, (
        f"{trainer} writes {layout.describe()}, the plan was {plan}")


GOLDEN_RUNS = [pytest.param(c, t, id=f"{c['name']}-{t}") for c in CASES for t in c["trainers"]]


@pytest.mark.parametrize(("case", "trainer"), GOLDEN_RUNS)
def test_golden_plan_header_is_the_estimate_of_the_exported_setting(case, trainer):
    model = load_model(GOLDEN / case["model"] if case["model"].endswith(".json") else case["model"])
    layout, training = plan_from_record(case["layout"])
    version = VERSIONS.get((case["model"], str(case["layout"]), trainer))
    launch = LaunchOptions(prediction=_estimate(model, layout, training, trainer, version))
    files = render(trainer, model, layout, training, launch, trainer_version=version).files
    _check(trainer, model, files, layout.to_record(training), training, version)


@functools.cache
def _searched_70b_bf16_fp8():
    """`search -m 70b -g 512 --gbs-tokens 4M --precision bf16,fp8` (4M tokens = 512 x 8192)."""
    training = build_training(512, 8192, 512)
    space = load_space("default").with_overrides(precision=["bf16", "fp8"])
    result = search(build_context("llama3-70b", training, trainer="megatron"), space)
    return result, best_plans(result, TRAINERS)


@pytest.mark.parametrize("index", range(len(TRAINERS)), ids=TRAINERS)
def test_search_export_header_is_the_estimate_of_the_exported_setting(index):
    result, plans = _searched_70b_bf16_fp8()
    plan = plans[index]
    assert plan.exported, plan.reason
    layout = layout_from_record(plan.record, result.training)
    training = plan_training(layout, result.training)
    _check(plan.trainer, result.ctx.model, plan.result.files, layout.to_record(training), training)
    if plan.trainer == "nanotron":  # no FP8 in nanotron: the rule table refused it, bf16 is exported
        assert plan.record["precision"] == "bf16"
