"""TrainingSpec: the setup every layout of a plan shares, checked on construction."""

from __future__ import annotations

import dataclasses

import pytest

from autoplan.api import build_context, build_training
from autoplan.errors import AutoplanError
from autoplan.specs.hardware import load_gpu, make_cluster
from autoplan.specs.training import TrainingSpec, TrainingSpecError

CLUSTER = make_cluster(load_gpu("gb200-nvl72"), 64)


def test_gpus_and_gpus_per_node_come_from_the_cluster():
    training = TrainingSpec(CLUSTER, seq_len=8192, gbs_seqs=512)
    assert training.gpus == 64 and training.cluster.gpus_per_node == 4
    assert training.gbs_tokens == 512 * 8192
    assert (training.gbs_tolerance, training.flops_convention) == (0.05, "causal")  # ±5 %, the causal count by default (issue 47)
    with pytest.raises(dataclasses.FrozenInstanceError):
        training.seq_len = 1  # type: ignore[misc]


@pytest.mark.parametrize("changes, message", [
    (dict(seq_len=0), "seq_len >= 1 must hold for an integer seq_len, got seq_len=0"),
    (dict(seq_len=8.5), "got seq_len=8.5"),
    (dict(gbs_seqs=-4), "gbs_seqs >= 1 must hold for an integer gbs_seqs, got gbs_seqs=-4"),
    (dict(gbs_seqs=True), "got gbs_seqs=True"),
    (dict(gbs_tolerance=1.0), "0 <= gbs_tolerance < 1 must hold, got gbs_tolerance=1.0"),
    (dict(gbs_tolerance=-0.1), "got gbs_tolerance=-0.1"),
    (dict(flops_convention="mine"), "flops_convention must be one of causal, megatron, playbook, got 'mine'"),
    (dict(cluster="gb200"), "cluster must be a Cluster, got str"),
    (dict(optimizer_state_dtype="int4"), "optimizer_state_dtype must be one of fp32, bf16, fp16, fp8, got 'int4'"),
    (dict(master_weights="bf16"), "master_weights must be one of fp32, fp16, remainders, none, got 'bf16'"),
])
def test_bad_values_raise_one_clear_error(changes, message):
    values = dict(cluster=CLUSTER, seq_len=8192, gbs_seqs=512) | changes
    with pytest.raises(TrainingSpecError) as info:
        TrainingSpec(**values)
    assert message in str(info.value)
    assert isinstance(info.value, AutoplanError) and isinstance(info.value, ValueError)


def test_the_cost_context_reads_the_setup_from_its_training_spec():
    training = build_training(64, 4096, 256, hardware="gb200-nvl72", flops_convention="causal")
    ctx = build_context("llama3-8b", training)
    assert ctx.training is training and ctx.cluster is training.cluster
    assert ctx.flops_convention == "causal"
