"""A plans.json carries the inputs its plans were searched with (model, hardware, cluster, profile,
setup), and `export` prices and writes the plan for them; CSV columns named otherwise are refused."""

from __future__ import annotations

import json
import shutil

import pytest
from click.testing import CliRunner

from autoplan.cli import main
from autoplan.paths import data_dir


def invoke(args: list[str]):
    return CliRunner().invoke(main, [str(a) for a in args])


def test_export_of_a_gb200_search_launches_its_own_node_shape(tmp_path):
    """`export <plans.json of a GB200 search> --to megatron` wrote NPROC_PER_NODE=8 (the H100
    default) unless --hardware was given again; `search --export` got it right."""
    out = tmp_path / "run"
    searched = invoke(["search", "--hardware", "gb200-nvl72", "-m", "8b", "-g", "16", "--gbs-seqs", "64",
                       "--top", "1", "--out", out])
    assert searched.exit_code == 0, searched.output
    recorded = json.loads((out / "plans.json").read_text())["inputs"]
    assert recorded["hardware"] == {"ref": "gb200-nvl72"} and recorded["gpus_per_node"] == 4
    exported = invoke(["export", out / "plans.json", "--to", "megatron"])
    assert exported.exit_code == 0, exported.output
    assert "NPROC_PER_NODE=4\nNNODES=4\n" in exported.stdout


def test_export_reads_a_model_file_the_search_was_given_and_notes_a_later_edit(tmp_path):
    config = tmp_path / "my-model.yaml"
    shutil.copy(data_dir("model_db") / "llama3-8b.yaml", config)
    out = tmp_path / "run"
    searched = invoke(["search", "-m", config, "-g", "16", "--gbs-seqs", "64", "--top", "1", "--out", out])
    assert searched.exit_code == 0, searched.output
    model = json.loads((out / "plans.json").read_text())["inputs"]["model"]
    assert model["ref"] == str(config.resolve()) and len(model["sha256"]) == 64
    exported = invoke(["export", out / "plans.json", "--to", "megatron"])  # no --model: read from the plan
    assert exported.exit_code == 0, exported.output
    assert "note:" not in exported.output.split("#!")[0]
    config.write_text(config.read_text() + "\n# edited\n")
    edited = invoke(["export", out / "plans.json", "--to", "megatron"])
    assert edited.exit_code == 0 and f"note: {config.resolve()} has changed" in edited.output


def test_export_with_another_model_is_refused(tmp_path):
    """`export plans.json -m 70b` of an 8B plan printed the 8B plan's 62.8 GiB and tokens/s for a
    70B layout that does not fit (339 GiB); an alias of the plan's own model is fine."""
    out = tmp_path / "run"
    assert invoke(["search", "-m", "8b", "-g", "64", "--gbs-seqs", "512", "--top", "1", "--out", out]).exit_code == 0
    result = invoke(["export", out / "plans.json", "--to", "megatron", "-m", "70b"])
    assert result.exit_code == 2 and "holds plans for llama3-8b, not 70b" in result.output
    assert "predicted for this plan" not in result.output
    same = invoke(["export", out / "plans.json", "--to", "megatron", "-m", "llama3-8b"])
    assert same.exit_code == 0, same.output


def test_compare_refuses_a_knob_column_spelled_as_another_tool_spells_it(tmp_path):
    """A `micro_batch` column was passed through as a label and the row evaluated at mbs=1."""
    (tmp_path / "in.csv").write_text("tp,micro_batch\n2,4\n", encoding="utf-8")
    result = invoke(["compare", tmp_path / "in.csv", "-m", "8b", "-g", "64", "--gbs-tokens", "2M"])
    assert result.exit_code == 2
    assert "column 'micro_batch' is not read: autoplan reads this knob as 'mbs'" in result.output
    (tmp_path / "typo.csv").write_text("tp,recompte\n2,full\n", encoding="utf-8")
    typo = invoke(["compare", tmp_path / "typo.csv", "-m", "8b", "-g", "64", "--gbs-tokens", "2M"])
    assert typo.exit_code == 2 and "unknown column 'recompte' (did you mean 'recompute'?)" in typo.output
    (tmp_path / "label.csv").write_text("name,tp\nmine,2\n", encoding="utf-8")  # a label column passes
    assert invoke(["compare", tmp_path / "label.csv", "-m", "8b", "-g", "64", "--gbs-tokens", "2M"]).exit_code == 0


