"""`autoplan search` end to end through click's CliRunner."""

from __future__ import annotations

import csv
import io
import json

import pytest
from click.testing import CliRunner

from autoplan.api import build_context, build_training
from autoplan.cli import main
from autoplan.cli.search import SAMPLER_CHOICES
from autoplan.cost.evaluate import evaluate
from autoplan.layout import LayoutBatch
from autoplan.layout_records import layout_from_record
from autoplan.report.near_ties import REORDER_WITHIN
from autoplan.search import SAMPLERS

HEADLINE = ["search", "--model", "70b", "--gpus", "512", "--gbs-tokens", "4M"]
LAYOUT_KEYS = ("gpus", "dp", "tp", "pp", "vpp", "cp", "ep", "etp", "zero", "mbs", "grad_acc",
               "seq_len", "gbs_seqs", "sp", "recompute", "precision", "placement")


def run(args, tmp_path, out="out"):
    result = CliRunner().invoke(main, [*args, "--out", str(tmp_path / out)])
    return result


@pytest.fixture(scope="module")
def headline(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("headline")
    result = run([*HEADLINE, "--format", "json"], tmp)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout), tmp / "out"


def test_headline_table(tmp_path):
    result = run(HEADLINE, tmp_path)
    assert result.exit_code == 0, result.output
    assert "Recipe: 3240 candidates" in result.stdout
    for column in ("rank", "layout", "peak GiB", "(room)", "step", "tokens/s", "/GPU", "MFU", "bubble",
                   "exposed"):
        assert column in result.stdout
    files = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert files == ["columns.md", "manifest.json", "plans.csv", "plans.json"]


def test_each_top_plan_is_legal_fits_and_meets_the_batch(headline):
    document, _ = headline
    ctx = build_context("70b", build_training(512, 8192, 512))
    plans = document["plans"]
    assert 1 <= len(plans) <= 10
    # 4M tokens = 4·2^20 = 4,194,304 tokens; llama3-70b trains at 8,192 tokens: 512 sequences.
    assert document["gbs_seqs"] == 512 and document["seq_len"] == 8192
    layouts = [layout_from_record(plan, ctx.training) for plan in plans]
    table = evaluate(ctx, LayoutBatch.from_layouts(layouts))
    assert (table["reason_code"] == 0).all() and table["fits"].all()
    for plan in plans:
        assert plan["peak_memory_bytes"] <= ctx.cluster.gpu.usable_memory_bytes
        assert plan["dp"] * plan["mbs"] * plan["grad_acc"] == 512
        assert plan["dp"] * plan["tp"] * plan["pp"] * plan["cp"] == 512
    speeds = [plan["tokens_per_s_per_gpu"] for plan in plans]
    # ranked by speed, except that the plans within REORDER_WITHIN of the best lead in their
    # robustness order (autoplan.report.near_ties)
    close = [s >= (1 - REORDER_WITHIN) * max(speeds) for s in speeds]
    head = close.index(False) if False in close else len(close)
    assert all(close[:head]) and not any(close[head:])
    assert speeds[head:] == sorted(speeds[head:], reverse=True)


def test_json_document_shape(headline):
    document, out = headline
    assert document["recipe"]["candidates"] >= document["recipe"]["legal"] >= document["recipe"]["fit"]
    assert document["recipe"]["fit"] >= document["recipe"]["reach_batch"] > 0
    plan = document["plans"][0]
    for key in (*LAYOUT_KEYS, "step_time_s", "tokens_per_s_per_gpu", "mfu", "peak_memory_gib"):
        assert key in plan
    assert json.loads((out / "plans.json").read_text())["plans"] == document["plans"]
    assert document["setup"]["master_weights"] == "fp32" and document["setup"]["fp8_recipe"] == "tensorwise"
    assert set(document["columns"]) == set(plan), "every plan column is in the column dictionary"
    assert all(entry["meaning"] and entry["unit"] for entry in document["columns"].values())
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["inputs"]["seed"] == 0 and manifest["sampler"]["used"] == "exhaustive"
    assert {"autoplan", "optuna", "numpy", "python"} <= set(manifest["versions"])
    assert isinstance(manifest["command_line"], list)


