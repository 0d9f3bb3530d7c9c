"""Sliding windows, chunked attention and the new families' other features at export: written
where the trainer has the flag (Megatron-LM --window-size, TransformerEngine's (left, right) =
(w - 1, 0) for HF's w keys), refused where the window is shorter than the sequence and the
trainer cannot express it, a warning where it is a no-op or sizes nothing."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from autoplan.api import plan_from_record
from autoplan.export import ExportError, architecture_problem, render
from autoplan.specs.models import load_model
from tests.unit.export.test_roundtrip import bash_words, flags

CONFIGS = Path(__file__).resolve().parents[2] / "golden" / "hf_configs"
MISTRAL = {"model_type": "mistral", "num_hidden_layers": 4, "hidden_size": 512, "intermediate_size": 1024,
           "num_attention_heads": 8, "num_key_value_heads": 2, "vocab_size": 1000, "sliding_window": 4096,
           "max_position_embeddings": 32768, "name": "tiny-mistral"}


def _mistral(tmp_path: Path, **changes):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**MISTRAL, **changes}))
    return load_model(path)


def _plan(seq_len: int, **values):
    return plan_from_record({"gpus": 8, "seq_len": seq_len, "gbs_seqs": 64, "zero": 3, **values})


def test_megatron_writes_the_window_and_the_full_layers(tmp_path):
    model = dataclasses.replace(_mistral(tmp_path), full_attention_every=2)
    script = render("megatron", model, *_plan(8192, tp=2, zero=1)).files["megatron_pretrain_gpt.sh"]
    f = flags(bash_words(script))
    assert f["--window-size"] == "(4095,0)"  # 4096 keys: the query and the 4095 before it
    assert f["--window-attn-skip-freq"] == "2"


@pytest.mark.parametrize("trainer", ["torchtitan", "nanotron"])
def test_a_window_shorter_than_the_sequence_is_refused_where_it_has_no_setting(tmp_path, trainer):
    model = _mistral(tmp_path)
    zero = {"zero": 3 if trainer == "torchtitan" else 1}
    with pytest.raises(ExportError, match="sliding attention of 4096 tokens on 4 layers \\(seq_len 8192\\)"):
        render(trainer, model, *_plan(8192, **zero))
    result = render(trainer, model, *_plan(4096, **zero))  # w >= s: every query sees its whole prefix anyway
    assert any("window 4096 >= seq_len 4096: a no-op" in w for w in result.warnings)
    assert "sliding attention" in architecture_problem(trainer, model, _plan(8192)[1])


def test_gemma2_and_olmo2_are_refused_by_megatron_and_say_why():
    gemma = load_model(CONFIGS / "google--gemma-2-9b.json")
    with pytest.raises(ExportError, match="GeGLU MLP .*sandwich norms"):
        render("megatron", gemma, *_plan(4096, tp=2, zero=1))
    olmo = load_model(CONFIGS / "allenai--OLMo-2-1124-7B.json")
    with pytest.raises(ExportError, match="post norms .*q/k norms over the whole projections"):
        render("megatron", olmo, *_plan(4096, tp=2, zero=1))
    # plain DeepSpeed trains the Hugging Face model itself: nothing to refuse
    assert render("deepspeed", gemma, *_plan(4096)).files


def test_llama4_chunks_are_refused_past_their_length_and_its_extras_warned():
    scout = load_model(CONFIGS / "meta-llama--Llama-4-Scout-17B-16E.json")
    values = dict(gpus=64, tp=4, ep=16, zero=1)
    with pytest.raises(ExportError, match="chunked attention of 8192 tokens on 36 layers"):
        render("megatron", scout, *plan_from_record({**values, "seq_len": 16384, "gbs_seqs": 64}))
    warnings = render("megatron", scout, *plan_from_record({**values, "seq_len": 8192, "gbs_seqs": 64})).warnings
    assert "use_qk_norm=True has no Megatron-LM setting: the model is trained without it" in warnings
    assert any("every 4th layer without RoPE" in w for w in warnings)