def test_a_calibrated_profile_reaches_the_overlap_flags_the_export_writes(tmp_path):
    """The exporters read the built-in megatron profile themselves, so a user's --profile (a
    calibrated dp_overlap of 0: nothing of the gradient reduction hidden) never reached the
    --overlap-grad-reduce flag they write; a search's recorded profile reaches it too."""
    profile = tmp_path / "mine.yaml"
    profile.write_text("trainer: megatron\nhardware: h100-sxm\nfitted_on: my cluster\n"
                       "physical_efficiency: {dp_overlap: 0.0}\n", encoding="utf-8")
    args = ["export", "--to", "megatron", "-m", "8b", "-g", 16, "--gbs-seqs", 64, "--tp", 1, "--zero", 1]
    assert "--overlap-grad-reduce" in invoke(args).stdout
    assert "--overlap-grad-reduce" not in invoke([*args, "--profile", profile]).stdout
    out = tmp_path / "run"
    searched = invoke(["search", "-m", "8b", "-g", 16, "--gbs-seqs", 64, "--tp", 1, "--pp", 1, "--cp", 1,
                       "--zero", 1, "--profile", profile, "--top", 1, "--out", out])
    assert searched.exit_code == 0, searched.output
    exported = invoke(["export", out / "plans.json", "--to", "megatron"])
    assert exported.exit_code == 0 and "--overlap-grad-reduce" not in exported.stdout


def test_compare_writes_the_format_its_output_file_names(tmp_path):
    """`compare -o c.json` wrote CSV into c.json."""
    (tmp_path / "in.csv").write_text("tp,pp\n2,1\n", encoding="utf-8")
    args = ["compare", tmp_path / "in.csv", "-m", "8b", "-g", "64", "--gbs-tokens", "2M"]
    assert invoke([*args, "-o", tmp_path / "c.json"]).exit_code == 0
    assert json.loads((tmp_path / "c.json").read_text())[0]["tp"] in (2, "2")
    mismatch = invoke([*args, "-o", tmp_path / "d.json", "--format", "csv"])
    assert mismatch.exit_code == 2 and "names a .json file but --format is csv" in mismatch.output
    assert not (tmp_path / "d.json").exists()


def test_a_batch_too_small_for_the_gpus_gets_a_hint_the_options_accept(tmp_path):
    """`search -m 70b -g 100000 --gbs-tokens 4M` suggested --gbs-tolerance 5.1, which the option
    refuses (0 <= x < 1)."""
    result = invoke(["search", "-m", "70b", "-g", "100000", "--gbs-tokens", "4M", "--out", tmp_path / "run"])
    assert result.exit_code == 1
    assert "--gbs-tolerance 5.1" not in result.output
    assert "the batch is too small for 100000 GPUs: try --gbs-seqs 3125 or fewer GPUs" in result.output


def test_a_csv_cell_a_spreadsheet_would_run_is_written_as_text(tmp_path):
    """A cell starting with = + @ or - (a label, a model name, a reason) was written as is: opened
    in a spreadsheet it is a formula (CSV injection)."""
    (tmp_path / "in.csv").write_text('name,tp\n"=HYPERLINK(""http://x"")",2\n-1,2\n@SUM(A1),2\n', encoding="utf-8")
    out = invoke(["compare", tmp_path / "in.csv", "-m", "8b", "-g", "64", "--gbs-tokens", "2M", "--format", "csv"])
    assert out.exit_code == 0, out.output
    names = [line.split(",")[0] for line in out.stdout.splitlines()[1:]]
    assert names == ['"\'=HYPERLINK(""http://x"")"', "-1", "'@SUM(A1)"]  # a number stays a number


def test_spreadsheet_safe_leaves_numbers_and_plain_text():
    from autoplan.report.csv_text import spreadsheet_safe

    assert [spreadsheet_safe(t) for t in ("-0.5", "+3", "abc", "=1+1", "-cmd", "")] == \
        ["-0.5", "+3", "abc", "'=1+1", "'-cmd", ""]