def test_columns_md_describes_every_plans_csv_column(headline):
    _, out = headline
    header = (out / "plans.csv").read_text().splitlines()[0].split(",")
    text = (out / "columns.md").read_text()
    for column in header:
        row = next(line for line in text.splitlines() if line.startswith(f"| `{column}` |"))
        assert not row.endswith("|  |  |  |"), row  # kind, unit and meaning are filled in
    assert "`step_time_s` = sum of the time terms" in text


def test_plans_csv_has_every_candidate_ranked_and_is_reproducible(headline, tmp_path):
    document, out = headline
    rows = list(csv.DictReader(io.StringIO((out / "plans.csv").read_text())))
    # no tp·pp·cp > 512 in the default space; twins are folded into their leader's row
    folded = sum(len(r["variants"].split("; ")) for r in rows if r["variants"])
    assert len(rows) + folded == document["recipe"]["candidates"]
    assert [int(r["rank"]) for r in rows] == list(range(1, len(rows) + 1))
    assert {r["infeasible_reason"] for r in rows if r["feasible"] == "False"} >= {"out_of_memory"}
    assert all(r["infeasible_reason"] == "" for r in rows if r["feasible"] == "True")
    again = run([*HEADLINE, "--format", "csv"], tmp_path, out="again")
    assert again.exit_code == 0
    assert (tmp_path / "again" / "plans.csv").read_bytes() == (out / "plans.csv").read_bytes()


def test_csv_format_prints_the_top_plans(tmp_path):
    result = run([*HEADLINE, "--format", "csv", "--top", "3"], tmp_path)
    assert result.exit_code == 0
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    assert len(rows) == 3 and rows[0]["rank"] == "1"


def test_overrides_fix_knobs(tmp_path):
    result = run([*HEADLINE, "--format", "json", "--tp", "8", "--recompute", "selective,full"], tmp_path)
    assert result.exit_code == 0, result.output
    plans = json.loads(result.stdout)["plans"]
    assert {p["tp"] for p in plans} == {8}
    assert {p["recompute"] for p in plans} <= {"selective", "full"}


def test_tpe_with_sqlite_storage(tmp_path):
    args = ["search", "-m", "8b", "-g", "64", "--gbs-seqs", "256", "--sampler", "tpe", "--trials", "32",
            "--storage", f"sqlite:///{tmp_path / 'study.db'}", "--study-name", "cli", "--format", "json"]
    result = run(args, tmp_path)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["sampler"] == "tpe"
    import optuna

    assert len(optuna.load_study(study_name="cli", storage=f"sqlite:///{tmp_path / 'study.db'}").trials) >= 32


@pytest.mark.parametrize("args, message", [
    ([*HEADLINE, "--gbs-seqs", "512"], "mutually exclusive"),
    (["search", "-m", "70b", "-g", "512"], "global batch is missing"),
    (["search", "-m", "70b", "-g", "512", "--gbs-tokens", "1000"], "multiple of the sequence length"),
    ([*HEADLINE, "--space", "defualt"], "did you mean 'default'"),
    (["search", "-m", "70b-llama", "-g", "512", "--gbs-tokens", "4M"], "unknown model"),
    ([*HEADLINE, "--tp", "3", "--pp", "1", "--cp", "1"], "no layout for 512 GPUs"),
])
def test_input_errors_exit_2_with_one_line(tmp_path, args, message):
    result = run(args, tmp_path)
    assert result.exit_code == 2, result.output
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("args", [[*HEADLINE, "--tp", "x"], [*HEADLINE, "--recompute", "most"]])
def test_bad_option_values_exit_2(tmp_path, args):
    assert run(args, tmp_path).exit_code == 2


