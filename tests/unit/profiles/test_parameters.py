"""Physical efficiencies and corrections: self-description, sourced defaults, strict YAML with
errors naming the file and key, the older flat profile-file form, and flags on fitted values."""

from __future__ import annotations

import dataclasses

import pytest
import yaml

from autoplan.calibration.profile_file import apply_profile_file
from autoplan.errors import SpecError
from autoplan.profiles import (
    PARAMETERS,
    Corrections,
    PhysicalEfficiency,
    flag_fitted,
    flag_values,
    list_trainers,
    load_profile,
)
from autoplan.profiles.efficiency import CORRECTIONS, PHYSICAL, neutral_corrections
from autoplan.profiles.parameter_files import DEFAULTS_PATH, load_defaults, profile_parameters, sourced_values

WHERE = "x.yaml"


# --- the two dataclasses describe themselves ---------------------------------------------------

@pytest.mark.parametrize("cls", [PhysicalEfficiency, Corrections])
def test_every_field_has_doc_unit_bounds_and_plausible_range_and_no_python_default(cls):
    for f in dataclasses.fields(cls):
        meta = f.metadata
        assert meta["doc"].endswith(".") and "unit" in meta, f.name
        (low, high), (lo, hi) = meta["bounds"], meta["plausible"]
        assert low <= lo < hi <= high, f.name  # the plausible range lies inside the bounds
        assert f.default is dataclasses.MISSING, f.name  # defaults live in defaults.yaml


def test_physical_fractions_never_exceed_one_and_corrections_have_a_neutral_value():
    for name, p in PARAMETERS.items():
        if p.kind == PHYSICAL and p.unit == "":
            assert 0.0 <= p.bounds[0] and p.bounds[1] == 1.0, name
        if p.kind == CORRECTIONS:
            assert p.bounds[0] <= p.neutral <= p.bounds[1], name
    neutral = neutral_corrections()
    assert neutral.unfused_attention_factor == 1.0 and neutral.memory_reserve_bytes == 0.0


def test_the_two_kinds_do_not_share_a_name():
    physical = {f.name for f in dataclasses.fields(PhysicalEfficiency)}
    corrections = {f.name for f in dataclasses.fields(Corrections)}
    assert not physical & corrections and len(PARAMETERS) == len(physical) + len(corrections)


# --- defaults: every value sourced, inside its plausible range -------------------------------

def test_shared_defaults_give_every_parameter_a_source():
    data = yaml.safe_load(DEFAULTS_PATH.read_text())
    for name, p in PARAMETERS.items():
        assert data[p.kind][name]["source"].strip(), name
    defaults = load_defaults()
    for name, p in PARAMETERS.items():  # a default is plausible (neutral values may sit on a bound)
        assert p.plausible[0] <= defaults.value(name) <= p.plausible[1], name


def test_every_profile_loads_with_its_gradient_reduction_dtype():
    # Megatron, torchtitan, nanotron and HF reduce fp32 gradients; DeepSpeed the bf16/fp16 ones.
    # llm-foundry's Composer FSDP 'DEFAULT' mixed precision reduces in fp32 too.
    # A trainer that inherits takes its base's dtype unless it says otherwise (megatron-bridge:
    # megatron's; its recipes keep grad_reduce_in_fp32), so only the base trainers are listed.
    expected = {"megatron": 4, "torchtitan": 4, "nanotron": 4, "hf": 4, "deepspeed": 2, "llmfoundry": 4}
    for trainer in list_trainers():
        profile = load_profile(trainer)
        base = next(name for name in profile.family if name in expected)  # the trainer itself, else a base
        assert profile.model_states.grad_reduce_bytes == expected[base], trainer
        assert profile.parameters["default"].fitted == ()


def test_a_profile_default_overrides_the_shared_one_and_is_not_marked_fitted():
    nanotron = load_profile("nanotron").parameters["default"]
    assert nanotron.corrections.memory_pressure_threshold == 0.90
    assert load_profile("megatron").parameters["default"].corrections.memory_pressure_threshold == 1.0


def test_sourced_value_without_a_source_is_refused_naming_file_and_key():
    data = {"corrections": {"step_overhead_s": {"value": 0.1}}}
    with pytest.raises(SpecError, match=r"x.yaml: corrections.step_overhead_s: missing required key\(s\): source"):
        sourced_values(data, WHERE)
    data = {"corrections": {"step_overhead_s": {"value": 0.1, "source": " "}}}
    with pytest.raises(SpecError, match="x.yaml: corrections.step_overhead_s: source: must say where"):
        sourced_values(data, WHERE)


