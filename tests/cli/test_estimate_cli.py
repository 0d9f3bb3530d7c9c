"""`autoplan estimate`, `explain` and `compare`: output keys, formats and the compare contract.

Issue 3/4 name the prediction fields (JSON keys and CSV columns) and the compare contract: the
output keeps the input columns and row order, appends the predictions, and a row that breaks a
rule gets fits=false and an infeasible_reason without aborting the file.
"""

from __future__ import annotations

import csv
import io
import json

import pytest
from click.testing import CliRunner

from autoplan.cli import main
from autoplan.cost.memory import MEMORY_TERMS

PREDICTION_KEYS = ("fits", "peak_memory_bytes", "peak_memory_gib", "infeasible_reason", "step_time_s",
                   "tokens_per_s_per_gpu", "model_tflops_per_gpu", "mfu", "hardware_tflops_per_gpu",
                   "hfu", "bubble_fraction")
TIME_TERMS = ("compute", "recompute", "tp_exposed", "cp_exposed", "ep_exposed", "pp_exposed",
              "dp_exposed", "bubble", "optimizer")
LAYOUT_KEYS = ("gpus", "dp", "tp", "pp", "vpp", "cp", "ep", "etp", "zero", "mbs", "grad_acc",
               "recompute", "sp", "precision", "seq_len", "gbs_seqs")
BASE = ["--model", "llama3-8b", "--gpus", "64", "--tp", "2", "--gbs-tokens", "4M"]


def run(args: list[str], code: int = 0):
    result = CliRunner().invoke(main, args)
    assert result.exit_code == code, result.output + result.stderr
    assert "Traceback" not in result.output + result.stderr
    return result


def estimate_json(*extra: str) -> dict:
    records = json.loads(run(["estimate", *BASE, "--format", "json", *extra]).stdout)
    assert isinstance(records, list) and len(records) == 1
    return records[0]


# --- estimate -----------------------------------------------------------------------------

def test_estimate_json_has_every_prediction_and_layout_field():
    rec = estimate_json()
    for key in PREDICTION_KEYS + LAYOUT_KEYS:
        assert key in rec, key
    for stage in ("first", "last"):
        for term in MEMORY_TERMS:
            assert isinstance(rec[f"mem_{stage}_{term}_bytes"], (int, float)), (stage, term)
        assert f"mem_{stage}_total_bytes" in rec
    for term in TIME_TERMS:
        assert isinstance(rec[f"time_{term}_s"], (int, float)), term
    assert (rec["model"], rec["hardware"], rec["trainer"]) == ("llama3-8b", "h100-sxm", "megatron")


def test_estimate_json_values_are_consistent():
    rec = estimate_json()
    # 4M tokens = 4,194,304 = 512 sequences of 8192 (llama3-8b's default seq_len)
    assert (rec["seq_len"], rec["gbs_seqs"], rec["dp"], rec["grad_acc"]) == (8192, 512, 32, 16)
    assert rec["fits"] is True and rec["infeasible_reason"] == ""
    assert rec["peak_memory_gib"] == pytest.approx(rec["peak_memory_bytes"] / 2**30, rel=1e-12)
    assert rec["peak_memory_bytes"] == pytest.approx(max(rec["mem_first_total_bytes"],
                                                         rec["mem_last_total_bytes"]), rel=1e-12)
    tokens = 512 * 8192
    assert rec["tokens_per_s_per_gpu"] == pytest.approx(tokens / (rec["step_time_s"] * 64), rel=1e-9)
    assert rec["mfu"] == pytest.approx(rec["model_tflops_per_gpu"] / 989, rel=1e-9)
    assert rec["hfu"] == pytest.approx(rec["hardware_tflops_per_gpu"] / 989, rel=1e-9)
    # no recompute here: HFU counts causal attention as run (half) and no embedding lookup, the
    # playbook MFU counts neither halving nor lookup, so HFU may sit below MFU (docs/conventions.md)
    assert 0 < rec["mfu"] < 1 and 0 < rec["hfu"] < 1
    assert 0 <= rec["bubble_fraction"] < 1
    assert rec["step_time_s"] == pytest.approx(
        sum(rec[f"time_{t}_s"] for t in TIME_TERMS + ("overhead",)), rel=1e-9)


def test_estimate_gbs_tokens_equals_gbs_seqs():
    by_tokens = estimate_json()
    by_seqs = json.loads(run(["estimate", "--model", "llama3-8b", "--gpus", "64", "--tp", "2",
                              "--gbs-seqs", "512", "--format", "json"]).stdout)[0]
    assert by_tokens == by_seqs


