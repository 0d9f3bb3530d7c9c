"""GPU presets, the YAML unit conventions, strict reading and make_cluster."""

from __future__ import annotations

import dataclasses

import pytest
import yaml

from autoplan.errors import AutoplanError, SpecError, UnknownNameError
from autoplan.paths import data_dir
from autoplan.specs.hardware import Cluster, GPUSpec, gpu_from_mapping, list_gpus, load_gpu, make_cluster

GiB, MiB = 2.0**30, 2.0**20
EXPECTED_PRESETS = {"a100-40gb", "a100-80gb", "h100-sxm", "h100-sxm-efa", "h100-pcie", "h100-96gb-500w", "h200",
                    "h800", "b200", "b300", "gb200-nvl72", "gb300-nvl72", "mi300x", "mi325x", "mi355x"}
PRESETS = list_gpus()


def valid_mapping() -> dict:
    return {
        "name": "test-gpu", "aliases": ["tg"], "description": "a test GPU",
        "memory": "80 GiB", "usable_memory": "81559 MiB",
        "peak_bf16": "989 TFLOP/s", "peak_fp8": "1979 TFLOP/s", "hbm_bandwidth": "3.35 TB/s",
        "scale_up_bandwidth": "450 GB/s per direction", "scale_up_domain": 8,
        "nic_bandwidth": "400 Gb/s per direction", "gpus_per_node": 8,
        "scale_up_latency": "3 us", "scale_out_latency": "10 us",
        "sources": ["a datasheet"], "notes": "free text",
    }


def write(tmp_path, **changes):
    data = valid_mapping()
    for key, value in changes.items():
        if value is None:
            data.pop(key)
        else:
            data[key] = value
    path = tmp_path / "gpu.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


# --- presets -------------------------------------------------------------------------------

def test_every_expected_preset_is_present():
    assert {gpu.name for gpu in PRESETS} == EXPECTED_PRESETS


@pytest.mark.parametrize("gpu", PRESETS, ids=lambda gpu: gpu.name)
def test_preset_values_are_sane(gpu):
    assert gpu.usable_memory_bytes <= gpu.memory_bytes
    # at most 5% (or ~11 GiB on GB300) of HBM kept by the driver
    assert gpu.usable_memory_bytes >= 0.95 * gpu.memory_bytes
    assert 16 * GiB <= gpu.memory_bytes <= 512 * GiB
    assert 1e14 <= gpu.peak_bf16_flops_per_s <= 1e16
    assert gpu.peak_fp8_flops_per_s == 0 or gpu.peak_fp8_flops_per_s >= gpu.peak_bf16_flops_per_s
    assert 1e12 <= gpu.hbm_bytes_per_s <= 2e13
    # per direction: no GPU here has more than 900 GB/s each way (NVLink 5)
    assert 10e9 <= gpu.scale_up_bytes_per_s <= 900e9
    assert 10e9 <= gpu.nic_bytes_per_s <= 100e9  # 800 Gb/s = 100 GB/s
    assert gpu.scale_up_domain_size in (8, 72)
    assert gpu.gpus_per_node in (4, 8)
    # InfiniBand presets: nominal 10 us; EFA (h100-sxm-efa) 118.5 us, fitted to nccl-tests
    assert 0 < gpu.scale_up_latency_s < gpu.scale_out_latency_s < 2e-4
    assert gpu.sources and gpu.description


@pytest.mark.parametrize("path", sorted((data_dir("hardware_db") / "gpus").glob("*.yaml")),
                         ids=lambda path: path.stem)
def test_preset_file_name_is_its_name_and_has_notes(path):
    data = yaml.safe_load(path.read_text())
    assert data["name"] == path.stem
    assert "nominal" in data["notes"]  # latencies are nominal defaults and say so


def test_aliases_resolve_case_insensitively_and_do_not_collide():
    seen: dict[str, str] = {}
    for gpu in PRESETS:
        for spelling in (gpu.name, *gpu.aliases):
            assert spelling.lower() not in seen, (spelling, seen.get(spelling.lower()))
            seen[spelling.lower()] = gpu.name
            assert load_gpu(spelling) is gpu
            assert load_gpu(spelling.upper()) is gpu
    for alias, name in {"a100": "a100-80gb", "h100": "h100-sxm", "h100-sxm5": "h100-sxm",
                        "gb200": "gb200-nvl72", "gb300": "gb300-nvl72"}.items():
        assert load_gpu(alias).name == name


