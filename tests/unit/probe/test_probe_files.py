"""The probe's two YAML files load where --hardware FILE and --profile FILE are read, with the
values written; a device name finds its datasheet preset (no PyTorch needed)."""

from __future__ import annotations

import pytest

from autoplan.api import build_context, build_training
from autoplan.probe.calibrated import Probed, probed_gpu
from autoplan.probe.fit import LinkFigures
from autoplan.probe.files import hardware_text, profile_text
from autoplan.probe.run import preset_for
from autoplan.specs.hardware import load_gpu

META = {"device": "NVIDIA H200", "driver": "570.1", "torch": "2.13.0", "cuda": "13.0", "nccl": "2.27.3",
        "date": "2026-12-02", "nodes": 1, "ranks": 8, "backend": "nccl"}


@pytest.mark.parametrize("device, preset", [("NVIDIA H200", "h200"), ("NVIDIA H100 80GB HBM3", "h100-sxm"),
                                            ("NVIDIA A100-SXM4-80GB", "a100-80gb"), ("AMD EPYC 9654", None)])
def test_a_device_name_finds_its_preset(device, preset):
    found = preset_for(device)
    assert (found.name if found else None) == preset


def test_the_files_load_in_estimate_with_the_values_written(tmp_path):
    notes: list[str] = []
    links = {"scale_up": LinkFigures(bus_bytes_per_s=360e9, hop_latency_s=4.5e-6), "scale_out": None}
    gpu = probed_gpu(load_gpu("h200"), links, name="h200-probed", usable_memory_bytes=150e9,
                     host_payload_bytes_per_s=55.36e9, sources=("autoplan probe test",), notes=notes)
    values = {"gemm_efficiency_max": 0.71, "gemm_half_flops": 4e9, "attention_efficiency": 0.33,
              "attention_half_seq_tokens": 1100.0, "hbm_efficiency": 0.89, "scale_up_efficiency": 0.8}
    probed = Probed(gpu, values, tuple(notes))
    (tmp_path / "hardware.yaml").write_text(hardware_text(probed.gpu, META, notes))
    (tmp_path / "profile.yaml").write_text(profile_text("megatron", gpu.name, values, META, {"n": 1}, notes))
    training = build_training(16, 4096, 32, hardware=str(tmp_path / "hardware.yaml"))
    back = training.cluster.gpu
    assert back.name == "h200-probed"
    assert back.scale_up_latency_s == pytest.approx(4.5e-6)
    assert back.scale_out_latency_s == load_gpu("h200").scale_out_latency_s  # one node: the preset's
    # 150e9 B = 143,051.1 MiB, floored to whole MiB; below the card's 141 GiB (144,384 MiB), so kept
    assert back.usable_memory_bytes == 143051 * 2**20
    assert back.host_bytes_per_s == pytest.approx(55.36e9 / 0.865, rel=1e-3)  # HOST_LINK_EFFICIENCY
    ctx = build_context("llama3-8b", training, profile_path=str(tmp_path / "profile.yaml"))
    for name, value in values.items():
        assert ctx.parameters.value(name) == pytest.approx(value)
    assert "one node" in " ".join(notes)