def test_estimate_table():
    out = run(["estimate", *BASE]).stdout
    assert "llama3-8b on 64 × h100-sxm (megatron): tp=2 pp=1 dp=32" in out
    assert "memory   peak" in out and "(fits)" in out
    assert "tokens/s/GPU" in out and "MFU" in out and "HFU" in out and "bubble" in out
    assert "why not" not in out


def test_estimate_table_names_the_mfu_convention():
    """The MFU line names its FLOP count (--flops-convention) and explains an HFU below it (the
    counts do not halve causal attention); with full recompute HFU is above MFU: no note."""
    note = "HFU counts the FLOPs the kernels run"
    for convention in ("playbook", "causal", "megatron"):
        args = [*BASE, "--flops-convention", convention]
        rec = json.loads(run(["estimate", *args, "--format", "json"]).stdout)[0]
        out = run(["estimate", *args]).stdout
        assert f"({convention} count)" in out
        assert (note in out) == (rec["hfu"] < rec["mfu"]) and rec["hfu"] < rec["mfu"]
    full = [*BASE, "--recompute", "full"]
    rec = json.loads(run(["estimate", *full, "--format", "json"]).stdout)[0]
    assert rec["hfu"] > rec["mfu"] and note not in run(["estimate", *full]).stdout


def test_estimate_says_when_the_allocator_retry_regime_costs_time():
    """nanotron on AWS p5 (its measured regime, nanotron.yaml): the 8B at tp 2, pp 8, mbs 4 peaks
    at 98% of the card and the line gives the regime's share of the step; at mbs 1 no line."""
    base = ["--model", "usp-8b", "--gpus", "32", "--hardware", "p5", "--trainer", "nanotron", "--tp", "2",
            "--pp", "8", "--zero", "1", "--gbs-seqs", "256", "--seq-len", "4096"]
    rec = json.loads(run(["estimate", *base, "--mbs", "4", "--format", "json"]).stdout)[0]
    out = run(["estimate", *base, "--mbs", "4"]).stdout
    assert rec["time_memory_pressure_s"] > 0.5 * rec["step_time_s"]
    share = rec["time_memory_pressure_s"] / rec["step_time_s"]
    assert f"flushes its cache and retries every micro-batch, {share:.0%} of the step" in out
    small = ["estimate", *base, "--mbs", "1"]
    assert json.loads(run([*small, "--format", "json"]).stdout)[0]["time_memory_pressure_s"] == 0.0
    assert "pressure" not in run(small).stdout


def test_estimate_warns_of_the_uncosted_retry_regime_near_the_card():
    """megatron has no measured regime (neutral): at 92% of the card (70B, 64 H100s, tp 4 pp 8) the
    line names the one measurement and says the figures leave it out; at 77% (tp 8 pp 2) no line."""
    base = ["--model", "70b", "--gpus", "64", "--gbs-seqs", "128", "--mbs", "1"]
    near = run(["estimate", *base, "--tp", "4", "--pp", "8"]).stdout
    rec = json.loads(run(["estimate", *base, "--tp", "4", "--pp", "8", "--format", "json"]).stdout)[0]
    assert rec["fits"] and rec["time_memory_pressure_s"] == 0.0
    assert "measured for nanotron on h100-sxm-efa: a step 5.5x as long from 90% of the card on" in near
    assert "not costed for megatron on h100-sxm (not measured)" in near
    assert "pressure" not in run(["estimate", *base, "--tp", "8", "--pp", "2"]).stdout


def test_estimate_csv_is_one_row_with_the_json_keys():
    rows = list(csv.DictReader(io.StringIO(run(["estimate", *BASE, "--format", "csv"]).stdout)))
    assert len(rows) == 1
    assert set(estimate_json()) == set(rows[0])
    assert rows[0]["fits"] == "True"


def test_estimate_of_a_layout_that_breaks_a_rule_says_why():
    # expert parallelism on a dense model cannot run at all: exit 2 with the rule and the values
    result = run(["estimate", *BASE, "--ep", "2"], code=2)
    assert result.exit_code == 2
    assert "mixture-of-experts" in result.stderr and "ep=2" in result.stderr


def test_estimate_suggests_the_nearest_fix():
    # 8B has 32 heads and 8 KV heads: tp = 16 breaks the rule, tp = 8 repairs it
    result = run(["estimate", "--model", "llama3-8b", "--gpus", "64", "--tp", "16", "--gbs-tokens", "4M"],
                 code=2)
    assert "try --tp 8" in result.stderr


