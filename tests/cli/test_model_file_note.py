"""Importing a Hugging Face config.json says what it imported (issue 18 frictions): one line on
stderr with the parameter count and the sequence length used; a search of a 32K+ sequence in the
default space suggests the long-context space."""

from __future__ import annotations

import json

from click.testing import CliRunner

from autoplan.cli import main

# Llama-3-8B's config.json fields: 8.03B parameters (tests/golden/param_counts.yaml)
LLAMA3_8B = {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336,
             "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
             "vocab_size": 128256, "max_position_embeddings": 131072, "_name_or_path": "my-llama"}


def run(args, code=0):
    result = CliRunner().invoke(main, args)
    assert result.exit_code == code, result.output
    return result


def config_file(tmp_path, **extra):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**LLAMA3_8B, **extra}), encoding="utf-8")
    return str(path)


def test_config_import_prints_params_and_assumed_sequence_length(tmp_path):
    path = config_file(tmp_path)
    result = run(["estimate", "-m", path, "-g", "8", "--gbs-seqs", "64", "--tp", "8", "--format", "json"])
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    # no seq_len key: min(4096 default, max_position_embeddings 131072) = 4096
    assert "8.03B parameters" in lines[0] and "sequence length 4096" in lines[0]
    assert "--seq-len" in lines[0]
    json.loads(result.stdout)  # stdout stays clean


def test_a_given_sequence_length_is_named_as_such(tmp_path):
    result = run(["estimate", "-m", config_file(tmp_path), "-g", "8", "--gbs-seqs", "64", "--tp", "8",
                  "--seq-len", "2048", "--format", "json"])
    assert "sequence length 2048 (--seq-len)" in result.stderr


def test_a_preset_needs_no_note():
    result = run(["estimate", "-m", "llama3-8b", "-g", "8", "--gbs-seqs", "64", "--tp", "8", "--format", "json"])
    assert result.stderr == ""


SEARCH = ["search", "-g", "64", "--gbs-seqs", "64", "--tp", "8", "--pp", "1", "--cp", "2",
          "--mbs", "1", "--zero", "1", "--recompute", "full", "--sampler", "exhaustive"]


def test_long_sequence_in_the_default_space_suggests_long_context(tmp_path):
    path = config_file(tmp_path, seq_len=65536)
    result = run([*SEARCH, "-m", path, "--out", str(tmp_path / "a")])
    hints = [line for line in result.stderr.splitlines() if "--space long-context" in line]
    assert len(hints) == 1 and "65536" in hints[0]
    quiet = run([*SEARCH, "-m", path, "--space", "long-context", "--out", str(tmp_path / "b")])
    assert "--space long-context" not in quiet.stderr
    short = run([*SEARCH, "-m", path, "--seq-len", "8192", "--out", str(tmp_path / "c")])
    assert "--space long-context" not in short.stderr
