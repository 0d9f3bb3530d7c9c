"""Megatron-Bridge's performance rows (calibration/megatron_bridge_source.py): what is loaded, what
is left out and why, and the recipe settings each loaded row carries."""

from __future__ import annotations

import pytest

from autoplan.calibration.megatron_bridge_source import MEGATRON_BRIDGE_FILE, load_megatron_bridge
from autoplan.calibration.validation import read_csv


@pytest.fixture(scope="module")
def source():
    return load_megatron_bridge()


@pytest.fixture(scope="module")
def lines():
    return {f"megatron_bridge:{i + 2}": r for i, r in enumerate(read_csv(MEGATRON_BRIDGE_FILE))}


def test_every_line_is_a_row_or_left_out_with_its_reason(source, lines):
    ids = [r.row_id for r in source.rows] + [i for i, _ in source.excluded]
    assert sorted(ids) == sorted(lines) and len(ids) == len(set(ids))
    reasons = {reason.split(" = ")[0].split(" (")[0] for _, reason in source.excluded}
    assert reasons == {"release 25.09", "release 26.08", "task", "model", "precision", "system"}
    assert all(lines[i]["model"].startswith(("LLAMA3", "Qwen3", "DeepSeekV3")) for i in (r.row_id for r in source.rows))


def test_rows_are_llama_qwen3_and_deepseek_pretraining_on_four_gpus_never_fitted(source):
    from autoplan.calibration.accuracy import HELD_OUT_SOURCES, TIME_SOURCES, fit_split
    from autoplan.calibration.sources import load_sources

    assert {r.hardware for r in source.rows} == {"h100-sxm", "b200", "gb200-nvl72", "gb300-nvl72"}
    assert {r.model.name for r in source.rows} == {"llama3-8b", "llama3-70b", "llama3.1-405b", "qwen3-30b-a3b",
                                                   "qwen3-235b-a22b", "deepseek-v3"}
    assert len(source.rows) >= 100 and all(r.has_time and r.trainer == "megatron" for r in source.rows)
    assert "megatron_bridge" in TIME_SOURCES and "megatron_bridge" in HELD_OUT_SOURCES
    fitted = fit_split(load_sources(["nemo", "megatron_bridge"]))
    assert fitted and not any(i.startswith("megatron_bridge:") for i in fitted)


def test_precision_names_map_to_the_recipes_that_ran(source, lines):
    """FP8 and FP8-CS are Transformer Engine's tensorwise current scaling, MXFP8 and FP8-MX mxfp8;
    both with FP8 parameter all-gather and bf16 gradient reduction (module doc)."""
    expected = {"FP8": "tensorwise", "FP8-CS": "tensorwise", "MXFP8": "mxfp8", "FP8-MX": "mxfp8"}
    for row in source.rows:
        settings = dict(row.settings)
        assert settings["grad_reduce_in_bf16"] is True
        if row.layout["precision"] == "fp8":
            assert row.fp8_recipe == expected[lines[row.row_id]["precision"]] and settings["fp8_param_gather"]


def test_fp8_attention_where_the_config_sets_fp8_dot_product_attention(source, lines):
    """The 26.06 DeepSeek-V3 and Qwen3 MXFP8 configs (GB200, GB300) set fp8_dot_product_attention;
    their rows carry fp8_attention, no other row does (module doc)."""
    marked = {r.row_id for r in source.rows if dict(r.settings).get("fp8_attention")}
    expected = {r.row_id for r in source.rows if lines[r.row_id]["fp8_dot_product_attention"] == "True"}
    assert marked == expected and len(marked) == 10  # 11 lines, the DGX-B300 one left out (no preset)
    assert {(lines[i]["release"], lines[i]["precision"]) for i in marked} == {("26.06", "MXFP8"), ("26.06.01", "MXFP8")}


def test_a_two_value_cell_is_two_runs_of_one_layout(source, lines):
    """'FP8-CS (FP8-MX)' with '31508 (29789)': the first value under the first recipe, the
    parenthesised one under the second, the same layout."""
    by_id = {r.row_id: r for r in source.rows}
    pairs = [(i, j) for i, j in zip(lines, list(lines)[1:])
             if lines[i]["cell_value"] == "first" and lines[j]["cell_value"] == "parenthesised" and i in by_id]
    assert pairs
    for i, j in pairs:
        assert by_id[i].layout == by_id[j].layout and by_id[i].fp8_recipe != by_id[j].fp8_recipe
        assert by_id[i].tokens_per_s_per_gpu == float(lines[i]["tokens_per_s_per_gpu"])