def test_estimate_out_of_memory_names_the_stage_and_the_largest_term():
    rec = json.loads(run(["estimate", "--model", "405b", "--gpus", "8", "--tp", "8", "--gbs-seqs", "8",
                          "--format", "json"], code=1).stdout)[0]  # 1: evaluated, does not fit
    assert rec["fits"] is False
    assert rec["infeasible_reason"].startswith("out of memory: peak")
    assert "GiB over the usable" in rec["infeasible_reason"] and "largest term" in rec["infeasible_reason"]


# --- explain ------------------------------------------------------------------------------

def test_explain_json_terms_add_up():
    terms = json.loads(run(["explain", *BASE, "--format", "json"]).stdout)["terms"]
    rec = estimate_json()
    for row in terms:
        assert set(row) == {"kind", "stage", "term", "value", "unit", "formula", "parameters", "source"}
        assert row["formula"] and row["source"]
    for stage in ("first", "last"):
        gib = sum(r["value"] for r in terms if r["kind"] == "memory" and r["stage"] == stage)
        assert gib * 2**30 == pytest.approx(rec[f"mem_{stage}_total_bytes"], rel=1e-9)
    seconds = sum(r["value"] for r in terms if r["kind"] == "time")
    assert seconds == pytest.approx(rec["step_time_s"], rel=1e-9)


def test_explain_table_names_the_bottleneck():
    out = run(["explain", *BASE]).stdout
    assert "Bottleneck: " in out and "% of the step" in out


def _estimate(args: list[str]) -> dict:
    return json.loads(run(["estimate", *args, "--format", "json"]).stdout)[0]


HEADLINE_TOP = ["--model", "70b", "--gpus", "512", "--gbs-tokens", "4M", "--tp", "4", "--pp", "4", "--vpp", "4",
                "--cp", "2"]  # the headline search's plan 1 (README)


def test_explain_of_the_headline_plan_fits_a_terminal():
    """It printed 499 lines of ~230 columns (every term's generic formula); --full keeps that."""
    lines = run(["explain", *HEADLINE_TOP]).stdout.splitlines()
    assert len(lines) <= 70 and max(map(len, lines)) <= 100, (len(lines), max(map(len, lines)))
    full = run(["explain", *HEADLINE_TOP, "--full"]).stdout.splitlines()
    assert len(full) > 70 and max(map(len, full)) <= 100, (len(full), max(map(len, full)))
    assert any(line.strip().startswith("source: ") for line in full)
    assert "  = grad_acc × (n_dense × t_layer_dense + n_moe × t_layer_moe + t_head + grad_accumulation)" in full


def test_every_value_explain_prints_is_the_evaluated_one():
    """Each memory term per stage (GiB) and time term (s) of the compact table against the record."""
    out = run(["explain", *HEADLINE_TOP]).stdout.splitlines()
    rec = _estimate(HEADLINE_TOP)
    memory_header = next(i for i, line in enumerate(out) if line.startswith("memory per GPU, GiB"))
    stages = out[memory_header].split()[4:]
    assert stages == ["first", "middle", "last"]  # pp 4: an interior stage too
    checked = 0
    for line in out[memory_header + 1:]:
        name, *values = line.split()
        if name == "usable":
            break
        column = "total_bytes" if name == "total" else f"{name}_bytes"
        for stage, value in zip(stages, values):
            assert float(value) == pytest.approx(rec[f"mem_{stage}_{column}"] / 2**30, abs=0.006), (name, stage)
            checked += 1
    time_header = next(i for i, line in enumerate(out) if line.startswith("step time"))
    for line in out[time_header + 1:]:
        if not line.startswith("  "):
            break
        name, seconds, share = line.split()
        column = "step_time_s" if name == "step" else f"time_{name}_s"
        assert float(seconds) == pytest.approx(rec[column], abs=6e-4), name
        assert float(share.rstrip("%")) == pytest.approx(100 * rec[column] / rec["step_time_s"], abs=0.06)
        checked += 1
    assert checked >= 30


