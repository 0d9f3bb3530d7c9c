"""The megatron-bridge export against Megatron-Bridge's own field names.

Megatron-Bridge does not import on a CPU (megatron/bridge/peft/lora_layers.py imports
transformer_engine.pytorch, a CUDA build), so its ConfigContainer cannot load the YAML here; the
field names of each section at tag v0.3.1 are test data (data/megatron_bridge_fields.yaml, written
by tests/trainers/megatron_bridge_fields.py from the source at that commit and megatron-core
0.16.1), and every key the export writes must be one of them.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from autoplan.api import plan_from_record
from autoplan.export import ExportError, LaunchOptions, render
from autoplan.export.megatron_bridge import OVERRIDES_FILE, RECIPE_OBJECTS, RECIPES, TARGETS, hydra_value
from autoplan.specs.models import load_model

FIELDS = yaml.safe_load((Path(__file__).parent / "data" / "megatron_bridge_fields.yaml").read_text())
SECTIONS = {name: set(names) for name, names in FIELDS["sections"].items()}
LAUNCHES = {"plain": LaunchOptions(), "mock": LaunchOptions(mock_data=True),
            "paths": LaunchOptions(tokenizer="meta-llama/Meta-Llama-3-70B", data_path="0.7 /d/a_text 0.3 /d/b_text",
                                   checkpoint_dir="/ckpt")}
PLANS = {
    "dense_vpp": ("llama3-70b", dict(gpus=64, tp=4, pp=2, vpp=5, zero=1, mbs=1, seq_len=8192, gbs_seqs=512,
                                     recompute="selective")),
    "uneven_full": ("llama3.1-405b", dict(gpus=1024, tp=8, pp=16, zero=1, mbs=1, seq_len=8192, gbs_seqs=512,
                                          recompute="full", recompute_layers=2)),
    "fsdp_hsdp": ("llama3-8b", dict(gpus=64, zero=3, hsdp=8, mbs=1, seq_len=8192, gbs_seqs=512)),
    "moe_offload_fp8": ("qwen3-30b-a3b", dict(gpus=32, ep=8, zero=3, mbs=2, seq_len=4096, gbs_seqs=256,
                                              precision="fp8", offload_layers=2)),
    "cpu_sgd": ("llama3-8b", dict(gpus=64, tp=2, zero=1, mbs=1, seq_len=8192, gbs_seqs=512, optimizer="sgd",
                                  offload="optimizer", recompute="full")),
}


def _overrides(plan: str, launch: str) -> dict:
    name, record = PLANS[plan]
    layout, training = plan_from_record(record)
    return yaml.safe_load(render("megatron-bridge", load_model(name), layout, training, LAUNCHES[launch]).files[OVERRIDES_FILE])


def test_field_list_names_its_commit():
    assert len(FIELDS["source_commit"]) == 40 and "tensor_model_parallel_size" in SECTIONS["model"]


@pytest.mark.parametrize("launch", LAUNCHES)
@pytest.mark.parametrize("plan", PLANS)
def test_every_key_is_a_configcontainer_field(plan, launch):
    data = _overrides(plan, launch)
    assert set(data) <= SECTIONS[""], set(data) - SECTIONS[""]
    unknown = {f"{section}.{key}" for section, values in data.items() for key in values
               if key not in SECTIONS[section] and key != "_target_"}
    assert not unknown
    # a section written whole is an object of that section's class (instantiated by Bridge)
    assert all(values["_target_"] == TARGETS[section] for section, values in data.items() if "_target_" in values)


@pytest.mark.parametrize("plan", PLANS)
def test_a_section_the_recipe_holds_as_a_name_or_none_is_written_whole(plan):
    """recipes/common.py _pretrain_common: comm_overlap=None, mixed_precision='bf16_mixed'; a
    field of either cannot be overridden (Hydra: "Could not override 'mixed_precision.bf16'")."""
    name, _ = PLANS[plan]
    objects = RECIPE_OBJECTS.get(RECIPES[name], set())
    data = _overrides(plan, "plain")
    assert ("_target_" in data["mixed_precision"]) == ("mixed_precision" not in objects)
    if "comm_overlap" not in objects:
        assert "comm_overlap" not in data or "_target_" in data["comm_overlap"]


def test_no_checkpoint_dir_saves_nothing():
    """The recipes save to ./nemo_experiments/default/checkpoints (recipes/common.py); without
    --checkpoint-dir the export writes save/load null, as its header warning says."""
    assert _overrides("dense_vpp", "plain")["checkpoint"] == {"save": None, "load": None}
    assert _overrides("dense_vpp", "paths")["checkpoint"]["save"] == "/ckpt"


def test_blend_is_megatron_cores_prefixes_and_weights():
    """GPTDatasetConfig.blend: (prefixes, weights); '0.7 /d/a_text 0.3 /d/b_text' -> both lists."""
    assert _overrides("dense_vpp", "paths")["dataset"]["blend"] == [["/d/a_text", "/d/b_text"], [0.7, 0.3]]


def test_mock_data_only_when_asked():
    assert _overrides("dense_vpp", "mock")["dataset"]["mock"] is True
    assert _overrides("dense_vpp", "plain")["dataset"]["mock"] is False


def test_a_model_without_a_recipe_is_refused():
    layout, training = plan_from_record(dict(gpus=8, zero=0, gbs_seqs=8, seq_len=4096))
    with pytest.raises(ExportError, match="no v0.3.1 recipe builds 'mixtral-8x7b'"):
        render("megatron-bridge", load_model("mixtral-8x7b"), layout, training)


@pytest.mark.parametrize(("value", "text"), [(None, "null"), (True, "true"), (8, "8"), ([["/a b"], None], "[['/a b'],null]"),
                                             ("99,1,0", "'99,1,0'"), ("selective", "selective"), ("it's", "'it\\'s'"),
                                             ({"_target_": "torch.bfloat16", "_call_": False},
                                              "{_target_:torch.bfloat16,_call_:false}")])
def test_hydra_values(value, text):
    assert hydra_value(value) == text


@pytest.mark.parametrize(("recipe", "expected"), [
    # Bridge v0.3.1's presets (megatron/bridge/training/mixed_precision.py): bf16_with_mxfp8_mixed,
    # bf16_with_fp8_delayed_scaling_mixed, bf16_with_fp8_current_scaling_mixed
    ("mxfp8", {"fp8": "e4m3", "fp8_recipe": "mxfp8"}),
    ("delayed", {"fp8": "hybrid", "fp8_recipe": "delayed", "fp8_margin": 0, "fp8_amax_history_len": 1024,
                 "fp8_amax_compute_algo": "max"}),
    ("tensorwise", {"fp8": "hybrid", "fp8_recipe": "tensorwise"}),
])
def test_fp8_fields_follow_bridges_own_preset_of_the_recipe(recipe, expected):
    hardware = "b200" if recipe == "mxfp8" else "h100-sxm"
    layout, training = plan_from_record(dict(gpus=64, tp=4, pp=2, zero=1, mbs=1, seq_len=8192, gbs_seqs=512,
                                             precision="fp8", fp8_recipe=recipe), hardware=hardware)
    data = yaml.safe_load(render("megatron-bridge", load_model("llama3-70b"), layout, training).files[OVERRIDES_FILE])
    precision = data["mixed_precision"]
    assert {k: precision[k] for k in expected} == expected
    assert recipe == "delayed" or "fp8_amax_history_len" not in precision


def test_cuda_graphs_carry_what_the_bridge_asserts():
    """v0.3.1: graphs run with TE's RNG tracker (scripts/performance/utils/overrides.py), the full
    iteration with the loss NaN check off (training/config.py asserts it); eager writes neither."""
    import dataclasses

    import yaml

    from autoplan.api import plan_from_record
    from autoplan.export import render
    from autoplan.specs.models import load_model

    layout, training = plan_from_record({"gpus": 8, "seq_len": 4096, "gbs_seqs": 64, "zero": 1})

    def sections(graphs: str) -> dict:
        files = render("megatron-bridge", load_model("llama3-8b"), layout,
                       dataclasses.replace(training, cuda_graphs=graphs)).files
        return yaml.safe_load(files["megatron_bridge_overrides.yaml"])

    full, attn, eager = sections("full_iteration"), sections("attn"), sections("none")
    assert full["model"]["cuda_graph_impl"] == "local" and full["model"]["cuda_graph_scope"] == ["full_iteration"]
    assert full["rerun_state_machine"] == {"check_for_nan_in_loss": False}
    assert full["rng"]["te_rng_tracker"] is True and full["rng"]["seed"] == eager["rng"]["seed"]
    assert attn["model"]["cuda_graph_scope"] == ["attn"] and "rerun_state_machine" not in attn
    assert "cuda_graph_impl" not in eager["model"] and "te_rng_tracker" not in eager["rng"]