@pytest.mark.parametrize("section, name, value, message", [
    ("physical_efficiency", "gemm_efficiency_max", 1.2,
     r"physical_efficiency.gemm_efficiency_max: must lie in \[0.05, 1\], got 1.2"),
    ("physical_efficiency", "dp_overlap", -0.1, r"physical_efficiency.dp_overlap: must lie in \[0, 1\], got -0.1"),
    ("corrections", "unfused_attention_factor", 0.5,
     r"corrections.unfused_attention_factor: must lie in \[1, 50\]"),
    ("corrections", "allocator_overhead", "5%", "corrections.allocator_overhead: expected a number, got '5%'"),
])
def test_out_of_bounds_values_are_refused_naming_file_and_key(section, name, value, message):
    with pytest.raises(SpecError, match="x.yaml: " + message):
        sourced_values({section: {name: {"value": value, "source": "s"}}}, WHERE)


def test_a_parameter_in_the_wrong_section_or_flat_names_its_section():
    with pytest.raises(SpecError, match="corrections.gemm_efficiency_max: belongs under 'physical_efficiency:'"):
        sourced_values({"corrections": {"gemm_efficiency_max": {"value": 0.7, "source": "s"}}}, WHERE)
    block = {"calibrated": {"h100-sxm": {"fitted_on": "rows", "scale_out_efficiency": 0.6}}}
    with pytest.raises(SpecError, match="scale_out_efficiency: parameters now sit in two sections; "
                                        "put it under 'physical_efficiency:'"):
        profile_parameters(block, WHERE)


def test_the_old_efficiency_block_of_a_profile_names_the_new_sections():
    with pytest.raises(SpecError, match="x.yaml: efficiency: replaced by 'defaults:'.*'calibrated:"):
        profile_parameters({"efficiency": {"default": {}}}, WHERE)


def test_a_calibrated_block_needs_fitted_on():
    block = {"calibrated": {"h100-sxm": {"physical_efficiency": {"scale_out_efficiency": 0.6}}}}
    with pytest.raises(SpecError, match="calibrated.h100-sxm: expected fitted_on"):
        profile_parameters(block, WHERE)


def test_calibrated_values_sit_on_top_of_the_defaults_and_are_marked_fitted():
    block = {"defaults": {"physical_efficiency": {"hbm_efficiency": {"value": 0.7, "source": "s"}}},
             "calibrated": {"h100-sxm": {"fitted_on": "rows", "physical_efficiency": {"scale_out_efficiency": 0.6},
                                         "corrections": {"step_overhead_s": 0.2}}}}
    params = profile_parameters(block, WHERE)
    fitted = params["h100-sxm"]
    assert fitted.efficiency.scale_out_efficiency == 0.6 and fitted.corrections.step_overhead_s == 0.2
    assert fitted.efficiency.hbm_efficiency == 0.7  # the profile's default
    assert fitted.fitted == ("scale_out_efficiency", "step_overhead_s") and fitted.fitted_on == "rows"


# --- calibrated profile files: the two sections, and the older flat form ---------------------

def _file(tmp_path, body: dict):
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump({"trainer": "megatron", "hardware": "a100-80gb", **body}))
    return path


def test_profile_file_with_two_sections(tmp_path):
    path = _file(tmp_path, {"fitted_on": "mine", "physical_efficiency": {"gemm_efficiency_max": 0.7},
                            "corrections": {"step_overhead_s": 0.3}})
    params = apply_profile_file(load_profile("megatron"), "a100-80gb", path).parameters_for("a100-80gb")
    assert params.efficiency.gemm_efficiency_max == 0.7 and params.corrections.step_overhead_s == 0.3
    assert params.fitted_on == "mine"
    # the shipped non-flash correction of megatron/a100-80gb is kept (the file does not set it)
    assert params.corrections.unfused_attention_factor == load_profile("megatron").parameters_for(
        "a100-80gb").corrections.unfused_attention_factor > 1.0