def test_explain_vs_answers_why_one_plan_beats_another():
    """"Why is plan 1 better than tp=8 pp=8?": the terms that differ, largest first."""
    out = run(["explain", *HEADLINE_TOP, "--vs", "tp=8,pp=8"]).stdout
    assert "vs tp=8 pp=8 vpp=4 cp=2 dp=4" in out
    rows = json.loads(run(["explain", *HEADLINE_TOP, "--vs", "tp=8,pp=8", "--format", "json"]).stdout)["terms"]
    this, other = _estimate(HEADLINE_TOP), _estimate([*HEADLINE_TOP[:6], "--tp", "8", "--pp", "8", "--vpp", "4",
                                                      "--cp", "2"])
    step = next(r for r in rows if r["term"] == "step")
    assert (step["this"], step["other"]) == (pytest.approx(this["step_time_s"]), pytest.approx(other["step_time_s"]))
    times = [r for r in rows if r["where"] == "time, s"]
    assert [abs(r["difference"]) for r in times] == sorted((abs(r["difference"]) for r in times), reverse=True)
    assert all(r["this"] != r["other"] for r in rows)
    same = run(["explain", *HEADLINE_TOP, "--vs", "tp=4"]).stdout
    assert "the two layouts are predicted the same in every term" in same


# --- compare ------------------------------------------------------------------------------

GOOD_ROW = {"tp": "2", "gpus": "64", "gbs_seqs": "512"}


def compare(tmp_path, text: str, *extra: str, code: int = 0) -> list[dict[str, str]]:
    path = tmp_path / "layouts.csv"
    path.write_text(text, encoding="utf-8")
    result = run(["compare", str(path), "--model", "llama3-8b", *extra], code=code)
    return list(csv.DictReader(io.StringIO(result.stdout)))


def test_compare_keeps_input_columns_and_row_order_and_appends_predictions(tmp_path):
    text = ("name,tp,pp,gpus,gbs_seqs,note\n"
            "c,8,1,64,512,last\n"
            "a,2,1,64,512,first\n"
            "b,4,2,64,512,middle\n")
    rows = compare(tmp_path, text)
    assert [r["name"] for r in rows] == ["c", "a", "b"]
    assert [r["note"] for r in rows] == ["last", "first", "middle"]
    header = list(rows[0])
    assert header[:6] == ["name", "tp", "pp", "gpus", "gbs_seqs", "note"]
    for key in PREDICTION_KEYS + tuple(f"time_{t}_s" for t in TIME_TERMS):
        assert key in header, key
    assert all(r["fits"] == "True" and r["infeasible_reason"] == "" for r in rows)


def test_compare_rows_equal_estimate(tmp_path):
    row = compare(tmp_path, "tp,gpus,gbs_seqs,seq_len\n2,64,512,8192\n")[0]
    rec = estimate_json()
    for key in ("peak_memory_bytes", "step_time_s", "tokens_per_s_per_gpu", "mfu", "hfu"):
        assert float(row[key]) == pytest.approx(rec[key], rel=1e-9), key


def test_compare_bad_rows_never_abort_the_file(tmp_path):
    text = ("name,tp,pp,gpus,gbs_seqs,zero,recompute\n"
            "good,2,1,64,512,1,none\n"
            "tp-does-not-divide,3,1,64,512,1,none\n"
            "zero-7,1,1,64,512,7,none\n"
            "tp-text,x,1,64,512,1,none\n"
            "no-batch,2,1,64,,1,none\n"
            "fractional,1.5,1,64,512,1,none\n"
            "bad-choice,2,1,64,512,1,sometimes\n"
            "absurd,1,1,1e30,512,1,none\n"
            "rule-broken,1,64,64,512,1,none\n"
            "good-again,8,1,64,512,1,full\n")
    rows = compare(tmp_path, text)
    assert [r["name"] for r in rows] == ["good", "tp-does-not-divide", "zero-7", "tp-text", "no-batch",
                                         "fractional", "bad-choice", "absurd", "rule-broken", "good-again"]
    fits = {r["name"]: r["fits"] for r in rows}
    assert fits["good"] == fits["good-again"] == "True"
    reasons = {r["name"]: r["infeasible_reason"] for r in rows}
    assert "multiple of tp·pp·cp" in reasons["tp-does-not-divide"]
    assert "zero must be 0, 1, 2 or 3" in reasons["zero-7"]
    assert "tp must be an integer" in reasons["tp-text"]
    assert "gbs_seqs" in reasons["no-batch"]
    assert "tp must be an integer" in reasons["fractional"]
    assert "recompute must be one of" in reasons["bad-choice"]
    assert "absurdly large" in reasons["absurd"]
    assert "pp·vpp must not exceed the number of layers" in reasons["rule-broken"]  # 32 layers < 64
    for name in ("tp-does-not-divide", "zero-7", "tp-text", "no-batch", "fractional", "bad-choice", "absurd",
                 "rule-broken"):
        assert fits[name] == "False", name
    assert float(rows[-1]["step_time_s"]) > 0 and rows[1]["step_time_s"] == ""