def test_unit_conventions():
    # 200 Gb/s (bits) / 8 = 25 GB/s = 25e9 bytes/s
    assert load_gpu("a100-80gb").nic_bytes_per_s == pytest.approx(25e9)
    # NVLink 4 "900 GB/s" is both directions added: 450e9 bytes/s each way
    assert load_gpu("h100").scale_up_bytes_per_s == pytest.approx(450e9)
    # "80 GB" HBM is 80 GiB = 80 * 2^30 bytes; usable 81559 MiB = 81559 * 2^20 bytes
    assert load_gpu("h100").memory_bytes == 80 * GiB
    assert load_gpu("h100").usable_memory_bytes == 81559 * MiB
    assert load_gpu("h100").peak_bf16_flops_per_s == pytest.approx(989e12)
    assert load_gpu("h100").scale_up_latency_s == pytest.approx(3e-6)
    assert load_gpu("a100").peak_fp8_flops_per_s == 0.0 and not load_gpu("a100").has_fp8
    # DeepSeek-V3: NVLink 160 GB/s, IB 50 GB/s per GPU
    h800 = load_gpu("h800")
    assert (h800.scale_up_bytes_per_s, h800.nic_bytes_per_s) == pytest.approx((160e9, 50e9))
    assert load_gpu("gb300").nic_bytes_per_s == pytest.approx(100e9)  # 800 Gb/s
    assert load_gpu("gb200").scale_up_domain_size == 72 and load_gpu("gb200").gpus_per_node == 4
    assert load_gpu("h100-96gb-500w").hbm_bytes_per_s == pytest.approx(2.4e12)


def test_load_by_path_and_round_values(tmp_path):
    assert load_gpu(write(tmp_path)) == load_gpu(str(write(tmp_path)))  # a Path or a str
    gpu = load_gpu(str(write(tmp_path)))
    assert gpu.name == "test-gpu" and gpu.aliases == ("tg",)
    assert gpu.nic_bytes_per_s == pytest.approx(50e9)
    assert gpu.hbm_bytes_per_s == pytest.approx(3.35e12)
    assert gpu.scale_out_latency_s == pytest.approx(10e-6)


def test_unknown_name_suggests_the_near_miss():
    with pytest.raises(UnknownNameError, match=r"unknown hardware 'h100-sxm6'.*did you mean 'h100-sxm"):
        load_gpu("h100-sxm6")
    with pytest.raises(ValueError, match="did you mean 'mi300x'"):
        load_gpu("mi300")


def test_missing_file_says_where(tmp_path):
    with pytest.raises(SpecError, match="nope.yaml"):
        load_gpu(str(tmp_path / "nope.yaml"))


# --- strict reading ------------------------------------------------------------------------

@pytest.mark.parametrize("key, value, expected", [
    ("nic_bandwidth", 400, "nic_bandwidth: expected a bandwidth like '400 Gb/s per direction', got 400"),
    ("scale_up_bandwidth", 450, "scale_up_bandwidth: expected a bandwidth like '450 GB/s"),
    ("hbm_bandwidth", 3.35, "hbm_bandwidth: expected a bandwidth like '3.35 TB/s', got 3.35"),
    ("memory", 80, "memory: expected a size like '80 GiB', got 80"),
    ("peak_bf16", 989, "peak_bf16: expected a compute rate like '989 TFLOP/s', got 989"),
    ("peak_fp8", 0, "peak_fp8: expected a compute rate like '1979 TFLOP/s', got 0"),
    ("scale_up_latency", 3, "scale_up_latency: expected a time like '3 us', got 3"),
])
def test_bare_number_is_refused_with_path_and_unit(tmp_path, key, value, expected):
    path = write(tmp_path, **{key: value})
    with pytest.raises(SpecError) as info:
        load_gpu(str(path))
    assert str(path) in str(info.value)
    assert expected in str(info.value)
    assert "bare number" in str(info.value)


