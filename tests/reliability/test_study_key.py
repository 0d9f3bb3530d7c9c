"""A study is keyed by a hash of the resolved inputs: resuming it with another NIC, GPUs per
node, FLOP convention or model field is refused with one line naming the difference (issue 18,
item 2)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from autoplan.cli import main

SEARCH = ["search", "-g", "16", "--gbs-seqs", "64", "--sampler", "random", "--trials", "16",
          "--study-name", "same", "--format", "json"]


@pytest.mark.parametrize("change, differs", [
    (["--nic", "200 Gb/s"], "cluster.nic_bytes_per_s"),
    (["--gpus-per-node", "4"], "cluster.gpus_per_node"),
    (["--flops-convention", "megatron"], "training.flops_convention"),
    ("hidden_size", "model.hidden_size"),
    (["--trainer", "torchtitan"], "trainer: stored 'megatron', now 'torchtitan'"),  # not a fitted parameter
])
def test_resuming_with_other_inputs_is_refused(tmp_path, change, differs):
    model = ["-m", "8b"]
    edited = None
    if change == "hidden_size":  # the same model file, edited between runs
        preset = Path(__file__).parents[2] / "model_db" / "llama3-8b.yaml"
        edited = tmp_path / "model.yaml"
        edited.write_text(preset.read_text())
        model, change = ["-m", str(edited)], []
    storage = ["--storage", f"sqlite:///{tmp_path / 's.db'}"]
    first = CliRunner().invoke(main, [*SEARCH, *model, *storage, "--out", str(tmp_path / "a")])
    assert first.exit_code == 0, first.output
    if edited is not None:
        text = edited.read_text()
        assert "hidden_size: 4096" in text
        edited.write_text(text.replace("hidden_size: 4096", "hidden_size: 4352"))
    again = CliRunner().invoke(main, [*SEARCH, *model, *storage, *change, "--out", str(tmp_path / "b")])
    assert again.exit_code == 2
    assert differs in again.stderr and "made for other inputs" in again.stderr
    refusal = [line for line in again.stderr.strip().splitlines() if not line.startswith("model '")]
    assert len(refusal) == 1  # (a model file adds its one-line note before it)