def test_compare_options_fill_missing_columns(tmp_path):
    rows = compare(tmp_path, "tp,pp\n2,1\n4,1\n", "--gpus", "64", "--gbs-seqs", "512", "--seq-len", "4096",
                   "--precision", "fp8")
    assert all(r["fits"] == "True" for r in rows)
    assert list(rows[0])[:2] == ["tp", "pp"]


def test_compare_writes_the_output_file(tmp_path):
    (tmp_path / "in.csv").write_text("tp,gpus,gbs_seqs\n2,64,512\n8,64,512\n", encoding="utf-8")
    out = tmp_path / "out.csv"
    result = run(["compare", str(tmp_path / "in.csv"), "--model", "8b", "-o", str(out)])
    assert result.stdout == ""
    assert result.stderr.strip() == f"wrote 2 rows to {out}"
    rows = list(csv.DictReader(out.open(encoding="utf-8")))
    assert [r["tp"] for r in rows] == ["2", "8"]


def test_compare_row_with_a_bad_gpu_count_does_not_abort(tmp_path):
    rows = compare(tmp_path, "tp,gpus,gbs_seqs\n1,8,8\n1,12,12\n")
    assert len(rows) == 2 and rows[1]["fits"] == "False"
    assert "node" not in rows[0]["infeasible_reason"]
    assert "gpus_per_node" in rows[1]["infeasible_reason"] or "node" in rows[1]["infeasible_reason"]


def test_compare_keeps_measured_columns(tmp_path):
    rows = compare(tmp_path, "tp,gpus,gbs_seqs,tokens_per_s_per_gpu,peak_memory_gib\n2,64,512,9999,55.5\n")
    assert rows[0]["tokens_per_s_per_gpu"] == "9999" and rows[0]["peak_memory_gib"] == "55.5"


def test_compare_keeps_input_values_verbatim(tmp_path):
    rows = compare(tmp_path, "tp,gpus,gbs_seqs\n2,64,512\n2,64,\n")
    assert [(r["tp"], r["gpus"], r["gbs_seqs"]) for r in rows] == [("2", "64", "512"), ("2", "64", "")]


# --- compare output options (issue 18 frictions: the same options as the other commands) ---

def test_compare_json_holds_every_csv_column(tmp_path):
    text = "name,tp,gpus,gbs_seqs\na,2,64,512\nb,4,64,512\n"
    rows = compare(tmp_path, text)
    path = tmp_path / "layouts.csv"
    records = json.loads(run(["compare", str(path), "--model", "llama3-8b", "--format", "json"]).stdout)
    assert [list(r) for r in records] == [list(rows[0])] * 2
    assert records[0]["fits"] is True
    assert records[0]["tokens_per_s_per_gpu"] == pytest.approx(float(rows[0]["tokens_per_s_per_gpu"]))


def test_compare_table_on_a_terminal_shows_a_readable_subset(tmp_path, monkeypatch):
    import autoplan.cli.estimate as estimate_cli

    monkeypatch.setattr(estimate_cli, "_stdout_is_terminal", lambda: True)
    path = tmp_path / "layouts.csv"
    path.write_text("name,tp,gpus,gbs_seqs,zero\na,2,64,512,1\nb,2,64,512,9\n", encoding="utf-8")
    out = run(["compare", str(path), "--model", "llama3-8b"]).stdout
    assert "tok/s/GPU" in out and "name=a,tp=2,gpus=64,gbs_seqs=512,zero=1" in out
    assert "time_tp_exposed_s" not in out and "peak_memory_bytes" not in out
    assert "zero must be" in out  # the reason of the bad row


def test_compare_output_file_defaults_to_csv_and_table_needs_the_terminal(tmp_path):
    path = tmp_path / "layouts.csv"
    path.write_text("tp,gpus,gbs_seqs\n2,64,512\n", encoding="utf-8")
    refused = run(["compare", str(path), "--model", "llama3-8b", "--format", "table",
                   "-o", str(tmp_path / "o.txt")], code=2)
    assert "csv or json" in refused.output and not (tmp_path / "o.txt").exists()
    run(["compare", str(path), "--model", "llama3-8b", "--format", "json", "-o", str(tmp_path / "o.json")])
    assert json.loads((tmp_path / "o.json").read_text())[0]["fits"] is True


