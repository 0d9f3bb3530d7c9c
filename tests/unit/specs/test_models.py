"""The model registry: presets load, aliases resolve, names never collide."""

from __future__ import annotations

import pytest

from autoplan.cost.params import count_params
from autoplan.errors import SpecError, UnknownNameError
from autoplan.paths import data_dir
from autoplan.specs.models import build_index, list_models, load_model, read_presets

PRESET_FILES = sorted(data_dir("model_db").glob("*.yaml"))
PRESET_NAMES = [path.stem for path in PRESET_FILES]

REQUIRED_PRESETS = {
    "llama3-8b", "llama3-70b", "llama3.1-405b", "llama3.2-1b", "llama2-7b", "llama2-70b",
    "mixtral-8x7b", "mixtral-8x22b", "qwen3-8b", "qwen3-30b-a3b", "qwen3-235b-a22b",
    "deepseek-v3", "gpt3-175b", "usp-1b", "usp-8b",
}

# (alias, preset) pairs the rest of autoplan and its users rely on.
ALIASES = [("8b", "llama3-8b"), ("llama3.1-8b", "llama3-8b"), ("70b", "llama3-70b"),
           ("llama3.1-70b", "llama3-70b"), ("405b", "llama3.1-405b"),
           ("llama3-405b", "llama3.1-405b")]

# Default training sequence length of each family.
SEQ_LENS = {"llama3-8b": 8192, "llama3-70b": 8192, "llama3.1-405b": 8192, "llama3.2-1b": 8192,
            "llama2-7b": 4096, "llama2-70b": 4096, "mixtral-8x7b": 4096, "mixtral-8x22b": 4096,
            "qwen3-8b": 4096, "qwen3-30b-a3b": 4096, "qwen3-235b-a22b": 4096,
            "deepseek-v3": 4096, "gpt3-175b": 2048, "usp-1b": 4096, "usp-8b": 4096}


@pytest.mark.parametrize("name", PRESET_NAMES)
def test_every_preset_loads(name):
    spec = load_model(name)
    assert spec.name == name
    assert spec.sources and all(source.strip() for source in spec.sources)
    assert count_params(spec).total > 0


def test_required_presets_exist():
    assert REQUIRED_PRESETS <= set(PRESET_NAMES)


def test_list_models_is_sorted_and_complete():
    names = [spec.name for spec in list_models()]
    assert names == sorted(PRESET_NAMES)


@pytest.mark.parametrize("alias, name", ALIASES)
def test_aliases_resolve(alias, name):
    assert load_model(alias).name == name
    assert load_model(alias.upper()).name == name
    assert load_model(f"  {alias} ").name == name


def test_every_declared_alias_resolves():
    for spec in list_models():
        for alias in spec.aliases:
            assert load_model(alias) is spec


def test_names_and_aliases_do_not_collide():
    specs = list_models()
    keys = [key.lower() for spec in specs for key in (spec.name, *spec.aliases)]
    assert len(keys) == len(set(keys))
    assert len(build_index({spec.name: spec for spec in specs})) == len(keys)


@pytest.mark.parametrize("name, seq_len", SEQ_LENS.items())
def test_default_seq_len(name, seq_len):
    assert load_model(name).seq_len == seq_len


def test_architecture_flags():
    assert load_model("qwen3-8b").qk_norm
    assert load_model("qwen3-30b-a3b").moe.num_dense_layers == 0
    deepseek = load_model("deepseek-v3")
    assert deepseek.mla is not None and deepseek.moe.router_bias
    assert (deepseek.moe.num_dense_layers, deepseek.moe.num_shared_experts) == (3, 1)
    gpt3 = load_model("gpt3-175b")
    assert (gpt3.activation, gpt3.norm, gpt3.position_embedding) == ("gelu", "layernorm", "learned")
    assert gpt3.tied_embeddings and gpt3.linear_bias
    usp_1b, usp_8b = load_model("usp-1b"), load_model("usp-8b")
    assert usp_1b.tied_embeddings and not usp_8b.tied_embeddings
    assert usp_1b.num_kv_heads == usp_1b.num_attention_heads == 32
    assert usp_8b.vocab_size == usp_1b.vocab_size == 131072
    real_1b = load_model("llama3.2-1b")
    assert (real_1b.num_kv_heads, real_1b.head_dim, real_1b.tied_embeddings) == (8, 64, True)


def test_presets_are_cached():
    assert load_model("8b") is load_model("llama3-8b")


def test_unknown_name_suggests_the_near_miss():
    with pytest.raises(UnknownNameError, match=r"unknown model 'llama3-8c' \(did you mean "
                                               r"'llama3-8b'\?\)") as info:
        load_model("llama3-8c")
    assert "8b" in info.value.known and "llama3-8b" in info.value.known
    with pytest.raises(UnknownNameError, match="did you mean 'mixtral-8x7b'"):
        load_model("Mixtral-8x7")


# --- a folder of presets with mistakes -------------------------------------------------------

LLAMA_BODY = ("model_type: llama\nnum_hidden_layers: 2\nhidden_size: 64\nintermediate_size: 128\n"
              "num_attention_heads: 4\nvocab_size: 100\nsources: [test]\n")


def _write(folder, name, extra=""):
    (folder / f"{name}.yaml").write_text(f"name: {name}\n{extra}{LLAMA_BODY}")


def test_read_presets_of_a_folder(tmp_path):
    _write(tmp_path, "a", "aliases: [x]\n")
    _write(tmp_path, "b", "aliases: [y]\n")
    assert sorted(read_presets(tmp_path)) == ["a", "b"]


@pytest.mark.parametrize("a_extra, b_extra, message", [
    ("aliases: [x]\n", "aliases: [X]\n", "'x' is also used by 'a'"),
    ("aliases: [b]\n", "", "'b' is also used by 'a'"),
    ("aliases: [A]\n", "", "repeat its name"),
    ("aliases: [x, x]\n", "", "repeat its name or each other"),
])
def test_collisions_are_refused(tmp_path, a_extra, b_extra, message):
    _write(tmp_path, "a", a_extra)
    _write(tmp_path, "b", b_extra)
    with pytest.raises(SpecError, match=message):
        read_presets(tmp_path)


def test_preset_name_must_match_file_name(tmp_path):
    (tmp_path / "a.yaml").write_text("name: b\n" + LLAMA_BODY)
    with pytest.raises(SpecError, match="name must equal the file name 'a'"):
        read_presets(tmp_path)


def test_preset_must_name_its_sources(tmp_path):
    (tmp_path / "a.yaml").write_text("name: a\n" + LLAMA_BODY.replace("sources: [test]\n", ""))
    with pytest.raises(SpecError, match="sources"):
        read_presets(tmp_path)


def test_preset_refuses_unknown_keys(tmp_path):
    _write(tmp_path, "a", "num_hiden_layers: 3\n")
    with pytest.raises(SpecError, match=r"a\.yaml: unknown key 'num_hiden_layers' \(did you "
                                        r"mean 'num_hidden_layers'\?\)"):
        read_presets(tmp_path)


def test_user_yaml_file(tmp_path):
    path = tmp_path / "tiny.yaml"
    path.write_text(LLAMA_BODY + "seq_len: 128\n")
    spec = load_model(str(path))
    # the llama case of test_hf_config with 4 KV heads instead of 2: 86,848 + 2 x 2*64*32
    assert (spec.name, spec.seq_len, count_params(spec).total) == ("tiny", 128, 95_040)
