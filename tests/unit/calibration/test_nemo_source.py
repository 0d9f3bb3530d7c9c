"""The NeMo performance rows: what is loaded, what is left out and why."""

from __future__ import annotations

from autoplan.calibration.accuracy import TIME_SOURCES
from autoplan.calibration.nemo_source import load_nemo


def test_rows_cover_three_gpus_dense_and_moe_and_every_row_is_fp8():
    source = load_nemo()
    assert {r.hardware for r in source.rows} == {"h100-sxm", "b200", "gb200-nvl72"}
    assert any(r.model.is_moe for r in source.rows) and any(not r.model.is_moe for r in source.rows)
    assert all(r.layout["precision"] == "fp8" and r.has_time for r in source.rows)
    assert "nemo" in TIME_SOURCES


def test_left_out_rows_say_why():
    reasons = {reason.split(" ")[0] for _, reason in load_nemo().excluded}
    assert reasons == {"task", "no", "model", "mbs"}  # fine-tuning, no tokens/s, no preset, bad batch


def test_current_scaling_rows_use_the_tensorwise_recipe_and_fsdp_rows_zero_3():
    rows = load_nemo().rows
    gb200 = [r for r in rows if r.hardware == "gb200-nvl72"]
    assert gb200 and all(r.fp8_recipe == "tensorwise" for r in gb200)
    assert all(r.fp8_recipe == "delayed" for r in rows if r.hardware == "h100-sxm")
    assert {r.layout["zero"] for r in gb200} == {1, 3}


def test_added_models_form_their_own_source_never_fitted_on():
    """The models given presets after the shipped fit (nemo_added) hold every row of theirs and
    none of nemo's, and the fit split takes none of them."""
    from autoplan.calibration.accuracy import HELD_OUT_SOURCES, fit_split
    from autoplan.calibration.nemo_source import load_nemo_added
    from autoplan.calibration.sources import load_sources

    added = load_nemo_added()
    names = {r.model.name for r in added.rows}
    assert names == {"gpt3-5b", "gpt3-20b", "llama2-13b", "nemotron-3-8b", "nemotron-3-22b",
                     "nemotron-4-15b", "nemotron-4-340b"}
    assert len(added.rows) == 19 and {r.hardware for r in added.rows} == {"h100-sxm", "b200", "gb200-nvl72"}
    assert not names & {r.model.name for r in load_nemo().rows}
    assert all(reason.startswith("task") for _, reason in added.excluded)
    assert "nemo_added" in TIME_SOURCES and "nemo_added" in HELD_OUT_SOURCES
    fitted = fit_split(load_sources(["nemo", "nemo_added"]))
    assert fitted and not any(i.startswith("nemo_added:") for i in fitted)


def test_tp_comm_overlap_follows_the_launcher_configs_and_nemo2_recipes():
    """NeMo 24.07's launcher configs set ub_tp_comm_overlap for GPT-3 20B, Llama 2/3 70B and
    Nemotron-3 8B/22B and not for GPT-3 175B or Nemotron-4 340B; the NeMo 2 performance recipes
    (25.02-25.07) set tp_comm_overlap for GPT-3 175B, Llama 3 70B/405B and Nemotron-3/4 but not
    Mixtral or Llama 3 8B; tp-1 rows have no TP traffic."""
    from autoplan.calibration.nemo_source import load_nemo_added

    def overlap(row) -> bool:
        options = dict(row.profile_overrides).get("options")
        return bool(options and options.tp_comm_overlap)

    rows = list(load_nemo().rows) + list(load_nemo_added().rows)
    nemo1 = [r for r in rows if r.hardware == "h100-sxm" and r.row_id not in ("nemo:121",)]
    on = {r.model.name for r in nemo1 if overlap(r)}
    assert on == {"gpt3-20b", "llama2-70b", "llama3-70b", "nemotron-3-8b", "nemotron-3-22b"}
    assert not any(overlap(r) for r in nemo1 if r.model.name in ("gpt3-175b", "nemotron-4-340b"))
    assert not any(overlap(r) for r in rows if r.layout["tp"] == 1)
    assert not any(overlap(r) for r in rows if r.model.name.startswith("mixtral"))
    nemo2 = {r.row_id: overlap(r) for r in rows if r.hardware != "h100-sxm" or r.row_id == "nemo:121"}
    assert nemo2["nemo:121"] and nemo2["nemo:113"] and nemo2["nemo_added:118"]  # GPT-3 175B 25.02, 340B B200
    assert all(overlap(r) for r in rows if r.hardware == "gb200-nvl72" and r.layout["tp"] > 1
               and not r.model.name.startswith("mixtral"))


def test_a_blank_vp_takes_the_vp_a_later_page_states_for_the_same_run():
    """The first 24.07 page has no VP column; later pages of the release state it for the same runs."""
    from autoplan.calibration.nemo_source import load_nemo_added

    vpp = {r.row_id: r.layout["vpp"] for r in list(load_nemo().rows) + list(load_nemo_added().rows)}
    assert (vpp["nemo:6"], vpp["nemo:28"]) == (20, 20)  # Llama 2 70B
    assert (vpp["nemo:11"], vpp["nemo:33"]) == (5, 5)  # Llama 3 70B
    assert (vpp["nemo_added:9"], vpp["nemo_added:31"]) == (12, 12)  # Nemotron-4 340B
    assert vpp["nemo:4"] == vpp["nemo_added:2"] == 1  # stated 1 later (Llama 2 7B, GPT-3 5B)


def test_nemo_2_4_rows_take_recompute_and_offload_from_the_recommended_configs():
    """Where a NeMo 25.07 row's checkpointing column points to NeMo's recommended configs, its
    layout takes that table's knobs: Llama 3.1 405B on 128 GB200 with Megatron-FSDP offloads 95
    layers' activations (NeMo v2.4.0 model_configs_gb200.csv), and only its profile may offload."""
    from autoplan.calibration.nemo_source import load_nemo
    from autoplan.calibration.validation import read_csv

    rows = {row.row_id: row for row in load_nemo().rows}
    row = rows["nemo:134"]
    assert row.layout["offload_layers"] == 95 and row.layout["recompute"] == "none"
    assert ("activation_offload", True) in row.profile_overrides
    pointed = [i for i, r in enumerate(read_csv("nemo_megatron_bridge_perf.csv"), start=2)
               if r["container"] == "NeMo 25.07" and r["activation_checkpointing"].startswith("see")]
    assert 134 in pointed
    others = [r for r in rows.values() if r.row_id != "nemo:134"]
    assert all(r.layout.get("offload_layers", 0) == 0 and r.layout["recompute"] == "none" for r in others)
    assert not any(("activation_offload", True) in r.profile_overrides for r in others)