def test_compare_accepts_gbs_tokens_like_the_other_commands(tmp_path):
    # 512 sequences of 8192 tokens = 4,194,304 tokens = 4M (binary)
    by_seqs = compare(tmp_path, "tp,gpus\n2,64\n", "--gbs-seqs", "512", "--seq-len", "8192")
    by_tokens = compare(tmp_path, "tp,gpus\n2,64\n", "--gbs-tokens", "4194304", "--seq-len", "8192")
    assert by_tokens[0]["tokens_per_s_per_gpu"] == by_seqs[0]["tokens_per_s_per_gpu"]
    assert by_tokens[0]["fits"] == "True"


def test_estimate_says_when_the_trainer_was_calibrated_on_another_gpu():
    """nanotron was measured on AWS p5 (h100-sxm-efa): there its fitted parameters apply, and on
    the InfiniBand h100-sxm preset they are transferred, which the table says."""
    args = ["estimate", "-m", "usp-8b", "-g", "32", "--seq-len", "4096", "--gbs-seqs", "256",
            "--trainer", "nanotron", "--tp", "4", "--pp", "2"]
    measured = run([*args, "--hardware", "p5"]).stdout
    transferred = run([*args, "--hardware", "h100-sxm"]).stdout
    assert "transferred" not in measured
    assert "transferred from h100-sxm-efa (not measured on h100-sxm)" in transferred


def test_compare_and_estimate_say_when_a_layout_is_beyond_the_card_only_by_the_allocators_cache(tmp_path, monkeypatch):
    """The Ultra-Scale Playbook sweep's ok run at tp 1, pp 4, micro-batch 2 (8B, 32 H100s, ZeRO-1):
    its reserved peak is predicted over the card, its firm peak under it (cost.stage_memory)."""
    import autoplan.cli.estimate as estimate_cli

    monkeypatch.setattr(estimate_cli, "_stdout_is_terminal", lambda: True)
    path = tmp_path / "layouts.csv"
    path.write_text("tp,pp,mbs,zero\n1,4,2,1\n1,4,1,1\n", encoding="utf-8")
    setup = ["--model", "usp-8b", "--trainer", "nanotron", "--hardware", "h100-sxm-efa", "--gpus", "32",
             "--seq-len", "4096", "--gbs-seqs", "256"]
    rows = list(csv.DictReader(io.StringIO(run(["compare", str(path), *setup, "--format", "csv"]).stdout)))
    assert [(r["fits"], r["fits_with_retries"]) for r in rows] == [("False", "True"), ("True", "True")]
    assert "with retries" in run(["compare", str(path), *setup]).stdout
    out = run(["estimate", *setup, "--tp", "1", "--pp", "4", "--mbs", "2", "--zero", "1"], code=1).stdout
    assert "DOES NOT FIT; may run in the allocator's retry regime" in out and "free-and-retry regime" in out


def test_compare_table_shows_the_predictions_when_the_input_has_columns_of_their_names(tmp_path, monkeypatch):
    """A CSV with its own fits column (e.g. measured runs): the CSV keeps it and names the
    prediction predicted_fits; the table shows the prediction, and the input column in the layout cell."""
    import autoplan.cli.estimate as estimate_cli

    monkeypatch.setattr(estimate_cli, "_stdout_is_terminal", lambda: True)
    path = tmp_path / "layouts.csv"
    path.write_text("tp,gpus,gbs_seqs,fits\n2,64,512,measured-yes\n", encoding="utf-8")
    out = run(["compare", str(path), "--model", "llama3-8b"]).stdout
    assert "fits=measured-yes" in out and "True" in out


def test_explain_vs_shows_the_largest_differences_with_both_sides_substituted():
    lines = run(["explain", *HEADLINE_TOP, "--vs", "tp=8,pp=2"]).stdout.splitlines()
    time_rows = [line.split() for line in lines[3:] if line.startswith("  ") and not line.startswith("      ")]
    first = next(i for i, line in enumerate(lines) if line.startswith("  tp_exposed"))
    assert lines[first + 1].startswith("      this: ") and lines[first + 2].startswith("      other: ")
    this, other = (float(v) for v in lines[first].split()[1:3])  # seconds
    for line, value in ((lines[first + 1], this), (lines[first + 2], other)):
        number, unit = line.rsplit(" = ", 1)[1].split()
        assert float(number) * {"s": 1.0, "ms": 1e-3}[unit] == pytest.approx(value, rel=1e-3)
    assert max(map(len, lines)) <= 100 and len(time_rows) > 5