def test_old_flat_profile_file_is_mapped_onto_the_sections(tmp_path):
    path = _file(tmp_path, {"efficiency": {"gemm_efficiency_max": 0.7, "attention_efficiency": 0.05,
                                           "collective_overhead_s": 2e-5, "fitted_on": "old"}})
    params = apply_profile_file(load_profile("megatron"), "a100-80gb", path).parameters_for("a100-80gb")
    assert params.efficiency.attention_efficiency == 0.05
    assert params.corrections.collective_overhead_s == 2e-5 and params.fitted_on == "old"
    # the old attention_efficiency already carried the non-flash slow-down: neutral correction
    assert params.corrections.unfused_attention_factor == 1.0


def test_profile_file_errors_name_the_file_and_key(tmp_path):
    path = _file(tmp_path, {"physical_efficiency": {"scale_up_efficiency": 2.0}})
    with pytest.raises(SpecError, match=r"p.yaml: physical_efficiency.scale_up_efficiency: must lie in \[0.05, 1\]"):
        apply_profile_file(load_profile("megatron"), "a100-80gb", path)
    path = _file(tmp_path, {"efficiency": {"gemm_eff_max": 0.7}})
    with pytest.raises(SpecError, match="unknown key 'gemm_eff_max' \\(did you mean 'gemm_efficiency_max'\\?\\)"):
        apply_profile_file(load_profile("megatron"), "a100-80gb", path)
    path = _file(tmp_path, {"efficiency": {"gemm_efficiency_max": 0.7}, "corrections": {"step_overhead_s": 0.1}})
    with pytest.raises(SpecError, match="give either the flat 'efficiency:' or 'physical_efficiency:'"):
        apply_profile_file(load_profile("megatron"), "a100-80gb", path)
    path = _file(tmp_path, {"fit": {}})
    with pytest.raises(SpecError, match="no parameters: expected the sections 'physical_efficiency:'"):
        apply_profile_file(load_profile("megatron"), "a100-80gb", path)


# --- flags ----------------------------------------------------------------------------------

def test_flags_on_a_bound_and_outside_the_plausible_range():
    flags = {f.name: f.reason for f in flag_values({
        "gemm_efficiency_max": 0.996,            # inside the bounds, above plausible 0.9
        "scale_out_efficiency": 0.7,             # plausible: no flag
        "gemm_half_flops": 1e12,                 # on the upper bound
        "allocator_overhead": 1e-8,              # on the lower bound, which is its neutral value
        "unfused_attention_factor": 8.9})}  # plausible 1-4
    assert set(flags) == {"gemm_efficiency_max", "gemm_half_flops", "allocator_overhead",
                          "unfused_attention_factor"}
    assert flags["gemm_efficiency_max"] == "outside its plausible range [0.5, 0.9]"
    assert flags["gemm_half_flops"].startswith("on its bound 1e+12")
    assert "neutral value" in flags["allocator_overhead"]


def test_the_shipped_fits_that_stand_in_for_missing_mechanisms_are_flagged():
    # The fitted values that stand in for missing mechanisms: nanotron's 0.57 ms floor per TP
    # collective and 0.27 ms per collective and rank on cross-node pipelines. nanotron's 149 B of
    # element-wise traffic is not among them: it lies between a compiled layer's (37-42 B) and an
    # eager one's (180-204 B), both measured. torchtitan's 1.4 ms fixed time per GEMM (8.7e11
    # FLOP) is gone: no longer fitted (its leave-one-source-out benefit was -0.6 pt), it holds the
    # default, and nothing torchtitan fits is flagged.
    nanotron = {f.name for f in flag_fitted(load_profile("nanotron").parameters["h100-sxm-efa"])}
    assert {"collective_overhead_s", "pp_cross_tp_sync_s"} <= nanotron
    assert "elementwise_bytes_per_token_hidden" not in nanotron
    torchtitan = load_profile("torchtitan").parameters["h100-96gb-500w"]
    assert flag_fitted(torchtitan) == []
    assert torchtitan.value("gemm_half_flops") == load_profile("torchtitan").parameters["default"].value("gemm_half_flops")


def test_megatron_a100_and_h100_fits_stay_in_their_plausible_ranges():
    # A100: the eager attention's full-square bmm, score traffic and dropout are mechanisms
    # (cost/time.py attention_s), so the non-flash correction is back in its range. H100: the
    # FLOP count of Megatron's own log (validation.megatron_flops_per_token) and gemm_half_flops
    # at its default.
    megatron = load_profile("megatron")
    for gpu in ("a100-80gb", "h100-sxm"):
        assert flag_fitted(megatron.parameters[gpu]) == [], gpu