def test_a_user_profile_says_the_band_is_not_its_own(tmp_path):
    """A search or estimate with a calibrated --profile showed the shipped band as if it were the
    profile's (issue 47: a 6-row calibration with no cross-validation)."""
    profile = tmp_path / "mine.yaml"
    profile.write_text("trainer: megatron\nhardware: h100-sxm\nfitted_on: 3 rows\n"
                       "physical_efficiency: {gemm_efficiency_max: 0.7}\n", encoding="utf-8")
    args = ["-m", "8b", "-g", 16, "--gbs-seqs", 64, "--profile", profile]
    estimate = invoke(["estimate", *args, "--tp", 2])
    assert "the error bands are the shipped profiles' (error_bands.yaml), not your --profile's" in estimate.output
    search = invoke(["search", *args, "--out", tmp_path / "run"])
    assert search.exit_code == 0 and "not your --profile's" in search.output
    plain = invoke(["estimate", "-m", "8b", "-g", 16, "--gbs-seqs", 64, "--tp", 2])
    assert "not your --profile's" not in plain.output


def _search(tmp_path, *extra):
    out = tmp_path / "run"
    searched = invoke(["search", "-m", "8b", "-g", "16", "--gbs-seqs", "64", "--top", "3", "--out", out, *extra])
    assert searched.exit_code == 0, searched.output
    return out / "plans.json", json.loads((out / "plans.json").read_text())


def test_estimate_of_a_plan_prices_it_as_the_search_did(tmp_path):
    """`estimate --plan` existed nowhere: a plan could only be priced again by retyping its model,
    cluster and layout. Each rank's tokens/s and peak memory are the search's own."""
    plans, data = _search(tmp_path, "--hardware", "gb200-nvl72")
    for rank in (1, 2, 3):
        result = invoke(["estimate", "--plan", plans, "--rank", rank, "--format", "json"])
        assert result.exit_code == 0, result.output
        record, searched = json.loads(result.stdout)[0], data["plans"][rank - 1]
        assert record["hardware"] == "gb200-nvl72" and record["gpus"] == 16
        assert record["tokens_per_s_per_gpu"] == pytest.approx(searched["tokens_per_s_per_gpu"], rel=1e-9)
        assert record["peak_memory_bytes"] == pytest.approx(searched["peak_memory_bytes"], rel=1e-9)


def test_estimate_of_a_plan_takes_the_trainer_it_was_searched_for(tmp_path):
    plans, data = _search(tmp_path, "--trainer", "torchtitan")
    result = invoke(["estimate", "--plan", plans, "--format", "json"])
    assert result.exit_code == 0, result.output
    record = json.loads(result.stdout)[0]
    assert record["trainer"] == "torchtitan"
    assert record["tokens_per_s_per_gpu"] == pytest.approx(data["plans"][0]["tokens_per_s_per_gpu"])
    other = invoke(["estimate", "--plan", plans, "--trainer", "megatron", "--format", "json"])
    assert other.exit_code == 0 and "searched for trainer 'torchtitan'" in other.stderr
    assert json.loads(other.stdout)[0]["trainer"] == "megatron"


def test_explain_of_a_plan_names_its_layout_and_cluster(tmp_path):
    plans, data = _search(tmp_path, "--hardware", "h200")
    result = invoke(["explain", "--plan", plans, "--rank", 2])
    assert result.exit_code == 0, result.output
    title, plan = result.stdout.splitlines()[0], data["plans"][1]
    assert "16 x h200" in title
    assert all(f"{knob}={plan[knob]}" in title for knob in ("tp", "pp", "zero", "mbs")), (title, plan)


def test_a_plan_beside_layout_options_or_no_model_is_refused(tmp_path):
    plans, _ = _search(tmp_path)
    both = invoke(["estimate", "--plan", plans, "--tp", "4"])
    assert both.exit_code == 2 and "give either --plan or the layout options" in both.stderr
    neither = invoke(["explain", "-g", "8", "--tp", "2"])
    assert neither.exit_code == 2 and "give --model (-m), or a plans.json with --plan" in neither.stderr