def test_nothing_feasible_exits_1_and_says_why(tmp_path):
    result = run(["search", "-m", "405b", "-g", "16", "--gbs-tokens", "4M"], tmp_path)
    assert result.exit_code == 1, result.output
    error = [line for line in result.stderr.splitlines() if line.startswith("Error:")]
    assert len(error) == 1
    assert "x the peak memory per GPU must fit in the usable GPU memory" in error[0] and "smallest peak" in error[0]
    assert "out_of_memory" not in error[0]  # the reasons in words, not the internal codes
    assert (tmp_path / "out" / "plans.csv").exists()


def test_sampler_choices_match_the_library():
    assert SAMPLER_CHOICES == SAMPLERS


def test_help():
    result = CliRunner().invoke(main, ["search", "--help"])
    assert result.exit_code == 0
    for option in ("--gbs-tokens", "--sampler", "--storage", "--space", "--even-stages-only"):
        assert option in result.output


def test_search_writes_report_configs_and_costs(tmp_path):
    """--report, --export and the cost options land in the run folder and the JSON."""
    import json as _json

    from click.testing import CliRunner

    from autoplan.cli import main

    out = tmp_path / "run"
    result = CliRunner().invoke(main, ["search", "--model", "8b", "--gpus", "64", "--gbs-tokens", "4M",
                                       "--top", "3", "--report", "--export", "megatron,deepspeed",
                                       "--train-tokens", "15T", "--gpu-hour-price", "2.5",
                                       "--format", "json", "--out", str(out)])
    assert result.exit_code == 0, result.output + result.stderr
    plans = _json.loads(result.stdout)["plans"]
    # days = 15e12 tokens / (tokens/s/GPU · 64 GPUs) / 86400 s; dollars = days · 24 · 64 · 2.5
    best = plans[0]
    days = 15e12 / (best["tokens_per_s_per_gpu"] * 64) / 86400
    assert best["train_days"] == pytest.approx(days, rel=1e-9)
    assert best["cost_usd"] == pytest.approx(days * 24 * 64 * 2.5, rel=1e-9)
    assert (out / "report.html").is_file() and (out / "memory_per_stage.png").is_file()
    assert (out / "configs" / "megatron_pretrain_gpt.sh").is_file()
    assert any(p.name.startswith("deepspeed") for p in (out / "configs").iterdir())


def test_search_price_without_tokens_is_an_error():
    from click.testing import CliRunner

    from autoplan.cli import main

    result = CliRunner().invoke(main, ["search", "--model", "8b", "--gpus", "64", "--gbs-tokens", "4M",
                                       "--gpu-hour-price", "2.5"])
    assert result.exit_code == 2 and "--train-tokens" in result.stderr


def test_an_awkward_gpu_count_shows_each_plans_batch(tmp_path):
    """96 GPUs cannot reach 512 sequences exactly: the plans take the nearest batch within the
    default ±5 %, the header names them, and every plan carries its batch and time per token."""
    result = run(["search", "--model", "70b", "--gpus", "96", "--gbs-tokens", "4M", "--format", "json"], tmp_path)
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    used = sorted({plan["gbs_seqs"] for plan in document["plans"]})
    assert 512 not in used
    header = next(line for line in result.stderr.splitlines() if line.startswith("Recipe:"))
    assert "gbs 512 ±5% x 8192 tokens (plans use " in header
    named = header.split("plans use ")[1].split(" seqs")[0].split(", ")
    assert {str(b) for b in used} <= set(named)
    for plan in document["plans"]:
        assert plan["gbs_tokens"] == plan["gbs_seqs"] * 8192
        assert plan["step_time_per_token_s"] == pytest.approx(plan["step_time_s"] / plan["gbs_tokens"])
    header = (tmp_path / "out" / "plans.csv").read_text().splitlines()[0].split(",")
    assert {"gbs_seqs", "gbs_tokens", "step_time_per_token_s"} <= set(header)


