"""spec -> YAML -> spec round-trips, over random valid specs (hypothesis).

ModelSpec: ``model_to_hf_config`` writes the HF ``config.json`` fields of every model_type and
``model_from_hf_config`` (strict, as for a preset) reads the same spec back after a YAML dump.
GPUSpec: ``gpu_to_mapping`` writes each quantity with its unit and ``gpu_from_mapping`` reads
back the same floats to the last bit. Random specs are built valid for their model_type (e.g.
qwen2 always has q/k/v biases, mixtral's experts are as wide as its MLP).
"""

from __future__ import annotations

import dataclasses
import os

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autoplan.errors import SpecError
from autoplan.specs.hardware import GPUSpec, gpu_from_mapping, gpu_to_mapping, list_gpus
from autoplan.specs.hf_config import SUPPORTED_MODEL_TYPES, model_from_hf_config
from autoplan.specs.hf_config_writer import model_to_hf_config
from autoplan.specs.model import MLASpec, ModelSpec, MoESpec
from autoplan.specs.models import list_models

FAST = settings(max_examples=int(os.environ.get("AUTOPLAN_PROPERTY_EXAMPLES", "40")), deadline=None,
                suppress_health_check=[HealthCheck.too_slow])

# Names: any printable text without surrounding blanks (the readers strip names).
TEXT = st.text(st.characters(exclude_categories=("Cs", "Cc", "Cf", "Zl", "Zp")), min_size=1, max_size=20) \
    .filter(lambda s: s == s.strip() and s)
SIZE = st.integers(1, 1 << 16)


def _through_yaml(data: dict) -> dict:
    return yaml.safe_load(yaml.safe_dump(data, allow_unicode=True, sort_keys=False))


@st.composite
def moe_specs(draw, num_layers: int, *, shared: bool, dense: bool, router: bool,
              expert_ffn: int | None = None) -> MoESpec:
    experts = draw(st.integers(1, 256))
    num_shared = draw(st.integers(0, 2)) if shared else 0
    width = expert_ffn or draw(SIZE)
    return MoESpec(num_experts=experts, num_experts_per_token=draw(st.integers(1, experts)),
                   expert_ffn_hidden_size=width, num_shared_experts=num_shared,
                   shared_expert_ffn_hidden_size=width if num_shared else 0,
                   num_dense_layers=draw(st.integers(0, num_layers)) if dense else 0,
                   router_bias=draw(st.booleans()) if router else False)


@st.composite
def model_specs(draw, model_type: str) -> ModelSpec:
    """A valid ModelSpec that a ``model_type`` config.json can express."""
    kv = draw(st.integers(1, 16))
    heads = kv * draw(st.integers(1, 8))
    head_dim = draw(st.integers(1, 256))
    fields = dict(model_type=model_type, name=draw(TEXT), aliases=tuple(draw(st.lists(TEXT, max_size=3))),
                  sources=tuple(draw(st.lists(TEXT, max_size=2))), num_layers=draw(st.integers(1, 128)),
                  hidden_size=draw(SIZE), ffn_hidden_size=draw(SIZE), num_attention_heads=heads,
                  num_kv_heads=kv, head_dim=head_dim, vocab_size=draw(st.integers(1, 1 << 18)),
                  tied_embeddings=draw(st.booleans()), max_position_embeddings=draw(st.integers(1, 1 << 20)),
                  seq_len=draw(st.integers(1, 1 << 20)))
    qkv, linear = draw(st.sampled_from([(False, False), (True, False), (False, True)]))
    layers = fields["num_layers"]
    if model_type in ("llama", "nemotron"):
        fields.update(qkv_bias=qkv, linear_bias=linear)
    if model_type in ("gemma2", "olmo2", "llama4_text"):
        fields.update(qkv_bias=draw(st.booleans()))
    if model_type in ("mistral", "mixtral", "phi3", "gemma2", "llama4_text"):
        window = draw(st.sampled_from([0, 1, 2047, 4096, 8192]))
        every = (draw(st.integers(1, 6)) if model_type == "llama4_text" else 2 if model_type == "gemma2" else 0)
        if window:
            fields.update(attention_window=window, full_attention_every=every,
                          local_attention="chunked" if model_type == "llama4_text" else "sliding")
    if model_type == "gemma2":
        fields.update(activation="geglu", norm_placement="sandwich",
                      other_features=(("final_logit_softcapping", 30.0), ("query_pre_attn_scalar", 256)))
    elif model_type == "olmo2":
        fields.update(qk_norm=True, qk_norm_per_head=False, norm_placement="post")
    elif model_type == "phi3":
        fields.update(rotary_percent=draw(st.sampled_from([0.5, 1.0])))
    if model_type == "nemotron":
        fields.update(activation="relu2", norm="layernorm1p",
                      rotary_percent=draw(st.sampled_from([0.25, 0.5, 1.0])))
    elif model_type == "qwen2":
        fields.update(qkv_bias=True)
    elif model_type in ("qwen3", "qwen3_moe"):
        fields.update(qkv_bias=draw(st.booleans()), qk_norm=True)
    if model_type == "mixtral":
        fields["moe"] = draw(moe_specs(layers, shared=False, dense=False, router=False,
                                       expert_ffn=fields["ffn_hidden_size"]))
    elif model_type == "qwen3_moe":
        fields["moe"] = draw(moe_specs(layers, shared=False, dense=True, router=False))
    elif model_type == "llama4_text":
        moe = draw(moe_specs(layers, shared=False, dense=False, router=False))
        width = moe.expert_ffn_hidden_size
        fields["moe"] = dataclasses.replace(moe, num_shared_experts=1, shared_expert_ffn_hidden_size=width,
                                            num_dense_layers=draw(st.integers(0, layers - 1)),
                                            score_function="sigmoid", normalize_topk=False, aux_loss_coeff=0.001)
    elif model_type in ("deepseek_v2", "deepseek_v3"):
        v3 = model_type == "deepseek_v3"
        fields["moe"] = draw(moe_specs(layers, shared=True, dense=True, router=v3))
        if not v3:  # DeepSeek-V2's defaults: softmax, no renormalisation, no scaling, greedy
            fields["moe"] = dataclasses.replace(fields["moe"], normalize_topk=False, aux_loss_coeff=0.001,
                                                aux_loss_per_sequence=True)
        mla = MLASpec(q_lora_rank=draw(st.integers(0, 4096)), kv_lora_rank=draw(SIZE),
                      qk_rope_head_dim=draw(st.integers(1, 128)), qk_nope_head_dim=draw(st.integers(1, 256)),
                      v_head_dim=draw(st.integers(1, 256)))
        fields.update(mla=mla, head_dim=mla.qk_rope_head_dim + mla.qk_nope_head_dim)
    elif model_type == "gpt2":
        positions = fields["max_position_embeddings"]
        fields.update(hidden_size=heads * head_dim, num_kv_heads=heads, activation="gelu", norm="layernorm",
                      position_embedding="learned", linear_bias=True,
                      seq_len=draw(st.integers(1, positions)))
    return ModelSpec(**fields)