def test_recipe_settings_reach_the_layout(source, lines):
    """Megatron-FSDP is ZeRO 3, cpu_offloading_num_layers the offloaded layers (with the profile
    fact that lets them through), 405B counts the embedding and loss as pipeline layers, tp > 1
    overlaps its collectives."""
    rows = list(source.rows)
    for row in rows:
        line = lines[row.row_id]
        fsdp = line["use_megatron_fsdp"] == "True" or (line["fsdp"] not in ("", "0"))
        assert row.layout["zero"] == (3 if fsdp else 1)
        assert row.layout["offload_layers"] == int(line["cpu_offloading_num_layers"] or 0)
        overrides = dict(row.profile_overrides)
        assert ("activation_offload" in overrides) == (row.layout["offload_layers"] > 0)
        if row.layout["tp"] > 1:
            assert overrides["options"].tp_comm_overlap
        assert row.layout["pp_split"] == ("embed-loss" if row.model.name == "llama3.1-405b" else "balanced")
    assert any(r.layout["offload_layers"] > 0 for r in rows) and any(r.layout["zero"] == 3 for r in rows)
    matched = {lines[r.row_id]["recipe_match"] for r in rows}
    assert matched <= {"release tag", "other tag", "none"} and "release tag" in matched


def test_moe_rows_take_the_dispatcher_and_overlap_their_config_sets(source, lines):
    """Qwen3: the flex dispatcher (DeepEP or HybridEP) where the config names a backend, the
    expert all-to-all overlap as the config sets it (WorkloadBaseConfig's default: off), expert tp 1."""
    from autoplan.profiles import load_profile

    def options(row):
        return dict(row.profile_overrides).get("options", load_profile("megatron").options)

    moe = [r for r in source.rows if r.model.is_moe]
    assert moe
    for row in moe:
        line = lines[row.row_id]
        assert options(row).moe_token_dedup == (line["moe_flex_dispatcher_backend"] in ("deepep", "hybridep"))
        assert options(row).moe_a2a_overlap == (line["moe_a2a_overlap"] == "True")
        assert row.layout["etp"] == 1
        # Qwen3's scripts clear recompute; DeepSeek-V3's set selective, of the config's modules
        deepseek = row.model.name == "deepseek-v3"
        assert row.layout["recompute"] == ("selective" if deepseek else "none")
        if deepseek:
            assert row.layout.get("recompute_modules", "") == line["recompute_modules"]
            assert row.model.num_mtp_layers == (0 if "w/o MTP" in line["model"] else 1)
    assert {options(r).moe_a2a_overlap for r in moe} == {True, False}


@pytest.mark.parametrize("impl, scope, expected", [
    ("", "", "none"), ("none", "full_iteration", "none"),  # no graph built: the scope means nothing
    ("transformer_engine", "moe_router,moe_preprocess", "moe_router,moe_preprocess"),
    ("transformer_engine", "attn,moe_router,moe_preprocess", "attn,moe_router,moe_preprocess"),
    ("local", "full_iteration", "full_iteration"), ("full_iteration", "", "full_iteration"),
])
def test_cuda_graph_columns_map_to_the_setting(impl, scope, expected):
    from autoplan.calibration.megatron_bridge_source import cuda_graphs

    assert cuda_graphs({"cuda_graph_impl": impl, "cuda_graph_scope": scope}) == expected


def test_an_unknown_cuda_graph_scope_is_an_error():
    from autoplan.calibration.megatron_bridge_source import cuda_graphs

    with pytest.raises(ValueError, match="cuda_graph_impl 'transformer_engine' with cuda_graph_scope 'mamba'"):
        cuda_graphs({"cuda_graph_impl": "transformer_engine", "cuda_graph_scope": "mamba"})


def test_rows_carry_their_cuda_graphs(source, lines):
    """Each row's setting is its CSV columns' (the mapping above); the page's rows hold every value
    but attn alone."""
    from autoplan.calibration.megatron_bridge_source import cuda_graphs

    seen = set()
    for row in source.rows:
        value = dict(row.settings).get("cuda_graphs", "none")
        assert value == cuda_graphs(lines[row.row_id])
        seen.add(value)
    assert seen == {"none", "moe_router,moe_preprocess", "attn,moe_router,moe_preprocess", "full_iteration"}
