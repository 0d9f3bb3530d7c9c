"""Processes per node come from the cluster of the TrainingSpec, never an assumed 8."""

from __future__ import annotations

from importlib import import_module

import pytest

from autoplan.api import plan_from_record
from autoplan.export import TRAINERS, render
from autoplan.export.registry import renderer_module
from autoplan.specs.models import load_model

# What every trainer's launch script states about processes per node (and the node count).
PER_NODE_TEXT = "NPROC_PER_NODE={per_node}\nNNODES={nodes}\n"


@pytest.mark.parametrize("trainer", TRAINERS)
@pytest.mark.parametrize(("hardware", "per_node"), [("gb200-nvl72", 4), ("h100-sxm", 8)])
def test_processes_per_node_follow_the_hardware(trainer, hardware, per_node):
    # 16 GPUs: 16/4 = 4 nodes of 4 on GB200 NVL72 (4 GPUs per compute tray), 16/8 = 2 nodes of 8 on H100
    zero = 3 if trainer == "torchtitan" else 1
    layout, training = plan_from_record(dict(gpus=16, tp=2, zero=zero, seq_len=4096, gbs_seqs=64),
                                        hardware=hardware)
    assert training.cluster.gpus_per_node == per_node
    files = render(trainer, load_model("llama3-8b"), layout, training).files
    name = import_module(renderer_module(trainer)).LAUNCH_FILE
    assert PER_NODE_TEXT.format(per_node=per_node, nodes=16 // per_node) in files[name]


def test_gpus_per_node_override_reaches_the_launch_line():
    layout, training = plan_from_record(dict(gpus=16, tp=2, seq_len=4096, gbs_seqs=64), gpus_per_node=2)
    script = render("megatron", load_model("llama3-8b"), layout, training).files["megatron_pretrain_gpt.sh"]
    assert "NPROC_PER_NODE=2\nNNODES=8\n" in script
