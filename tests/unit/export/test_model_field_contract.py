"""Contract (issue 46): for every model preset and exporter, each model field the preset uses is
written by the exporter (its MODEL_FIELDS declaration) or the export refuses the model or warns
about the field, in the words of autoplan.export.model_fields.FIELDS."""

from __future__ import annotations

import pytest

from autoplan.api import plan_from_record
from autoplan.export import TRAINERS, ExportError, TrainerRuleError, render
from autoplan.export.model_fields import FIELDS, used_fields, written_fields
from autoplan.specs.models import list_models, load_model

# 8 GPUs, no ZeRO: a layout every trainer runs for every preset; tp 2 sends DeepSpeed through
# Megatron-DeepSpeed (its other path).
LAYOUTS = {"plain": dict(gpus=8, zero=0, gbs_seqs=8), "tp2": dict(gpus=8, tp=2, zero=0, gbs_seqs=8)}
RUNS = [pytest.param(name, trainer, kind, id=f"{name}-{trainer}-{kind}") for name in [m.name for m in list_models()]
        for trainer in TRAINERS for kind in (("plain", "tp2") if trainer == "deepspeed" else ("plain",))]


@pytest.mark.parametrize(("name", "trainer", "kind"), RUNS)
def test_every_used_model_field_is_written_or_explained(name, trainer, kind):
    model = load_model(name)
    layout, training = plan_from_record({**LAYOUTS[kind], "seq_len": model.seq_len})
    try:
        result = render(trainer, model, layout, training)
    except (ExportError, TrainerRuleError) as exc:  # the model refused, with the reason
        assert str(exc) and "\n" not in str(exc)
        return
    texts = [warning.lower() for warning in result.warnings]
    unexplained = [field for field in used_fields(model) if field not in written_fields(trainer, layout)
                   and not any(word.lower() in text for word in FIELDS[field] for text in texts)]
    assert not unexplained, (unexplained, result.warnings)


def test_used_fields_are_those_off_the_defaults():
    """DeepSeek-V3 (model_db/deepseek-v3.yaml): eps 1e-6, YaRN, MTP 1, MLA, sigmoid routing with
    an expert bias, groups and a sequence-wise balance loss; Llama-3 8B: theta 500000 (the
    default is 10000) and no scaling, Llama-3.1 405B: Llama-3 scaling."""
    used = set(used_fields(load_model("deepseek-v3")))
    assert {"norm_eps", "rope_scaling", "num_mtp_layers", "mla", "moe.router_bias", "moe.score_function",
            "moe.num_expert_groups", "moe.aux_loss_per_sequence"} <= used
    assert "rope_theta" in used_fields(load_model("llama3-8b")) and "rope_scaling" not in used_fields(load_model("llama3-8b"))
    assert "rope_scaling" in used_fields(load_model("llama3.1-405b"))
    assert "mla" not in used_fields(load_model("llama3-8b"))