def test_unknown_key_suggests_the_near_miss(tmp_path):
    path = write(tmp_path, nic_bandwith="400 Gb/s per direction", nic_bandwidth=None)
    with pytest.raises(SpecError, match=r"unknown key 'nic_bandwith' \(did you mean 'nic_bandwidth'\?\)"):
        load_gpu(str(path))


def test_missing_key_is_named(tmp_path):
    with pytest.raises(SpecError, match="missing required key.*usable_memory"):
        load_gpu(str(write(tmp_path, usable_memory=None)))
    with pytest.raises(SpecError, match="missing required key.*sources"):
        load_gpu(str(write(tmp_path, sources=None)))


@pytest.mark.parametrize("changes, expected", [
    ({"memory": "-80 GiB"}, "memory: a size must not be negative"),
    ({"memory": "0 GiB", "usable_memory": "0 GiB"}, r"\bmemory must be a finite number > 0"),
    ({"peak_bf16": "0 TFLOP/s"}, "peak_bf16 must be a finite number > 0, got 0.0"),
    ({"peak_fp8": "-1 TFLOP/s"}, "peak_fp8: a compute rate must not be negative"),
    ({"nic_bandwidth": "0 Gb/s per direction"}, "nic_bandwidth must be a finite number > 0"),
    ({"scale_out_latency": "0 us"}, "scale_out_latency must be a finite number > 0"),
    ({"gpus_per_node": 0}, "gpus_per_node: must be >= 1, got 0"),
    ({"scale_up_domain": -8}, "scale_up_domain: must be >= 1, got -8"),
    ({"gpus_per_node": "8 GPUs"}, "gpus_per_node: expected an integer"),
    ({"usable_memory": "81 GiB"}, "usable_memory <= memory must hold, got usable_memory=81.0 GiB, "
                                  "memory=80.0 GiB"),
    ({"memory": "80 GB"}, "usable_memory <= memory must hold.*'GB' is 10\\^9 bytes"),
    ({"sources": []}, "sources must be a non-empty list"),
    ({"sources": "a datasheet"}, "sources: expected a list of non-empty strings"),
    ({"name": 12}, "name: expected a string"),
    ({"memory": "80 GiBs"}, "memory: expected a size like '80 GiB'"),
    ({"power_limited_clock_fraction": 0}, r"power_limited_clock_fraction must be a number in \(0, 1\], got 0"),
    ({"power_limited_clock_fraction": 1.2}, r"power_limited_clock_fraction must be a number in \(0, 1\], got 1.2"),
    ({"power_limited_clock_fraction": "0.8"}, r"power_limited_clock_fraction must be a number in \(0, 1\]"),
    ({"host_launch_slowdown": 0}, "host_launch_slowdown must be a finite number > 0, got 0"),
    ({"host_launch_slowdown": "2.75"}, "host_launch_slowdown must be a finite number > 0, got '2.75'"),
])
def test_bad_values_are_refused(tmp_path, changes, expected):
    path = write(tmp_path, **changes)
    with pytest.raises(SpecError, match=expected) as info:
        load_gpu(str(path))
    assert str(path) in str(info.value)


def test_power_limited_clock_fraction_scales_the_compute_peak_only(tmp_path):
    default = load_gpu(str(write(tmp_path)))
    assert default.power_limited_clock_fraction == 1.0
    assert default.compute_peak_bf16_flops_per_s == default.peak_bf16_flops_per_s
    capped = load_gpu(str(write(tmp_path, power_limited_clock_fraction=0.85)))
    assert capped.compute_peak_bf16_flops_per_s == pytest.approx(0.85 * capped.peak_bf16_flops_per_s)
    assert capped.peak_bf16_flops_per_s == default.peak_bf16_flops_per_s  # MFU's nominal peak unchanged


def test_host_launch_slowdown_is_1_on_x86_hosts_and_grace_states_its_own(tmp_path):
    assert load_gpu(str(write(tmp_path))).host_launch_slowdown == 1.0
    assert load_gpu("h100-sxm").host_launch_slowdown == 1.0 and load_gpu("b200").host_launch_slowdown == 1.0
    # Grace: 37.08 us / 13.48 us of host time per torch.nn.Linear forward (TransformerEngine#2053) = 2.75
    assert load_gpu("gb200-nvl72").host_launch_slowdown == pytest.approx(37.08 / 13.48, abs=0.01)
    assert load_gpu("gb300-nvl72").host_launch_slowdown == load_gpu("gb200-nvl72").host_launch_slowdown