def test_allow_idle_gpus_reports_the_idle_ones(tmp_path):
    args = ["search", "--model", "70b", "--gpus", "1000", "--gbs-tokens", "4M", "--gbs-tolerance", "0",
            "--allow-idle-gpus", "--top", "3"]
    result = run(args, tmp_path)
    assert result.exit_code == 0, result.output
    assert "GPUs idle)" in result.stdout
    assert "on 1000, 992, 960, 896, 768, 512 of 1000 GPUs" in result.stdout


@pytest.mark.parametrize("model, trainer, says", [
    ("nemotron-4-15b", "torchtitan", "torchtitan has no model builder for 'nemotron-4-15b' (relu2 MLP"),
    ("gpt3-5b", "nanotron", "nanotron's LlamaConfig/Qwen2Config cannot express 'gpt3-5b'"),
])
def test_a_model_the_trainer_cannot_build_gets_a_note(tmp_path, model, trainer, says):
    result = run(["search", "-m", model, "-g", "16", "--gbs-seqs", "64", "--trainer", trainer,
                  "--tp", "1,2", "--pp", "1"], tmp_path)
    assert result.exit_code == 0, result.output
    assert says in result.stderr and f"--export {trainer} refuses them" in result.stderr
    quiet = run(["search", "-m", "llama3-8b", "-g", "16", "--gbs-seqs", "64", "--trainer", trainer,
                 "--tp", "1,2", "--pp", "1"], tmp_path, out="llama")
    assert quiet.exit_code == 0 and "refuses them" not in quiet.stderr


def test_search_notes_parameters_transferred_from_another_gpu(tmp_path):
    """nanotron is calibrated on AWS p5 (h100-sxm-efa) only: on the h100-sxm preset its parameters
    are transferred and the search says so; on p5 it does not."""
    args = ["search", "-m", "usp-8b", "-g", "32", "--seq-len", "4096", "--gbs-seqs", "256", "--trainer", "nanotron"]
    transferred = run([*args, "--hardware", "h100-sxm"], tmp_path, "ib")
    measured = run([*args, "--hardware", "p5"], tmp_path, "p5")
    assert "Note: parameters transferred from h100-sxm-efa (not measured on h100-sxm)" in transferred.stderr
    assert "transferred" not in measured.stderr


def test_workers_on_a_small_space_say_they_will_not_pay(capsys):
    """`--workers 2` on a 0.2 s exhaustive search took 16.7 s with no hint."""
    from autoplan.cli.search import SMALL_FOR_WORKERS, _warn_workers

    _warn_workers(2, 3240)
    _warn_workers(2, SMALL_FOR_WORKERS + 1)  # a large space: no note
    _warn_workers(1, 3240)
    text = capsys.readouterr().err
    assert text.count("note: --workers 2: this space of 3,240 layouts searches in about a second") == 1
    assert text.count("note:") == 1


def test_a_resumed_study_says_what_it_resumed(tmp_path):
    """Issue 47: the second run of one command on one storage said nothing about the study."""
    storage = f"sqlite:///{tmp_path / 's.db'}"
    args = ["search", "-m", "8b", "-g", "64", "--gbs-tokens", "4M", "--pp", "1,2", "--storage", storage]
    first, second = run(args, tmp_path, "first"), run(args, tmp_path, "second")
    assert first.exit_code == second.exit_code == 0, first.stderr + second.stderr
    assert "Note: resumed" not in first.stderr
    notes = [line for line in second.stderr.splitlines() if line.startswith("Note: resumed study")]
    rows = sum(1 for _ in csv.DictReader(io.StringIO((tmp_path / "first" / "plans.csv").read_text())))
    assert len(notes) == 1 and "'autoplan-llama3-8b-64gpus-" in notes[0] and f"in {storage}: " in notes[0]
    assert notes[0].endswith("stored layouts reused; 0 of 1 chunks left to store")  # 1 chunk of 65,536
    assert int(notes[0].split(": ")[-1].split()[0].replace(",", "")) >= rows  # plans.csv folds twins