@pytest.mark.parametrize("model_type", SUPPORTED_MODEL_TYPES)
@FAST
@given(data=st.data())
def test_model_spec_round_trips_through_hf_config_yaml(model_type, data):
    spec = data.draw(model_specs(model_type))
    config = model_to_hf_config(spec)
    back = model_from_hf_config(_through_yaml(config), "round-trip.yaml", strict=True)
    assert back == spec
    assert back.sources == spec.sources  # not part of ModelSpec equality
    assert config["model_type"] == model_type


def test_every_preset_round_trips():
    for spec in list_models():
        assert model_from_hf_config(_through_yaml(model_to_hf_config(spec)), spec.name, strict=True) == spec


def test_a_spec_its_model_type_cannot_express_is_refused():
    spec = next(m for m in list_models() if m.model_type == "llama")
    with pytest.raises(SpecError, match="a llama config.json cannot express qk_norm=True"):
        model_to_hf_config(dataclasses.replace(spec, qk_norm=True))


def _quantity(limit: float, low: float = 1e-3):
    return st.floats(min_value=low, max_value=limit, allow_nan=False, allow_infinity=False)


@st.composite
def gpu_specs(draw) -> GPUSpec:
    """A valid GPUSpec within the readers' plausibility limits (1 PiB, 1 EFLOP/s, 1 PB/s, 1 s,
    10,000 Texp/s)."""
    memory = draw(_quantity(2.0**50, 1.0))
    return GPUSpec(
        name=draw(TEXT), aliases=tuple(draw(st.lists(TEXT, max_size=3))), description=draw(st.just("") | TEXT),
        memory_bytes=memory, usable_memory_bytes=memory * draw(st.floats(1e-6, 1.0)),
        peak_bf16_flops_per_s=draw(_quantity(1e18, 1.0)),
        peak_fp8_flops_per_s=draw(st.just(0.0) | _quantity(1e18, 1.0)),
        hbm_bytes_per_s=draw(_quantity(1e15, 1.0)), scale_up_bytes_per_s=draw(_quantity(1e15, 1.0)),
        scale_up_domain_size=draw(st.integers(1, 1 << 16)), nic_bytes_per_s=draw(_quantity(1e15, 1.0)),
        gpus_per_node=draw(st.integers(1, 1024)), scale_up_latency_s=draw(_quantity(1.0, 1e-12)),
        scale_out_latency_s=draw(_quantity(1.0, 1e-12)), sources=tuple(draw(st.lists(TEXT, min_size=1, max_size=3))),
        power_limited_clock_fraction=draw(st.just(1.0) | st.floats(1e-3, 1.0)),
        exp_ops_per_s=draw(st.just(0.0) | _quantity(1e16, 1.0)),
        host_launch_slowdown=draw(st.just(1.0) | st.floats(0.1, 10.0)))


@FAST
@given(gpu=gpu_specs())
def test_gpu_spec_round_trips_through_yaml(gpu):
    assert gpu_from_mapping(_through_yaml(gpu_to_mapping(gpu)), "round-trip.yaml") == gpu


def test_presets_are_written_in_their_own_units():
    h100 = next(g for g in list_gpus() if g.name == "h100-sxm")
    data = gpu_to_mapping(h100)
    assert data["memory"] == "80 GiB"
    assert data["scale_up_bandwidth"] == "450 GB/s per direction"
    assert data["nic_bandwidth"].endswith(" per direction")
    for gpu in list_gpus():
        assert gpu_from_mapping(_through_yaml(gpu_to_mapping(gpu)), gpu.name) == gpu