def test_fp8_zero_is_allowed_but_needs_a_unit(tmp_path):
    assert load_gpu(str(write(tmp_path, peak_fp8="0 TFLOP/s"))).peak_fp8_flops_per_s == 0.0


@pytest.mark.parametrize("value", ["900 GB/s both directions", "900 GB/s bidirectional",
                                   "900 GB/s bi-directional", "900 GB/s Both Directions"])
def test_both_directions_bandwidth_is_refused_with_the_halved_value(tmp_path, value):
    path = write(tmp_path, scale_up_bandwidth=value)
    with pytest.raises(SpecError, match=r"per direction: halve it, e.g. '450 GB/s per direction'"):
        load_gpu(str(path))


@pytest.mark.parametrize("value", ["400 Gb/s", "400 Gb/s per port", "400 Gb/s each way"])
def test_link_bandwidth_must_say_per_direction(tmp_path, value):
    with pytest.raises(SpecError, match="nic_bandwidth: say which direction"):
        load_gpu(str(write(tmp_path, nic_bandwidth=value)))


def test_hbm_bandwidth_takes_no_direction(tmp_path):
    with pytest.raises(SpecError, match="hbm_bandwidth: .*nothing after the unit"):
        load_gpu(str(write(tmp_path, hbm_bandwidth="3.35 TB/s per direction")))


def test_per_direction_spelling_is_forgiving(tmp_path):
    gpu = load_gpu(str(write(tmp_path, scale_up_bandwidth="450 GB/s  Per-Direction")))
    assert gpu.scale_up_bytes_per_s == pytest.approx(450e9)


def test_gpu_from_mapping_is_strict_about_types():
    with pytest.raises(SpecError, match="where.yaml: aliases: expected a list"):
        gpu_from_mapping({**valid_mapping(), "aliases": "tg"}, "where.yaml")


def test_gpuspec_checks_its_invariants_when_built_in_code():
    gpu = load_gpu("h100")
    with pytest.raises(SpecError, match="gpu 'h100-sxm': usable_memory <= memory must hold"):
        dataclasses.replace(gpu, usable_memory_bytes=gpu.memory_bytes + 1)
    with pytest.raises(SpecError, match="scale_up_domain_size must be an integer >= 1"):
        dataclasses.replace(gpu, scale_up_domain_size=0)
    with pytest.raises(AutoplanError):
        dataclasses.replace(gpu, hbm_bytes_per_s=float("nan"))


# --- clusters ------------------------------------------------------------------------------

def test_make_cluster_takes_preset_defaults():
    cluster = make_cluster(load_gpu("h100"), 64)
    assert isinstance(cluster, Cluster)
    assert (cluster.gpus_per_node, cluster.num_nodes, cluster.scale_up_domain_size) == (8, 8, 8)
    assert cluster.nic_bytes_per_s == pytest.approx(50e9)
    nvl72 = make_cluster(load_gpu("gb200"), 144)
    assert (nvl72.num_nodes, nvl72.scale_up_domain_size) == (36, 72)


def test_make_cluster_overrides():
    cluster = make_cluster(load_gpu("h100"), 64, gpus_per_node=4, nic_bytes_per_s=25e9,
                           scale_up_domain_size=4)
    assert (cluster.gpus_per_node, cluster.num_nodes, cluster.scale_up_domain_size) == (4, 16, 4)
    assert cluster.nic_bytes_per_s == 25e9
    assert cluster.gpu.gpus_per_node == 8  # the preset is untouched


def test_a_job_smaller_than_a_node_uses_one_node():
    assert make_cluster(load_gpu("h100"), 4).num_nodes == 1
    assert make_cluster(load_gpu("h100"), 1).num_nodes == 1


def test_make_cluster_suggests_the_nearest_valid_counts():
    with pytest.raises(SpecError, match=r"num_gpus \(100\) must be a multiple of gpus_per_node \(8\)"
                                        r".*did you mean 96 or 104\?"):
        make_cluster(load_gpu("h100"), 100)
    with pytest.raises(SpecError, match="did you mean 8 or 12"):
        make_cluster(load_gpu("gb200"), 10)


