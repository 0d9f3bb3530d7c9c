"""Exports carry the model's own settings (RoPE, norm epsilon, token ids, MoE routing), the
overlap the time model assumed, and the start-up fixes of issue 19 (AutoEP, flash attention,
meta-device initialisation, data blends). Expected values are read from the Hugging Face config
files or written out from the trainers' argument rules, never from the renderers."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import yaml

from autoplan.api import plan_from_record
from autoplan.export import ExportError, LaunchOptions, TrainerRuleError, architecture_problem, render
from autoplan.export.megatron import overlap_args
from autoplan.profiles.efficiency import PhysicalEfficiency
from autoplan.profiles import load_profile
from autoplan.specs.models import load_model
from tests.unit.export.test_roundtrip import bash_words, flags

HF = Path(__file__).resolve().parents[2] / "golden" / "export" / "hf_configs"
QWEN = HF / "qwen2.5-7b.json"


def _megatron_flags(model, values, launch=None):
    launch = launch or LaunchOptions()
    script = render("megatron", model, *plan_from_record(values), launch).files["megatron_pretrain_gpt.sh"]
    return flags(bash_words(script)), bash_words(script)


def test_qwen_config_reaches_nanotron_and_megatron():
    config = json.loads(QWEN.read_text())
    model = load_model(QWEN)
    layout = {"gpus": 8, "tp": 2, "zero": 1, "seq_len": 4096, "gbs_seqs": 32}
    text = render("nanotron", model, *plan_from_record(layout)).files["nanotron_config.yaml"]
    got = yaml.safe_load(text)["model"]["model_config"]
    assert got["rope_theta"] == config["rope_theta"] == 1e6
    assert got["rms_norm_eps"] == config["rms_norm_eps"] == 1e-6
    assert got["bos_token_id"] == got["eos_token_id"] == config["bos_token_id"] == 151643
    f, _ = _megatron_flags(model, layout)
    assert f["--rotary-base"] == "1000000" and float(f["--norm-epsilon"]) == 1e-6
    assert "--add-qkv-bias" in f  # Qwen2's q/k/v biases


def test_deepseek_routing_reaches_megatron():
    """DeepSeek-V3 config.json: sigmoid scores, 8 groups of which 4, scaling 2.5, expert bias,
    sequence-wise balance loss 0.001; YaRN factor 40 (MLA's rope type)."""
    values = {"gpus": 64, "pp": 8, "ep": 8, "zero": 1, "seq_len": 4096, "gbs_seqs": 64}
    f, _ = _megatron_flags(load_model("deepseek-v3"), values)
    assert f["--moe-router-score-function"] == "sigmoid"
    assert (f["--moe-router-num-groups"], f["--moe-router-group-topk"]) == ("8", "4")
    assert float(f["--moe-router-topk-scaling-factor"]) == 2.5
    assert "--moe-router-enable-expert-bias" in f and "--moe-router-pre-softmax" not in f
    assert f["--moe-router-load-balancing-type"] == "seq_aux_loss" and float(f["--moe-aux-loss-coeff"]) == 0.001
    assert float(f["--rotary-scaling-factor"]) == 40.0
    assert f["--mtp-num-layers"] == "1"  # num_nextn_predict_layers: 1 (model_db/deepseek-v3.yaml)


def test_mtp_is_a_flag_with_a_layout_warning():
    """DeepSeek-V3's MTP depth is costed on the last stage and written as --mtp-num-layers; the
    warning reminds that a hand-written pipeline layout must place it too."""
    values = {"gpus": 64, "pp": 8, "ep": 8, "zero": 1, "seq_len": 4096, "gbs_seqs": 64}
    result = render("megatron", load_model("deepseek-v3"), *plan_from_record(values))
    assert any("--mtp-num-layers 1" in w for w in result.warnings)
    assert "--mtp-num-layers 1" in next(iter(result.files.values()))


@pytest.mark.parametrize(("model", "pre_softmax"), [("mixtral-8x7b", False), ("qwen3-30b-a3b", False)])
def test_softmax_routers_renormalise_topk(model, pre_softmax):
    """Mixtral and Qwen3-30B-A3B (norm_topk_prob true) renormalise the top-k weights: Megatron's
    default softmax-after-top-k, no --moe-router-pre-softmax."""
    f, _ = _megatron_flags(load_model(model), {"gpus": 8, "ep": 8, "zero": 1, "seq_len": 4096, "gbs_seqs": 8})
    assert ("--moe-router-pre-softmax" in f) == pre_softmax


def test_nanotron_warns_about_routing_it_cannot_express():
    result = render("nanotron", load_model("mixtral-8x7b"),
                    *plan_from_record({"gpus": 8, "zero": 1, "seq_len": 4096, "gbs_seqs": 8}))
    assert any("renormalised top-k" in w and "balance loss of weight 0.02" in w for w in result.warnings)


def _eff(**overlaps) -> PhysicalEfficiency:
    base = {"gemm_efficiency_max": 0.6, "gemm_half_flops": 1e11, "attention_efficiency": 0.45, "attention_half_seq_tokens": 0.0, "attention_half_head_dim": 0.0, "fp8_gemm_speedup": 1.4,
                "elementwise_bytes_per_token_hidden": 40.0, "hbm_efficiency": 0.8, "scale_up_efficiency": 0.75,
                "scale_out_efficiency": 0.8, "tp_overlap": 0.0, "cp_overlap": 0.8, "ep_overlap": 0.0, "pp_overlap": 0.5,
                "dp_overlap": 0.9, "fsdp_overlap": 0.8, "moe_layer_fixed_s": 0.0, "host_launch_s": 0.0}
    return PhysicalEfficiency(**{**base, **overlaps})


@pytest.mark.parametrize(("values", "overlaps", "expected"), [
    # ZeRO-1 with dp > 1: reduce-scatter and all-gather both overlapped (validate_args: the
    # all-gather overlap needs the distributed optimizer and --overlap-grad-reduce)
    ({"gpus": 16, "tp": 2, "zero": 1}, {}, ["--overlap-grad-reduce", "--overlap-param-gather"]),
    ({"gpus": 16, "tp": 2, "zero": 0}, {}, ["--overlap-grad-reduce"]),  # DDP: no parameter gather
    ({"gpus": 2, "tp": 2, "zero": 1}, {}, []),  # dp = 1: nothing to reduce
    ({"gpus": 16, "tp": 2, "zero": 1}, {"dp_overlap": 0.0}, []),  # the profile assumes none
    ({"gpus": 16, "tp": 2, "zero": 1}, {"dp_overlap": 0.0, "tp_overlap": 0.5}, ["--tp-comm-overlap"]),
    ({"gpus": 16, "tp": 2, "zero": 1, "sp": False}, {"dp_overlap": 0.0, "tp_overlap": 0.5}, []),  # needs sp
])
def test_overlap_flags_follow_the_profile(values, overlaps, expected):
    layout, _ = plan_from_record({"seq_len": 4096, "gbs_seqs": 64, **values})
    assert [flag for flag, _ in overlap_args(layout, _eff(**overlaps), load_profile("megatron"))] == expected


def test_megatron_fsdp_builds_on_the_meta_device():
    f, _ = _megatron_flags(load_model("llama3-70b"), {"gpus": 64, "zero": 3, "seq_len": 8192, "gbs_seqs": 64})
    assert {"--use-megatron-fsdp", "--init-model-with-meta-device", "--overlap-param-gather"} <= set(f)


@pytest.mark.parametrize(("data_path", "words"), [
    ("0.7 /data/a 0.3 /data/b", ["0.7", "/data/a", "0.3", "/data/b"]),  # a blend: four words
    ("/data/my set/prefix", ["/data/my set/prefix"]),  # a path with a space: one word
])
def test_megatron_data_blend_is_several_words(data_path, words):
    _, all_words = _megatron_flags(load_model("llama3-8b"), {"gpus": 8, "seq_len": 4096, "gbs_seqs": 8},
                                   LaunchOptions(data_path=data_path))
    start = all_words.index("--data-path") + 1
    assert all_words[start:start + len(words)] == words


def _deepseek_without_mtp():
    """DeepSeek-V3 without its MTP layer: what DeepSpeed can train (export.deepspeed.check_architecture)."""
    return dataclasses.replace(load_model("deepseek-v3"), num_mtp_layers=0)


def test_deepspeed_refuses_a_model_with_mtp():
    """transformers' DeepseekV3ForCausalLM builds no MTP module (tests/trainers/test_param_counts.py)
    and Megatron-DeepSpeed has none: the plan's MTP would not run, so neither path exports it."""
    plain = {"gpus": 16, "ep": 8, "zero": 3, "seq_len": 4096, "gbs_seqs": 16}
    with pytest.raises(ExportError, match="1 MTP layer"):
        render("deepspeed", load_model("deepseek-v3"), *plan_from_record(plain))
    assert "MTP" in architecture_problem("deepspeed", load_model("deepseek-v3"))
    assert architecture_problem("deepspeed", _deepseek_without_mtp()) == ""


def test_megatron_deepspeed_refuses_what_its_gpt_model_cannot_build():
    """Megatron-DeepSpeed's GPT model (tp or pp > 1) has no latent attention and MoE layers of
    --ffn-hidden-size experts only: DeepSeek-V3 without MTP (MLA, a shared expert, 3 dense layers,
    2048-wide experts beside ffn 18432) and Qwen3 30B-A3B (768-wide experts beside 6144) are refused
    by the rule table, Mixtral (experts as wide as ffn) is not."""
    mds = plan_from_record({"gpus": 16, "tp": 2, "zero": 1, "seq_len": 4096, "gbs_seqs": 16})
    with pytest.raises(TrainerRuleError, match="latent attention .MLA., shared experts, dense leading layers"):
        render("deepspeed", _deepseek_without_mtp(), *mds)
    with pytest.raises(TrainerRuleError, match="experts 768 wide beside ffn 6144"):
        render("deepspeed", load_model("qwen3-30b-a3b"), *mds)
    assert render("deepspeed", load_model("mixtral-8x7b"), *mds).files


def test_deepspeed_moe_uses_autoep_without_megatron():
    """Plain DeepSpeed (tp = pp = 1): AutoEP in the JSON, which ZeRO-3 accepts (engine.py)."""
    layout = plan_from_record({"gpus": 16, "ep": 8, "zero": 3, "seq_len": 4096, "gbs_seqs": 16})
    result = render("deepspeed", _deepseek_without_mtp(), *layout)
    config = json.loads(result.files["deepspeed_config.json"])
    assert config["expert_parallel"] == {"enabled": True, "autoep_size": 8, "expert_tensor_parallel_size": 1,
                                         "preset_model": "deepseek_v3", "route_norm": True}  # norm_topk_prob
    assert not any("model code" in w for w in result.warnings)


def test_deepspeed_refuses_zero3_with_megatron_deepspeed_moe():
    layout = plan_from_record({"gpus": 16, "tp": 2, "ep": 8, "zero": 3, "seq_len": 4096, "gbs_seqs": 16})
    with pytest.raises(TrainerRuleError, match="native MoE"):
        render("deepspeed", load_model("mixtral-8x7b"), *layout)


def test_megatron_deepspeed_uses_flash_attention_unless_eager():
    layout, training = plan_from_record({"gpus": 16, "tp": 2, "seq_len": 4096, "gbs_seqs": 16,
                                         "recompute": "selective"})
    script = render("deepspeed", load_model("llama3-8b"), layout, training).files["deepspeed_launch.sh"]
    f = flags(bash_words(script))
    assert "--use-flash-attn-v2" in f and "--recompute-granularity" not in f
    assert f["--rotary-position-embeddings-theta"] == "500000"


def test_torchtitan_fp8_keeps_head_and_router_in_bf16_and_warns_for_experts():
    layout = plan_from_record({"gpus": 32, "ep": 8, "zero": 3, "mbs": 2, "seq_len": 4096, "gbs_seqs": 256,
                               "precision": "fp8"})
    result = render("torchtitan", load_model("qwen3-30b-a3b"), *layout)
    assert "filter_fqns=['lm_head', 'router.gate']" in result.files["torchtitan_autoplan.py"]
    assert 'filter_fqns = ["output", "router.gate"]' in result.files["torchtitan_job.toml"]
    assert any("experts (grouped GEMMs) stay BF16" in w for w in result.warnings)


def test_torchtitan_deepseek_with_cp_writes_no_v022_toml():
    layout = plan_from_record({"gpus": 64, "pp": 4, "cp": 2, "ep": 8, "zero": 3, "seq_len": 4096, "gbs_seqs": 64})
    result = render("torchtitan", load_model("deepseek-v3"), *layout)
    assert "torchtitan_job.toml" not in result.files and "torchtitan_autoplan.py" in result.files
    assert any("only supports SDPA" in w for w in result.warnings)


def test_megatron_writes_nemotron_architecture_and_deepspeed_refuses_it():
    """Nemotron-4 (NeMo NemotronConfig: squared_relu, layernorm_zero_centered_gamma, rotary_percent
    0.5) needs Megatron's --squared-relu, --apply-layernorm-1p and --rotary-percent; the
    Megatron-DeepSpeed export writes none of them and refuses the model."""
    from autoplan.export.common import ExportError
    from autoplan.export.deepspeed import _mds_model_args
    from autoplan.export.megatron_model import architecture_args
    from autoplan.api import build_training
    from autoplan.layout import resolve_layout

    model = load_model("nemotron-4-15b")
    args = dict(architecture_args(model))
    assert args["--normalization"] == "LayerNorm" and "--apply-layernorm-1p" in args
    assert "--squared-relu" in args and "--swiglu" not in args and args["--rotary-percent"] == 0.5
    assert "--squared-relu" not in dict(architecture_args(load_model("llama3-8b")))
    with pytest.raises(ExportError, match="relu2 MLP"):
        training = build_training(8, 4096, 8)
        _mds_model_args(model, resolve_layout({}, training), training)


def test_mla_keeps_its_q_and_kv_norms_in_megatron():
    """DeepSeek-V3's q_a_layernorm and kv_a_layernorm: Megatron-LM core_v0.15.3 builds MLA's
    linear_q_up_proj / linear_kv_up_proj as LayerNormLinear only with --qk-layernorm
    (gpt_layer_specs.py); without it the norms are identity."""
    model = load_model("deepseek-v3")
    assert model.mla is not None and not model.qk_norm
    _, words = _megatron_flags(model, dict(gpus=256, tp=2, ep=32, zero=1, seq_len=4096, gbs_seqs=1024))
    assert words.count("--qk-layernorm") == 1


DEEPSEEK_EP = {"gpus": 64, "ep": 8, "zero": 3, "seq_len": 4096, "gbs_seqs": 64}


def test_torchtitan_writes_deepseek_norm_eps_and_mtp():
    """DeepSeek-V3's rms_norm_eps is 1e-6 and num_nextn_predict_layers 1 (config.json); torchtitan
    0.3.0's 671B flavor builds its norms at RMSNorm's default 1e-5 and no MTP unless
    model_registry(num_mtp_layers=) is given, trained with MTPLoss (config_registry.py)."""
    files = render("torchtitan", load_model("deepseek-v3"), *plan_from_record(DEEPSEEK_EP)).files
    module = files["torchtitan_autoplan.py"]
    assert "_deepseek_v3.model_registry('671B', converters=None, num_mtp_layers=1)" in module
    assert "    _norm_eps(model_spec.model, 1e-06)\n" in module and "config.eps = eps" in module
    assert "loss=MTPLoss.Config(global_vocab_size=decoder_vocab_size(model_spec))" in module
    toml = files["torchtitan_job.toml"]
    assert "norm eps 1e-05 (the model's 1e-06" in toml and "has no MTP" in toml  # 0.2.2 cannot: warned
    llama = render("torchtitan", load_model("llama3-8b"), *plan_from_record(DEEPSEEK_EP | {"ep": 1})).files
    assert "_norm_eps" not in llama["torchtitan_autoplan.py"]  # 1e-5, the flavor's own


def test_deepspeed_autoep_writes_route_norm_and_warns_about_the_expert_bias():
    """AutoEP's deepseek_v3 preset has route_norm False and no load_balance_coeff (DeepSpeed 0.19.8
    auto_ep_presets/deepseek_v3.py); DeepSeek-V3 renormalises its top-k weights (norm_topk_prob)."""
    result = render("deepspeed", _deepseek_without_mtp(), *plan_from_record(DEEPSEEK_EP))
    section = json.loads(result.files["deepspeed_config.json"])["expert_parallel"]
    assert section["preset_model"] == "deepseek_v3" and section["route_norm"] is True
    assert any("e_score_correction_bias" in w and "nothing updates it" in w for w in result.warnings)
    mixtral = render("deepspeed", load_model("mixtral-8x7b"), *plan_from_record(DEEPSEEK_EP))
    assert "route_norm" not in json.loads(mixtral.files["deepspeed_config.json"])["expert_parallel"]
