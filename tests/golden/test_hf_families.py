"""Real config.json files of the gemma2, phi3, olmo2, llama4 and deepseek_v2 families load from
their own field names, and their parameter counts match the published totals (cases in
hf_family_counts.yaml, each with the source of its config and of its total)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from autoplan.cost.params import count_params
from autoplan.specs.models import load_model_file

HERE = Path(__file__).parent
CASES = yaml.safe_load((HERE / "hf_family_counts.yaml").read_text(encoding="utf-8"))


@pytest.mark.parametrize("case", CASES, ids=[case["config"] for case in CASES])
def test_published_total(case):
    model = load_model_file(HERE / "hf_configs" / f"{case['config']}.json")
    expected = case["expected_total"] - case.get("not_modelled", 0)
    total = count_params(model).total
    assert abs(total - expected) <= case["tolerance"] * expected, (
        f"{case['config']}: {total:,} vs {expected:,} ({case['total_source']})")


def test_every_new_family_has_a_real_config():
    types = {load_model_file(HERE / "hf_configs" / f"{case['config']}.json").model_type for case in CASES}
    assert types == {"gemma2", "phi3", "olmo2", "llama4_text", "deepseek_v2"}


def test_the_structure_read_from_the_configs():
    def load(name):
        return load_model_file(HERE / "hf_configs" / f"{name}.json")

    gemma = load("google--gemma-2-9b")  # head_dim 256 although 3584 / 16 = 224
    assert (gemma.head_dim, gemma.activation, gemma.norm_placement, gemma.tied_embeddings) == (256, "geglu", "sandwich", True)
    assert (gemma.attention_window, gemma.full_attention_every, gemma.num_local_attention_layers) == (4096, 2, 21)
    assert dict(gemma.other_features)["final_logit_softcapping"] == 30.0
    scout = load("meta-llama--Llama-4-Scout-17B-16E")
    assert (scout.ffn_hidden_size, scout.moe.expert_ffn_hidden_size, scout.moe.num_shared_experts) == (16384, 8192, 1)
    assert (scout.local_attention, scout.attention_window, scout.num_local_attention_layers) == ("chunked", 8192, 36)
    lite = load("deepseek-ai--DeepSeek-V2-Lite")
    assert (lite.mla.q_lora_rank, lite.moe.router_bias, lite.moe.score_function, lite.moe.num_expert_groups) == (
        0, False, "softmax", 1)
    assert load("deepseek-ai--DeepSeek-V2").moe.routed_scaling_factor == 16.0
    olmo = load("allenai--OLMo-2-1124-7B")
    assert (olmo.qk_norm, olmo.qk_norm_per_head, olmo.norm_placement) == (True, False, "post")
    assert load("microsoft--Phi-3-mini-4k-instruct").attention_window == 2047