@pytest.mark.parametrize("kwargs, expected", [
    ({"num_gpus": 0}, "num_gpus must be an integer >= 1, got 0"),
    ({"num_gpus": -8}, "num_gpus must be an integer >= 1, got -8"),
    ({"num_gpus": True}, "num_gpus must be an integer >= 1, got True"),
    ({"num_gpus": 8.0}, "num_gpus must be an integer >= 1, got 8.0"),
    ({"num_gpus": 8, "scale_up_domain_size": 0}, "scale_up_domain_size must be an integer >= 1"),
    ({"num_gpus": 8, "gpus_per_node": 0}, "gpus_per_node must be an integer >= 1"),
    ({"num_gpus": 8, "nic_bytes_per_s": 0.0}, "nic_bytes_per_s must be a finite number > 0"),
    ({"num_gpus": 8, "nic_bytes_per_s": float("inf")}, "nic_bytes_per_s must be a finite number"),
])
def test_make_cluster_refuses_bad_values(kwargs, expected):
    with pytest.raises(SpecError, match=expected):
        make_cluster(load_gpu("h100"), **kwargs)


def test_errors_are_value_errors():
    with pytest.raises(ValueError):
        make_cluster(load_gpu("h100"), 0)
    with pytest.raises(ValueError):
        load_gpu("no-such-gpu")
    assert issubclass(SpecError, ValueError)
    assert GPUSpec.__dataclass_params__.frozen and Cluster.__dataclass_params__.frozen


@pytest.mark.parametrize("path", sorted(data_dir("hardware_db/gpus").glob("*.yaml")), ids=lambda p: p.stem)
def test_every_preset_states_its_host_link_with_a_source(path):
    """The GPU <-> host link that activation offload uses: PCIe Gen5 x16 (64 GB/s each way),
    Gen4 x16 on A100 (32 GB/s), NVLink-C2C on Grace (900 GB/s both ways = 450 each way)."""
    data = yaml.safe_load(path.read_text())
    assert "per direction" in data["host_link"]
    words = "PCI Express" if "C2C" not in path.read_text() else "NVLink-C2C"
    assert any(words in source for source in data["sources"])
    expected = {"a100-40gb": 32e9, "a100-80gb": 32e9, "gb200-nvl72": 450e9, "gb300-nvl72": 450e9}
    assert load_gpu(path.stem).host_bytes_per_s == expected.get(path.stem, 64e9)


def test_a_file_without_host_link_gets_pcie_gen5_x16(tmp_path):
    data = yaml.safe_load((data_dir("hardware_db/gpus") / "h100-sxm.yaml").read_text())
    del data["host_link"]
    assert gpu_from_mapping(data, "x.yaml").host_bytes_per_s == 64e9


def test_mi355x_and_b300_dense_peaks_follow_their_derivations():
    """MI355X: 256 CUs x 2.4 GHz x 4096 (BF16) / 8192 (FP8) dense FLOP per clock per CU; its
    XGMI mesh is 7 links of 153.6 GB/s both directions (76.8 each way). B300: the HGX B300 table's
    sparse 36 (BF16) / 72 (FP8) PFLOPS for 8 GPUs, halved for dense."""
    mi355x, b300 = load_gpu("mi355x"), load_gpu("b300")
    assert mi355x.peak_bf16_flops_per_s == pytest.approx(256 * 2.4e9 * 4096, rel=1e-4)
    assert mi355x.peak_fp8_flops_per_s == pytest.approx(256 * 2.4e9 * 8192, rel=1e-4)
    assert mi355x.scale_up_peer_link_bytes_per_s == 153.6e9 / 2
    assert mi355x.scale_up_bytes_per_s == pytest.approx(7 * 153.6e9 / 2)
    assert b300.peak_bf16_flops_per_s == 36e15 / 8 / 2 and b300.peak_fp8_flops_per_s == 72e15 / 8 / 2
    assert b300.nic_bytes_per_s == 800e9 / 8 and b300.scale_up_bytes_per_s == 1.8e12 / 2
    assert mi355x.memory_bytes == b300.memory_bytes == 288 * GiB
