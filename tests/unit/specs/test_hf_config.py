"""HF config.json -> ModelSpec: one small config per model_type with a hand-computed count."""

from __future__ import annotations

import json

import pytest

from autoplan.cost.params import count_params
from autoplan.errors import AutoplanError, SpecError
from autoplan.specs.hf_config import SUPPORTED_MODEL_TYPES, model_from_hf_config
from autoplan.specs.models import load_model

# Shared small shape: 2 layers, hidden 64, MLP 128, 4 heads of 16, vocab 100.
BASE = {"num_hidden_layers": 2, "hidden_size": 64, "intermediate_size": 128,
        "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 100}

# Each case: model_type, extra config keys, expected ModelSpec fields, total, active.
CASES = [
    dict(
        id="llama",
        config={"model_type": "llama", **BASE},
        fields=dict(head_dim=16, num_kv_heads=2, tied_embeddings=False, qkv_bias=False,
                    linear_bias=False, max_position_embeddings=2048, seq_len=2048),
        # attn q 64*64 + k,v 2*64*32 + o 64*64 = 12,288; mlp 3*64*128 = 24,576; norms 2*64
        # layer 36,992 x 2 = 73,984; embed + head 2*100*64 = 12,800; final norm 64
        total=86_848,
    ),
    dict(
        id="llama-biases",
        config={"model_type": "llama", **BASE, "attention_bias": True, "mlp_bias": True},
        fields=dict(linear_bias=True, qkv_bias=False),
        # llama 86,848 + 2 layers x (q,k,v,o biases 64+32+32+64 + mlp biases 2*128+64 = 512)
        total=87_872,
    ),
    dict(
        id="llama-attention-bias-only",
        config={"model_type": "llama", **BASE, "attention_bias": True},
        fields=dict(linear_bias=False, qkv_bias=True),
        # approximation (see hf_config docstring): q,k,v biases 128 per layer, o_proj bias
        # (64 per layer) not counted: 86,848 + 2*128
        total=87_104,
    ),
    dict(
        id="mistral",
        config={"model_type": "mistral", **BASE, "num_key_value_heads": 1,
                "sliding_window": 4096, "max_position_embeddings": 32768},
        fields=dict(head_dim=16, num_kv_heads=1, max_position_embeddings=32768, seq_len=4096),
        # attn 4096 + 2*64*16 + 4096 = 10,240; mlp 24,576; norms 128 -> 34,944 x 2 = 69,888
        # + 12,800 + 64
        total=82_752,
    ),
    dict(
        id="mixtral",
        config={"model_type": "mixtral", **BASE, "num_local_experts": 4,
                "num_experts_per_tok": 2},
        fields=dict(ffn_hidden_size=128, num_moe_layers=2),
        # layer: attn 12,288 + norms 128 + 4 experts x 24,576 + router 64*4 = 110,976
        # x 2 = 221,952 + 12,800 + 64
        total=234_816,
        # layer active: 12,288 + 128 + 2 x 24,576 + 256 = 61,824; x 2 + 12,864
        active=136_512,
    ),
    dict(
        id="qwen2",
        config={"model_type": "qwen2", **BASE, "tie_word_embeddings": True},
        fields=dict(qkv_bias=True, tied_embeddings=True, qk_norm=False),
        # attn 12,288 + q,k,v biases 64+32+32; mlp 24,576; norms 128 -> 37,120 x 2 = 74,240
        # + tied embedding 6,400 + 64
        total=80_704,
    ),
    dict(
        id="qwen3",
        config={"model_type": "qwen3", **BASE, "head_dim": 32},
        fields=dict(head_dim=32, qk_norm=True, qkv_bias=False),
        # head_dim 32 != 64/4: q 64*128 + k,v 2*64*64 + o 128*64 = 24,576; mlp 24,576;
        # norms 2*64 + q/k-norm 2*32 = 192 -> 49,344 x 2 = 98,688 + 12,800 + 64
        total=111_552,
    ),
    dict(
        id="qwen3_moe",
        config={"model_type": "qwen3_moe", **BASE, "num_hidden_layers": 3, "head_dim": 16,
                "num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 32,
                "mlp_only_layers": [0], "decoder_sparse_step": 1},
        fields=dict(qk_norm=True, num_moe_layers=2, ffn_hidden_size=128),
        # attn 12,288; norms 128 + 2*16 = 160
        # dense layer 0: 12,288 + 160 + 24,576 = 37,024
        # MoE layers 1-2: 12,288 + 160 + 8 x 3*64*32 (6,144) + router 64*8 = 62,112 each
        # 37,024 + 2 x 62,112 + 12,800 + 64
        total=174_112,
        # MoE layer active 12,288 + 160 + 2 x 6,144 + 512 = 25,248; 37,024 + 2 x 25,248 + 12,864
        active=100_384,
    ),
    dict(
        id="deepseek_v3",
        config={"model_type": "deepseek_v3", **BASE, "num_hidden_layers": 3,
                "num_key_value_heads": 4, "head_dim": 4,  # transformers writes head_dim = rope
                "q_lora_rank": 16, "kv_lora_rank": 8, "qk_rope_head_dim": 4,
                "qk_nope_head_dim": 8, "v_head_dim": 8, "n_routed_experts": 8,
                "n_shared_experts": 1, "num_experts_per_tok": 2, "moe_intermediate_size": 32,
                "first_k_dense_replace": 1, "topk_method": "noaux_tc", "moe_layer_freq": 1},
        fields=dict(head_dim=12, num_moe_layers=2),
        # MLA: q_a 64*16 + q_b 16*4*12 = 1,792; kv_a 64*(8+4) + kv_b 8*4*(8+8) = 1,280;
        #   o 4*8*64 = 2,048 -> 5,120; norms 2*64 + 16 + 8 = 152
        # dense layer 0: 5,120 + 152 + 3*64*128 = 29,848
        # MoE layers: 5,120 + 152 + 8 x 6,144 + shared 6,144 + router 64*8 + bias 8 = 61,088
        # 29,848 + 2 x 61,088 + 12,800 + 64
        total=164_888,
        # MoE active: 5,120 + 152 + (2 + 1) x 6,144 + 520 = 24,224; 29,848 + 48,448 + 12,864
        active=91_160,
    ),
    dict(
        id="deepseek_v2",
        config={"model_type": "deepseek_v2", **BASE, "num_hidden_layers": 3, "num_key_value_heads": 4,
                "q_lora_rank": None, "kv_lora_rank": 8, "qk_rope_head_dim": 4, "qk_nope_head_dim": 8,
                "v_head_dim": 8, "n_routed_experts": 8, "n_shared_experts": 1, "num_experts_per_tok": 2,
                "moe_intermediate_size": 32, "first_k_dense_replace": 1, "topk_method": "greedy"},
        fields=dict(head_dim=12, num_moe_layers=2),
        # MLA without q LoRA (DeepSeek-V2-Lite): q 64*4*12 = 3,072; kv_a 64*12 + kv_b 8*4*16 = 1,280;
        #   o 2,048 -> 6,400; norms 2*64 + kv latent 8 = 136
        # dense layer 0: 6,400 + 136 + 24,576 = 31,112
        # MoE layers: 6,400 + 136 + 8 x 6,144 + shared 6,144 + router 64*8 (no bias) = 62,344
        # 31,112 + 2 x 62,344 + 12,800 + 64
        total=168_664,
        # MoE active: 6,400 + 136 + (2 + 1) x 6,144 + 512 = 25,480; 31,112 + 50,960 + 12,864
        active=94_936,
    ),
    dict(
        id="gemma2",
        config={"model_type": "gemma2", **BASE, "head_dim": 32},
        fields=dict(head_dim=32, activation="geglu", norm_placement="sandwich", tied_embeddings=True,
                    attention_window=4096, local_attention="sliding", full_attention_every=2),
        # head_dim 32 != 64/4: q 64*128 + k,v 2*64*64 + o 128*64 = 24,576; GeGLU 3*64*128 = 24,576;
        # 4 norms 256 -> 49,408 x 2 = 98,816; tied embedding 6,400; final norm 64
        total=105_280,
    ),
    dict(
        id="phi3",
        config={"model_type": "phi3", **BASE, "sliding_window": 2047},
        fields=dict(head_dim=16, attention_window=2047, full_attention_every=0, qkv_bias=False),
        # fused qkv_proj (64 x (64 + 2*32)) and gate_up_proj (64 x 2*128): llama's 86,848
        total=86_848,
    ),
    dict(
        id="olmo2",
        config={"model_type": "olmo2", **BASE},
        fields=dict(qk_norm=True, qk_norm_per_head=False, norm_placement="post", attention_window=0),
        # llama's layer with q_norm over q (64) and k_norm over k (2*16 = 32): norms 2*64 + 96 = 224
        # -> 37,088 x 2 = 74,176 + 12,800 + 64
        total=87_040,
    ),
    dict(
        id="llama4_text",
        config={"model_type": "llama4_text", **BASE, "head_dim": 16, "intermediate_size": 32,
                "intermediate_size_mlp": 128, "num_local_experts": 4, "num_experts_per_tok": 1,
                "interleave_moe_layer_step": 2},
        fields=dict(ffn_hidden_size=128, num_moe_layers=1, attention_window=8192, local_attention="chunked",
                    full_attention_every=4),
        # layer 0 dense: 12,288 + 128 + 3*64*128 = 36,992; layer 1 MoE: 12,288 + 128 + 4 experts x
        # 3*64*32 (6,144) + shared expert 6,144 + router 64*4 = 43,392; + 12,800 + 64
        total=93_248,
        # MoE active: 12,288 + 128 + 6,144 + 6,144 + 256 = 24,960; 36,992 + 24,960 + 12,864
        active=74_816,
    ),
    dict(
        id="nemotron",
        config={"model_type": "nemotron", "num_hidden_layers": 2, "hidden_size": 64,
                "intermediate_size": 256, "num_attention_heads": 4, "num_key_value_heads": 2,
                "vocab_size": 100},
        fields=dict(activation="relu2", norm="layernorm1p", rotary_percent=0.5, num_kv_heads=2,
                    tied_embeddings=False, max_position_embeddings=4096),
        # layer: attention 64·64 + 2·64·32 + 64·64 = 12,288, squared-ReLU MLP 2·64·256 = 32,768 (no
        # gate), two LayerNorm1p 4·64 = 256 -> 45,312 x 2 = 90,624; + embedding and untied head
        # 2·100·64 = 12,800 + final LayerNorm1p 128
        total=103_552,
    ),
    dict(
        id="gpt2",
        config={"model_type": "gpt2", "n_layer": 2, "n_embd": 64, "n_head": 4,
                "n_positions": 32, "vocab_size": 100},
        fields=dict(ffn_hidden_size=256, tied_embeddings=True, activation="gelu",
                    norm="layernorm", position_embedding="learned", linear_bias=True,
                    max_position_embeddings=32, seq_len=32),
        # layer 12*64^2 + 13*64 = 49,984 (attn 4h^2+4h, mlp 8h^2+5h, 2 LayerNorms 4h)
        # x 2 = 99,968; + tokens 100*64 + positions 32*64 + final LayerNorm 128
        total=108_544,
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[case["id"] for case in CASES])
def test_convert(case):
    spec = model_from_hf_config(case["config"], "test.json")
    for field, expected in case["fields"].items():
        assert getattr(spec, field) == expected, field
    assert spec.model_type == case["config"]["model_type"]
    assert count_params(spec).total == case["total"]
    assert count_params(spec).active == case.get("active", case["total"])


def test_every_supported_type_has_a_case():
    assert {case["config"]["model_type"] for case in CASES} == set(SUPPORTED_MODEL_TYPES)


def test_deepseek_mla_and_moe_fields():
    config = next(c["config"] for c in CASES if c["id"] == "deepseek_v3")
    spec = model_from_hf_config(config, "test.json")
    assert (spec.mla.q_lora_rank, spec.mla.kv_lora_rank, spec.mla.v_head_dim) == (16, 8, 8)
    moe = spec.moe
    assert (moe.num_experts, moe.num_shared_experts) == (8, 1)
    assert moe.shared_expert_ffn_hidden_size == 32
    assert (moe.num_dense_layers, moe.router_bias) == (1, True)
    greedy = model_from_hf_config({**config, "topk_method": "greedy"}, "test.json")
    assert greedy.moe.router_bias is False


def test_deepseek_null_q_lora_rank_means_plain_q_proj():
    config = next(c["config"] for c in CASES if c["id"] == "deepseek_v3")
    spec = model_from_hf_config({**config, "q_lora_rank": None}, "test.json")
    assert spec.mla.q_lora_rank == 0
    # q: 1,792 -> 64*4*12 = 3,072 per layer (+1,280); norms lose the 16-wide q_a_layernorm
    assert count_params(spec).total == 164_888 + 3 * (1_280 - 16)


def test_transformers_defaults():
    config = {"model_type": "qwen3", **BASE}
    del config["num_key_value_heads"]
    spec = model_from_hf_config(config, "test.json")
    assert spec.head_dim == 128  # Qwen3Config.head_dim default
    assert spec.num_kv_heads == 4  # defaults to num_attention_heads
    gpt2 = model_from_hf_config({"model_type": "gpt2", "n_layer": 1, "n_embd": 8,
                                 "n_head": 2, "vocab_size": 10}, "test.json")
    assert (gpt2.max_position_embeddings, gpt2.seq_len, gpt2.ffn_hidden_size) == (1024, 1024, 32)


def test_qwen3_moe_sparse_step_with_leading_dense_layer():
    config = next(c["config"] for c in CASES if c["id"] == "qwen3_moe")
    spec = model_from_hf_config({**config, "mlp_only_layers": [], "decoder_sparse_step": 2,
                                 "num_hidden_layers": 2}, "test.json")
    # layer 0: (0 + 1) % 2 != 0 -> dense; layer 1 -> MoE
    assert (spec.moe.num_dense_layers, spec.num_moe_layers) == (1, 1)


def test_null_values_count_as_absent():
    spec = model_from_hf_config({"model_type": "llama", **BASE, "head_dim": None,
                                 "num_key_value_heads": None}, "test.json")
    assert (spec.head_dim, spec.num_kv_heads) == (16, 4)


def test_name_precedence():
    config = {"model_type": "llama", **BASE}
    assert model_from_hf_config(config, "x").name == "llama"
    assert model_from_hf_config({**config, "_name_or_path": "org/m"}, "x").name == "org/m"
    named = {**config, "_name_or_path": "org/m", "name": "mine"}
    assert model_from_hf_config(named, "x").name == "mine"
    assert model_from_hf_config({**config, "name": "mine"}, "x", name="given").name == "given"


def test_autoplan_keys():
    config = {"model_type": "llama", **BASE, "name": "m", "aliases": ["a", "b"],
              "sources": ["somewhere"], "seq_len": 1024, "description": "text"}
    spec = model_from_hf_config(config, "x", strict=True)
    assert (spec.aliases, spec.sources, spec.seq_len) == (("a", "b"), ("somewhere",), 1024)


def test_user_config_may_hold_any_hf_keys():
    config = {"model_type": "llama", **BASE, "torch_dtype": "bfloat16", "rope_scaling": None,
              "architectures": ["LlamaForCausalLM"], "rope_theta": 500000.0}
    assert count_params(model_from_hf_config(config, "x")).total == 86_848


# --- bad input: (config, message fragments) ---------------------------------------------------

BAD_CONFIGS = [
    ({"model_type": "gemma3", **BASE}, ["test.json", "not supported", "did you mean 'gemma2'",
                                         "supported: llama, mistral, mixtral"]),
    ({"model_type": "llama4", **BASE}, ["test.json", "text_config", "language model"]),
    ({"model_type": "qwen2", **BASE, "use_sliding_window": True, "sliding_window": 4096},
     ["use_sliding_window: true is not supported", "max_window_layers"]),
    ({"model_type": "gemma2", **BASE, "layer_types": ["full_attention", "sliding_attention"]},
     ["layer_types", "full_attention on every n-th layer"]),
    ({"model_type": "gemma2", **BASE, "hidden_activation": "gelu"}, ["hidden_activation", "gelu_pytorch_tanh"]),
    ({"model_type": "llama4_text", **BASE, "num_hidden_layers": 4, "interleave_moe_layer_step": 2},
     ["only leading dense layers", "layers [0, 2] are dense", "interleave_moe_layer_step=2"]),
    ({"model_type": "llama4_text", **BASE, "no_rope_layers": [0, 1]},
     ["no_rope_layers must be the pattern of no_rope_layer_interval=4", "got [0, 1]"]),
    ({"model_type": "mistral", **BASE, "sliding_window": 0}, ["sliding_window", ">= 1", "got 0"]),
    ({**BASE}, ["missing required key 'model_type'"]),
    ({"model_type": "llama", **{k: v for k, v in BASE.items() if k != "hidden_size"}},
     ["test.json", "missing required key(s) hidden_size"]),
    ({"model_type": "mixtral", **BASE, "num_experts_per_tok": 2},
     ["missing required key 'num_local_experts'"]),
    ({"model_type": "llama", **BASE, "hidden_size": 0}, ["hidden_size", ">= 1", "got 0"]),
    ({"model_type": "llama", **BASE, "num_hidden_layers": -2}, ["num_hidden_layers", "got -2"]),
    ({"model_type": "llama", **BASE, "vocab_size": 100.5}, ["vocab_size", "expected an integer"]),
    ({"model_type": "llama", **BASE, "hidden_size": True}, ["hidden_size", "expected an integer"]),
    ({"model_type": "llama", **BASE, "hidden_size": "64"}, ["hidden_size", "expected an integer"]),
    ({"model_type": "llama", **BASE, "num_key_value_heads": 3},
     ["test.json", "multiple of num_kv_heads", "(4, 3)"]),
    ({"model_type": "llama", **BASE, "hidden_size": 66},
     ["multiple of num_attention_heads", "(66, 4)", "head_dim"]),
    ({"model_type": "llama", **BASE, "tie_word_embeddings": "yes"},
     ["tie_word_embeddings", "true or false"]),
    ({"model_type": "llama", **BASE, "mlp_bias": True}, ["mlp_bias", "attention_bias"]),
    ({"model_type": "mixtral", **BASE, "num_local_experts": 2, "num_experts_per_tok": 3},
     ["num_experts_per_token <= num_experts", "(3, 2)"]),
    ({"model_type": "qwen3_moe", **BASE, "num_hidden_layers": 4, "num_experts": 4,
      "num_experts_per_tok": 2, "moe_intermediate_size": 32, "decoder_sparse_step": 2},
     ["leading dense layers", "[0, 2]", "decoder_sparse_step=2"]),
    ({"model_type": "deepseek_v3", **BASE, "kv_lora_rank": 8, "qk_rope_head_dim": 4,
      "qk_nope_head_dim": 8, "v_head_dim": 8, "n_routed_experts": 4, "n_shared_experts": 1,
      "num_experts_per_tok": 2, "moe_intermediate_size": 8, "first_k_dense_replace": 1},
     ["missing required key 'q_lora_rank'"]),
    ({"model_type": "gpt2", "n_layer": 1, "n_embd": 8, "n_head": 2, "vocab_size": 10,
      "n_positions": 16, "seq_len": 32}, ["seq_len <= n_positions", "(32, 16)"]),
    ({"model_type": "llama", **BASE, "aliases": "x"}, ["aliases", "list of non-empty strings"]),
    ({"model_type": "llama", **BASE, "name": ""}, ["name", "non-empty string"]),
]


@pytest.mark.parametrize("config, fragments", BAD_CONFIGS)
def test_bad_config(config, fragments):
    with pytest.raises(SpecError) as info:
        model_from_hf_config(config, "test.json")
    for fragment in fragments:
        assert fragment in str(info.value)
    assert isinstance(info.value, ValueError)


def test_strict_refuses_unknown_keys_with_did_you_mean():
    config = {"model_type": "llama", **BASE, "num_hiden_layers": 2}
    with pytest.raises(SpecError, match="unknown key 'num_hiden_layers' "
                                        r"\(did you mean 'num_hidden_layers'\?\)"):
        model_from_hf_config(config, "model_db/x.yaml", strict=True)
    with pytest.raises(SpecError, match="unknown key 'torch_dtype'"):
        model_from_hf_config({"model_type": "llama", **BASE, "torch_dtype": "bf16"}, "x",
                             strict=True)


# --- files ------------------------------------------------------------------------------------

BAD_FILES = [
    ("config.json", b'{"model_type": "llama",', "invalid JSON at line 1"),
    ("config.json", b"", "file is empty"),
    ("config.json", b"  \n", "file is empty"),
    ("config.json", b'{"model_type": "llama", "name": "\xff\xfe"}', "not UTF-8"),
    ("config.json", b"[1, 2]", "expected a mapping"),
    ("model.yaml", b"model_type: [llama\n", "invalid YAML"),
]


@pytest.mark.parametrize("filename, content, message", BAD_FILES)
def test_bad_file(tmp_path, filename, content, message):
    path = tmp_path / filename
    path.write_bytes(content)
    with pytest.raises(SpecError, match=message) as info:
        load_model(str(path))
    assert str(path) in str(info.value)


def test_user_config_json_file(tmp_path):
    folder = tmp_path / "My-Model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "llama", **BASE,
                                                    "torch_dtype": "bfloat16"}))
    spec = load_model(str(folder / "config.json"))
    assert (spec.name, count_params(spec).total) == ("My-Model", 86_848)
    assert load_model(str(folder)).name == "My-Model"  # a folder means its config.json


def test_missing_field_in_file_names_field_and_file(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "qwen3", "hidden_size": 64}))
    with pytest.raises(SpecError) as info:
        load_model(str(path))
    assert str(path) in str(info.value)
    assert "missing required key" in str(info.value)


def test_missing_file(tmp_path):
    with pytest.raises(AutoplanError, match="cannot read file"):
        load_model(str(tmp_path / "nope" / "config.json"))


def test_nemotron_reads_its_own_keys_and_refuses_another_activation():
    config = next(c["config"] for c in CASES if c["id"] == "nemotron")
    spec = model_from_hf_config({**config, "partial_rotary_factor": 0.25, "norm_eps": 1e-6}, "test.json")
    assert (spec.rotary_percent, spec.norm_eps) == (0.25, 1e-6)
    with pytest.raises(SpecError, match="hidden_act must be 'relu2'"):
        model_from_hf_config({**config, "hidden_act": "silu"}, "test.json")
    with pytest.raises(SpecError, match="partial_rotary_factor"):
        model_from_hf_config({**config, "partial_rotary_factor": 0}, "test.json")
