"""Bad input never gives a traceback: exit code 2 (1 for 'no feasible plan') and one line.

Table-driven: every case runs the real CLI through click's CliRunner in a temporary
folder holding the bad files below, and must exit with its code and print exactly one line on
stderr, with no 'Traceback' anywhere. Cases marked xfail are known bugs, each with its reason.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from autoplan.cli import main
from autoplan.paths import data_dir

H100_YAML = (data_dir("hardware_db") / "gpus" / "h100-sxm.yaml").read_text(encoding="utf-8")
GOOD_CONFIG = dict(model_type="llama", num_hidden_layers=2, hidden_size=256, intermediate_size=512,
                   num_attention_heads=4, vocab_size=1000)


def _config(**changes) -> str:
    return json.dumps({**GOOD_CONFIG, **changes})


def _hardware(old_line_start: str, new_line: str | None) -> str:
    """h100-sxm.yaml with the line starting with ``old_line_start`` replaced (None: dropped)."""
    lines = []
    for line in H100_YAML.splitlines():
        if line.startswith(old_line_start):
            if new_line is not None:
                lines.append(new_line)
        else:
            lines.append(line)
    return "\n".join(lines) + "\n"


FILES: dict[str, str | bytes] = {
    # --model PATH: config.json and YAML files
    "empty.json": "",
    "truncated.json": '{"model_type": "llama", ',
    "binary.json": b"\xff\xfe\x00\x9c garbage",
    "huge.json": '{"model_type": "llama", "pad": "' + "x" * (17 * 2**20) + '"}',
    "list.json": "[1, 2, 3]",
    "missing.json": '{"model_type": "llama", "hidden_size": 4096}',
    "no_type.json": json.dumps({k: v for k, v in GOOD_CONFIG.items() if k != "model_type"}),
    "bad_type.json": _config(model_type="llamaa"),
    "zero.json": _config(hidden_size=0),
    "negative.json": _config(hidden_size=-4),
    "fraction.json": _config(hidden_size=256.5),
    "string.json": _config(hidden_size="256"),
    "bool.json": _config(num_hidden_layers=True),
    "absurd_hidden.json": _config(hidden_size=1e30),
    "absurd_vocab.json": _config(vocab_size=1e30),
    "absurd_layers.json": _config(num_hidden_layers=1e30),
    "heads.json": _config(num_attention_heads=3),
    "kv_heads.json": _config(num_key_value_heads=3),
    "deep.json": "[" * 2_000 + "]" * 2_000,
    "broken.yaml": "model_type: llama\nhidden_size: [256\n",
    "empty.yaml": "",
    "scalar.yaml": "just a string\n",
    "unsafe.yaml": '!!python/object/apply:os.system ["echo pwned"]\n',
    "deep.yaml": "[" * 2_000 + "]" * 2_000,
    "zero_layers.yaml": "model_type: llama\nnum_hidden_layers: 0\nhidden_size: 256\n"
                        "intermediate_size: 512\nnum_attention_heads: 4\nvocab_size: 1000\n",
    "snapshot/readme.txt": "a downloaded folder without config.json",
    # --hardware PATH
    "hw_bare_memory.yaml": _hardware("memory:", "memory: 80"),
    "hw_bare_nic.yaml": _hardware("nic_bandwidth:", "nic_bandwidth: 400"),
    "hw_bare_flops.yaml": _hardware("peak_bf16:", "peak_bf16: 989"),
    "hw_bare_latency.yaml": _hardware("scale_up_latency:", "scale_up_latency: 3"),
    "hw_unknown_key.yaml": H100_YAML + "memroy: 80 GiB\n",
    "hw_missing.yaml": _hardware("hbm_bandwidth:", None),
    "hw_bidirectional.yaml": _hardware("scale_up_bandwidth:", "scale_up_bandwidth: 900 GB/s bidirectional"),
    "hw_no_direction.yaml": _hardware("scale_up_bandwidth:", "scale_up_bandwidth: 450 GB/s"),
    "hw_zero_gpus_per_node.yaml": _hardware("gpus_per_node:", "gpus_per_node: 0"),
    "hw_negative.yaml": _hardware("memory:", "memory: -80 GiB"),
    "hw_zero_flops.yaml": _hardware("peak_bf16:", "peak_bf16: 0 TFLOP/s"),
    "hw_fraction_domain.yaml": _hardware("scale_up_domain:", "scale_up_domain: 8.5"),
    "hw_decimal_gb.yaml": _hardware("memory:", "memory: 80 GB"),
    "hw_absurd.yaml": _hardware("memory:", "memory: 1e30 GiB").replace(
        "usable_memory: 81559 MiB", "usable_memory: 1e30 GiB"),
    "hw_binary.yaml": b"name: h100\xff\n",
    # --profile PATH
    "profile_wrong_trainer.yaml": "trainer: torchtitan\nhardware: h100-sxm\nefficiency: {}\n",
    "profile_out_of_bounds.yaml": "trainer: megatron\nhardware: h100-sxm\nefficiency: {gemm_efficiency_max: 7}\n",
    # compare CSVs
    "good.csv": "tp,pp,gpus,gbs_seqs\n2,1,8,8\n",
    "no_gpus.csv": "tp,gbs_seqs\n1,12\n",
    "empty.csv": "",
    "header_only.csv": "tp,pp\n",
    "misspelled.csv": "tpp,pp\n2,1\n",
    "misspelled_batch.csv": "tp,gbs_seq\n1,8\n",
    "binary.csv": b"\xff\xfe,tp\n1,2\n",
    "ragged.csv": 'tp,pp\n1,2,3,4\n"unclosed\n',
}


E = ["estimate", "--gpus", "8", "--gbs-seqs", "8"]  # a valid estimate needs --model
E8 = E + ["--model", "8b"]
C = ["compare", "good.csv", "--model", "8b"]

# (id, args, exit code, text the one line must contain, marks)
CASES = [
    # unknown names with a did-you-mean
    ("unknown-model", E + ["--model", "llama3-8bb"], 2, "did you mean 'llama3-8b'", ()),
    ("unknown-model-explain", ["explain", "--model", "lama3-8b", "--gpus", "8", "--gbs-seqs", "8"], 2,
     "did you mean", ()),
    ("unknown-hardware", E8 + ["--hardware", "h100-sxmm"], 2, "did you mean 'h100-sxm'", ()),
    ("unknown-trainer", E8 + ["--trainer", "megatorn"], 2, "did you mean 'megatron'", ()),
    ("empty-hardware-name", E8 + ["--hardware", ""], 2, "", ()),
    ("empty-trainer-name", E8 + ["--trainer", ""], 2, "unknown trainer", ()),
    ("compare-unknown-model", ["compare", "good.csv", "--model", "mixtrall"], 2, "did you mean", ()),
    ("compare-unknown-hardware", C + ["--hardware", "b2000"], 2, "unknown hardware", ()),
    ("compare-unknown-trainer", C + ["--trainer", "nanotorn"], 2, "did you mean 'nanotron'", ()),
    # --model PATH: malformed, empty, non-UTF-8, huge files
    ("model-empty-json", E + ["--model", "empty.json"], 2, "file is empty", ()),
    ("model-truncated-json", E + ["--model", "truncated.json"], 2, "invalid JSON", ()),
    ("model-non-utf8", E + ["--model", "binary.json"], 2, "not UTF-8", ()),
    ("model-huge-file", E + ["--model", "huge.json"], 2, "larger than", ()),
    ("model-json-list", E + ["--model", "list.json"], 2, "mapping", ()),
    ("model-deep-json", E + ["--model", "deep.json"], 2, "nesting too deep", ()),
    ("model-missing-field", E + ["--model", "missing.json"], 2, "missing required key", ()),
    ("model-missing-type", E + ["--model", "no_type.json"], 2, "model_type", ()),
    ("model-unsupported-type", E + ["--model", "bad_type.json"], 2, "did you mean 'llama'", ()),
    ("model-zero-size", E + ["--model", "zero.json"], 2, "hidden_size", ()),
    ("model-negative-size", E + ["--model", "negative.json"], 2, "hidden_size", ()),
    ("model-fractional-size", E + ["--model", "fraction.json"], 2, "expected an integer", ()),
    ("model-string-size", E + ["--model", "string.json"], 2, "expected an integer", ()),
    ("model-bool-size", E + ["--model", "bool.json"], 2, "expected an integer", ()),
    ("model-absurd-hidden", E + ["--model", "absurd_hidden.json"], 2, "hidden_size", ()),
    ("model-absurd-vocab", E + ["--model", "absurd_vocab.json"], 2, "vocab_size", ()),
    ("model-absurd-layers", E + ["--model", "absurd_layers.json"], 2, "num_hidden_layers",
     ()),
    ("model-heads-not-dividing", E + ["--model", "heads.json"], 2, "head_dim", ()),
    ("model-kv-heads-not-dividing", E + ["--model", "kv_heads.json"], 2, "num_kv_heads", ()),
    ("model-broken-yaml", E + ["--model", "broken.yaml"], 2, "invalid YAML", ()),
    ("model-empty-yaml", E + ["--model", "empty.yaml"], 2, "file is empty", ()),
    ("model-scalar-yaml", E + ["--model", "scalar.yaml"], 2, "mapping", ()),
    ("model-unsafe-yaml", E + ["--model", "unsafe.yaml"], 2, "invalid YAML", ()),
    ("model-deep-yaml", E + ["--model", "deep.yaml"], 2, "nesting too deep", ()),
    ("model-yaml-zero-layers", E + ["--model", "zero_layers.yaml"], 2, "num_hidden_layers", ()),
    ("model-folder-without-config", E + ["--model", "snapshot"], 2, "config.json", ()),
    ("model-missing-file", E + ["--model", "nowhere/config.json"], 2, "cannot read", ()),
    # --hardware PATH: bare numbers for units, unknown and missing keys, directions, sizes
    ("hw-bare-memory", E8 + ["--hardware", "hw_bare_memory.yaml"], 2, "state the unit", ()),
    ("hw-bare-nic", E8 + ["--hardware", "hw_bare_nic.yaml"], 2, "state the unit", ()),
    ("hw-bare-flops", E8 + ["--hardware", "hw_bare_flops.yaml"], 2, "state the unit", ()),
    ("hw-bare-latency", E8 + ["--hardware", "hw_bare_latency.yaml"], 2, "state the unit", ()),
    ("hw-unknown-key", E8 + ["--hardware", "hw_unknown_key.yaml"], 2, "did you mean 'memory'", ()),
    ("hw-missing-key", E8 + ["--hardware", "hw_missing.yaml"], 2, "hbm_bandwidth", ()),
    ("hw-bidirectional", E8 + ["--hardware", "hw_bidirectional.yaml"], 2, "450 GB/s per direction", ()),
    ("hw-no-direction", E8 + ["--hardware", "hw_no_direction.yaml"], 2, "direction", ()),
    ("hw-zero-gpus-per-node", E8 + ["--hardware", "hw_zero_gpus_per_node.yaml"], 2, "gpus_per_node", ()),
    ("hw-negative-memory", E8 + ["--hardware", "hw_negative.yaml"], 2, "negative", ()),
    ("hw-zero-flops", E8 + ["--hardware", "hw_zero_flops.yaml"], 2, "peak_bf16", ()),
    ("hw-fractional-domain", E8 + ["--hardware", "hw_fraction_domain.yaml"], 2, "scale_up_domain", ()),
    ("hw-decimal-gb", E8 + ["--hardware", "hw_decimal_gb.yaml"], 2, "GiB", ()),
    ("hw-absurd-memory", E8 + ["--hardware", "hw_absurd.yaml"], 2, "memory", ()),
    ("hw-non-utf8", E8 + ["--hardware", "hw_binary.yaml"], 2, "not UTF-8", ()),
    ("hw-empty-file", E8 + ["--hardware", "empty.yaml"], 2, "file is empty", ()),
    ("hw-missing-file", E8 + ["--hardware", "nowhere.yaml"], 2, "cannot read", ()),
    # --profile PATH
    ("profile-missing", E8 + ["--profile", "nowhere.yaml"], 2, "cannot read", ()),
    ("profile-wrong-trainer", E8 + ["--profile", "profile_wrong_trainer.yaml"], 2, "torchtitan", ()),
    ("profile-out-of-bounds", E8 + ["--profile", "profile_out_of_bounds.yaml"], 2, "must lie in", ()),
    # sizes: zero, negative, non-integer, absurd
    ("gpus-zero", ["estimate", "--model", "8b", "--gpus", "0", "--gbs-seqs", "8"], 2, "", ()),
    ("gpus-negative", ["estimate", "--model", "8b", "--gpus", "-8", "--gbs-seqs", "8"], 2, "",
     ()),
    ("gpus-fractional", ["estimate", "--model", "8b", "--gpus", "8.5", "--gbs-seqs", "8"], 2, "",
     ()),
    ("gpus-absurd", ["estimate", "--model", "8b", "--gpus", "1e30", "--gbs-seqs", "8"], 2, "",
     ()),
    ("tp-zero", E8 + ["--tp", "0"], 2, "", ()),
    ("zero-stage-4", E8 + ["--zero", "4"], 2, "", ()),
    ("seq-len-zero", E8 + ["--seq-len", "0"], 2, "", ()),
    ("gbs-tokens-zero", ["estimate", "--model", "8b", "--gpus", "8", "--gbs-tokens", "0"], 2, "",
     ()),
    ("gbs-tokens-bad-suffix", ["estimate", "--model", "8b", "--gpus", "8", "--gbs-tokens", "4X"], 2, "",
     ()),
    ("gbs-tokens-absurd", ["estimate", "--model", "8b", "--gpus", "8", "--gbs-tokens", "1e30"], 2,
     "--gbs-tokens (1e+30) must be at most", ()),
    ("gbs-tokens-not-whole-sequences", ["estimate", "--model", "8b", "--gpus", "8", "--gbs-tokens", "1000"],
     2, "multiple of the sequence length", ()),
    ("mbs-too-large", E8 + ["--mbs", "1000000"], 2, "multiple of dp·mbs", ()),
    ("batch-not-divisible", ["estimate", "--model", "8b", "--gpus", "8", "--gbs-seqs", "7"], 2,
     "multiple of dp·mbs", ()),
    ("tp-not-dividing-gpus", E8 + ["--tp", "3"], 2, "multiple of tp·pp·cp", ()),
    ("dp-inconsistent", E8 + ["--dp", "3"], 2, "must equal gpus", ()),
    # GPU counts that are not a multiple of the node size
    ("gpus-not-multiple-of-node", ["estimate", "--model", "8b", "--gpus", "12", "--gbs-seqs", "12"], 2,
     "did you mean 8 or 16", ()),
    ("gpus-per-node-not-dividing", E8 + ["--gpus-per-node", "3"], 2, "multiple of gpus_per_node", ()),
    ("gpus-per-node-zero", E8 + ["--gpus-per-node", "0"], 2, "'--gpus-per-node': 0 is not in the range", ()),
    ("compare-gpus-not-multiple", ["compare", "no_gpus.csv", "--model", "8b", "--gpus", "12"], 2,
     "did you mean 8 or 16", ()),
    # --nic
    ("nic-bare-number", E8 + ["--nic", "400"], 2, "400 Gb/s", ()),
    ("nic-negative", E8 + ["--nic", "-400 Gb/s"], 2, "negative", ()),
    ("nic-zero", E8 + ["--nic", "0 Gb/s"], 2, "nic", ()),
    ("nic-words", E8 + ["--nic", "fast"], 2, "bandwidth", ()),
    # conflicting or missing options
    ("gbs-seqs-and-tokens", E8 + ["--gbs-tokens", "4M"], 2, "not both", ()),
    ("gbs-seqs-and-tokens-explain", ["explain", "--model", "8b", "--gpus", "8", "--gbs-seqs", "8",
                                     "--gbs-tokens", "4M"], 2, "not both", ()),
    ("no-batch", ["estimate", "--model", "8b", "--gpus", "8"], 2, "global batch", ()),
    ("no-model", E, 2, "", ()),
    ("unknown-option", E8 + ["--tpp", "2"], 2, "", ()),
    ("bad-choice", E8 + ["--recompute", "some"], 2, "", ()),
    ("models-bad-format", ["models", "--format", "xml"], 2, "", ()),
    ("hardware-bad-format", ["hardware", "--format", "yaml"], 2, "", ()),
    ("trainers-extra-argument", ["trainers", "extra"], 2, "", ()),
    # compare CSVs: empty, header only, misspelled columns, encodings
    ("compare-empty-csv", ["compare", "empty.csv", "--model", "8b", "--gpus", "8", "--gbs-seqs", "8"], 2,
     "file is empty", ()),
    ("compare-header-only", ["compare", "header_only.csv", "--model", "8b", "--gpus", "8"], 2, "no rows", ()),
    ("compare-misspelled-column", ["compare", "misspelled.csv", "--model", "8b", "--gpus", "8",
                                   "--gbs-seqs", "8"], 2, "did you mean 'tp'", ()),
    ("compare-misspelled-batch", ["compare", "misspelled_batch.csv", "--model", "8b", "--gpus", "8"], 2,
     "did you mean 'gbs_seqs'", ()),
    ("compare-non-utf8", ["compare", "binary.csv", "--model", "8b", "--gpus", "8", "--gbs-seqs", "8"], 2,
     "not UTF-8", ()),
    ("compare-ragged", ["compare", "ragged.csv", "--model", "8b", "--gpus", "8", "--gbs-seqs", "8"], 2,
     "ragged.csv: line 2: 4 fields, but the header has 2 columns", ()),
    ("compare-missing-csv", ["compare", "nowhere.csv", "--model", "8b"], 2, "", ()),
    ("compare-bad-output-folder", C + ["-o", "nowhere/out.csv"], 2, "nowhere", ()),
]

S = ["search", "--gpus", "8", "--gbs-seqs", "8", "--out", "out"]
SEARCH_CASES = [
    ("search-unknown-model", S + ["--model", "llama3-8bb"], 2, "did you mean 'llama3-8b'", ()),
    ("search-unknown-hardware", S + ["--model", "8b", "--hardware", "h100-sxmm"], 2, "did you mean", ()),
    ("search-unknown-trainer", S + ["--model", "8b", "--trainer", "megatorn"], 2, "did you mean", ()),
    ("search-unknown-space", S + ["--model", "8b", "--space", "defualt"], 2, "did you mean 'default'", ()),
    ("search-unknown-sampler", S + ["--model", "8b", "--sampler", "tpee"], 2, "", ()),
    ("search-empty-space", S + ["--model", "8b", "--tp", "3"], 2, "", ()),
    ("search-gbs-seqs-and-tokens", S + ["--model", "8b", "--gbs-tokens", "4M"], 2, "", ()),
    ("search-gpus-not-multiple-of-node", ["search", "--model", "8b", "--gpus", "12", "--gbs-seqs", "12",
                                          "--out", "out"], 2, "did you mean 8 or 16", ()),
    ("search-model-bare-hardware", S + ["--model", "8b", "--hardware", "hw_bare_nic.yaml"], 2,
     "state the unit", ()),
    ("search-no-feasible-plan", S + ["--model", "405b", "--tp", "8"], 1, "no feasible plan",
     ()),
]
HAVE_SEARCH = importlib.util.find_spec("autoplan.cli.search") is not None


def _params(cases):
    return [pytest.param(args, code, text, id=case_id, marks=marks)
            for case_id, args, code, text, marks in cases]


@pytest.fixture(scope="module")
def bad_files(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("bad_input")
    for name, content in FILES.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")
    return folder


def _check(folder: Path, monkeypatch, args: list[str], code: int, text: str) -> None:
    monkeypatch.chdir(folder)
    monkeypatch.delenv("AUTOPLAN_DEBUG", raising=False)
    result = CliRunner().invoke(main, args)
    everything = result.output + result.stderr
    assert "Traceback" not in everything
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert result.exit_code == code, everything
    lines = result.stderr.strip("\n").splitlines()
    assert len(lines) == 1, lines
    assert text in lines[0], lines[0]


def test_the_table_is_large_enough():
    assert len(CASES) >= 40
    assert len({case[0] for case in CASES + SEARCH_CASES}) == len(CASES) + len(SEARCH_CASES)


@pytest.mark.parametrize("args, code, text", _params(CASES))
def test_bad_input_gives_one_line_and_exit_code(bad_files, monkeypatch, args, code, text):
    _check(bad_files, monkeypatch, args, code, text)


@pytest.mark.skipif(not HAVE_SEARCH, reason="autoplan.cli.search is not there yet")
@pytest.mark.parametrize("args, code, text", _params(SEARCH_CASES))
def test_bad_search_input_gives_one_line_and_exit_code(bad_files, monkeypatch, args, code, text):
    _check(bad_files, monkeypatch, args, code, text)


def test_did_you_mean_matches_words_and_numbers():
    """'70B-llama' holds the words of 'llama3-70b' (STYLE.md §6's example), not its spelling."""
    from autoplan.errors import suggest

    assert suggest("70B-llama", ["llama2-70b", "llama3-70b", "llama3-8b", "mixtral"]) == "llama3-70b"
    assert suggest("llama3-8bb", ["llama3-8b", "llama3-70b"]) == "llama3-8b"
    assert suggest("zzz", ["llama3-8b"]) is None
