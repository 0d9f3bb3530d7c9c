"""Issue 48, outputs and hostile inputs: each case as a hostile user tried it, one row each
(command line, fixture, expected exit code, a regex its stderr must match), run through click's
CliRunner; the cases that need a second process (a closed pipe, a kill, a concurrent run) follow
as their own tests."""

from __future__ import annotations

import csv
import io
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from autoplan.cli import main

# Mixtral 8x7B on 16 H100, ep 8, global batch 128 (the log's header: Megatron-LM issue #756)
LOG = str(Path(__file__).parents[1] / "unit" / "calibration" / "logs" / "megatron_mixtral_8x7b_16xh100.log")
SMALL = ["-m", "8b", "-g", "8", "--gbs-seqs", "64"]
SEARCH = ["search", *SMALL]
TINY_MODEL = {"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
              "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 128256,
              "max_position_embeddings": 8192}


def _config(tmp_path, file_name: str, **fields) -> str:
    path = tmp_path / file_name
    path.write_text(json.dumps({**TINY_MODEL, **fields}))
    return str(path)


def _yaml_model(tmp_path, layers: str) -> str:
    path = tmp_path / "m.yaml"
    path.write_text("name: tiny\n" + "".join(f"{k}: {layers if k == 'num_hidden_layers' else v}\n"
                                             for k, v in TINY_MODEL.items()))
    return str(path)


def _layouts(tmp_path, rows: int = 2, model: str | None = None) -> str:
    path = tmp_path / "layouts.csv"
    path.write_text("tp,pp,mbs\n" + "2,1,1\n" * rows if model is None else
                    "tp,pp,mbs,model\n" + f"2,1,1,{model}\n")
    return str(path)


def _tall_csv(tmp_path) -> str:
    """One row more than read_user_csv reads (100,001 rows of 1 column, ~0.2 MB)."""
    from autoplan.files import MAX_CSV_ROWS

    path = tmp_path / "tall.csv"
    path.write_text("tp\n" + "1\n" * (MAX_CSV_ROWS + 1))
    return str(path)


# (id, arguments (a function of tmp_path), exit code, regex of stderr)
CASES = [
    ("model_type as a list", lambda p: ["estimate", "-m", _config(p, "c.json", model_type=["llama"]), "-g", "8",
                                        "--gbs-seqs", "64", "--tp", "2"],
     2, r"model_type must be a string .* got \['llama'\]"),
    ("a layer count as a dict", lambda p: ["estimate", "-m", _config(p, "c.json", num_hidden_layers={"a": 1}),
                                           "-g", "8", "--gbs-seqs", "64", "--tp", "2"],
     2, r"num_hidden_layers: expected an integer, got \{'a': 1\}"),
    ("YAML 1.1 sexagesimal 1:20 is not 80", lambda p: ["estimate", "-m", _yaml_model(p, "1:20"), "-g", "8",
                                                       "--gbs-seqs", "64", "--tp", "2"],
     2, r"num_hidden_layers: expected an integer, got '1:20'"),
    ("YAML 1.1 'yes' is not a boolean", lambda p: ["estimate", "-m", _yaml_model(p, "yes"), "-g", "8",
                                                   "--gbs-seqs", "64", "--tp", "2"],
     2, r"num_hidden_layers: expected an integer, got 'yes'"),
    ("a name with a right-to-left override", lambda p: ["estimate", "-m", _config(p, "c.json", name="ab\u202ecd"),
                                                        "-g", "8", "--gbs-seqs", "64", "--tp", "2"],
     2, r"control or invalid character '\\u202e'"),
    ("an infinite bandwidth names the form", lambda p: [*SEARCH, "--nic", "1e999 Gb/s"],
     2, r"expected a bandwidth like '400 Gb/s' with a finite number, got '1e999 Gb/s'"),
    ("compare -o c.json with --format csv", lambda p: ["compare", _layouts(p), *SMALL, "-o", str(p / "c.json"),
                                                       "--format", "csv"],
     2, r"names a \.json file but --format is csv"),
    ("calibrate -o fit.csv", lambda p: ["calibrate", _layouts(p), "-m", "8b", "-o", str(p / "fit.csv")],
     2, r"-o .*fit\.csv: a profile is written as YAML \(\.yaml, \.yml\) or JSON \(\.json\), not \.csv"),
    ("compare -o /dev/full names the file", lambda p: ["compare", _layouts(p), *SMALL, "-o", "/dev/full"],
     2, r"^Error: cannot write /dev/full: No space left on device$"),
    ("calibrate --append-to /dev/full names the file",
     lambda p: ["calibrate", "--from-log", LOG,
                "--log-format", "megatron", "-m", "mixtral-8x7b", "--layout",
                "gpus=16,tp=2,pp=1,ep=8,mbs=1,gbs_seqs=128,seq_len=4096", "--append-to", "/dev/full"],
     2, r"/dev/full"),
    ("export -o run.json of a launch script", lambda p: ["export", "--to", "megatron", *SMALL, "-o",
                                                        str(p / "run.json")],
     2, r"megatron writes megatron_pretrain_gpt\.sh \(a \.sh file\), but -o .*run\.json names a \.json file"),
    ("export of an 8B plan with -m 70b", lambda p: ["export", _plans(p), "--to", "megatron", "-m", "70b"],
     2, r"holds plans for llama3-8b, not 70b"),
    ("a CSV of more rows than are read", lambda p: ["compare", _tall_csv(p), *SMALL],
     2, r"more than 100,000 rows of 1 columns .* split it into files of at most 100,000 rows"),
    ("a batch too small for 100,000 GPUs suggests a legal value",
     lambda p: ["search", "-m", "70b", "-g", "100000", "--gbs-tokens", "4M", "--out", str(p / "o")],
     1, r"try --gbs-seqs \d+ or fewer GPUs"),
    ("search --out plans.json names a file, not the result folder",
     lambda p: [*SEARCH, "--out", str(p / "plans.json")],
     2, r"--out .*plans\.json: names a \.json file, but --out is the folder the results go in .* did you mean "
        r"--out .*/plans\?"),
    ("--allow-idle-gpus on 509 GPUs plans on 504",
     lambda p: ["search", "-m", "70b", "-g", "509", "--gbs-tokens", "4M", "--allow-idle-gpus", "--top", "1",
                "--out", str(p / "o")],
     0, r"509 GPUs are not whole nodes of 8; planning on 504"),
]


def _plans(tmp_path) -> str:
    out = tmp_path / "o8b"
    assert CliRunner().invoke(main, [*SEARCH, "--out", str(out)]).exit_code == 0
    return str(out / "plans.json")


@pytest.mark.parametrize(("args", "code", "pattern"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_hostile_case(tmp_path, args, code, pattern):
    result = CliRunner().invoke(main, args(tmp_path))
    assert result.exit_code == code, result.output
    assert re.search(pattern, result.stderr, re.MULTILINE), result.stderr
    assert "Traceback" not in result.output and "Internal error" not in result.stderr


def test_hint_never_suggests_a_tolerance_the_option_refuses(tmp_path):
    result = CliRunner().invoke(main, ["search", "-m", "70b", "-g", "100000", "--gbs-tokens", "4M",
                                       "--out", str(tmp_path / "o")])
    for value in re.findall(r"--gbs-tolerance ([\d.]+)", result.stderr):
        assert 0 <= float(value) < 1, result.stderr  # the option's FloatRange(0, 1, max_open=True)


# --- CSV cells a spreadsheet would run --------------------------------------------------------

HOSTILE_CELLS = ("=HYPERLINK(\"x\")", "+1+1", "@SUM(A1)", "-cmd")


def _csv_rows(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text)))


@pytest.mark.parametrize("cell", HOSTILE_CELLS)
def test_compare_csv_neutralises_a_formula_and_keeps_numbers(tmp_path, cell):
    result = CliRunner().invoke(main, ["compare", _layouts(tmp_path, model=cell), *SMALL, "--format", "csv"])
    assert result.exit_code == 0, result.output
    row = _csv_rows(result.stdout)[0]
    assert row["model"] == "'" + cell
    assert float(row["step_time_s"]) > 0  # numbers stay numbers


@pytest.mark.parametrize("cell", HOSTILE_CELLS)
def test_every_record_csv_neutralises_a_formula(cell):
    from autoplan.report.csv_text import records_csv

    rows = _csv_rows(records_csv(["name", "value", "negative"], [{"name": cell, "value": 1.5, "negative": -1.5}]))
    assert rows == [{"name": "'" + cell, "value": "1.5", "negative": "-1.5"}]


@pytest.mark.parametrize("cell", HOSTILE_CELLS[:1] + HOSTILE_CELLS[2:])  # ('+1+1' is no name: a model file name)
def test_estimate_csv_neutralises_a_model_name(tmp_path, cell):
    config = _config(tmp_path, "c.json", name=cell)
    result = CliRunner().invoke(main, ["estimate", "-m", config, "-g", "8", "--gbs-seqs", "64", "--tp", "2",
                                       "--format", "csv"])
    assert result.exit_code == 0, result.output
    assert _csv_rows(result.stdout)[0]["model"] == "'" + cell


def test_calibrate_append_to_neutralises_the_cells_it_writes(tmp_path):
    target = tmp_path / "MEASURED.csv"
    target.write_text("model,tp,note\n=evil(),2,-1.5\n")
    log = LOG
    result = CliRunner().invoke(main, ["calibrate", "--from-log", log, "--log-format", "megatron", "-m", "mixtral-8x7b",
                                       "--layout", "gpus=16,tp=2,pp=1,ep=8,mbs=1,gbs_seqs=128,seq_len=4096",
                                       "--append-to", str(target)])
    assert result.exit_code == 0, result.output
    rows = _csv_rows(target.read_text())
    assert rows[0]["model"] == "'=evil()" and rows[0]["note"] == "-1.5" and len(rows) == 2


# --- echoes of user values --------------------------------------------------------------------

def test_an_out_name_with_a_newline_and_an_override_is_echoed_escaped(tmp_path):
    out = tmp_path / "x\ny\u202ez"
    result = CliRunner().invoke(main, [*SEARCH, "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "x\\ny\\u202ez/" in result.stderr and "\u202e" not in result.stderr
    assert all(not line.startswith("y") for line in result.stderr.splitlines())


# --- result folders: a killed run, a concurrent run -------------------------------------------

def test_a_folder_left_by_a_killed_write_is_replaced_by_a_rerun(tmp_path):
    """A run killed after its first file (the state `kill -9` leaves: plans.csv, a temporary
    file, no manifest) is this study's unfinished result; the rerun replaces it whole."""
    from autoplan.report.destination import UNFINISHED_NAME

    out = tmp_path / "out"
    assert CliRunner().invoke(main, [*SEARCH, "--out", str(out)]).exit_code == 0
    key = json.loads((out / "manifest.json").read_text())["study_key"]
    for name in ("manifest.json", "columns.md", "plans.json"):
        (out / name).unlink()
    (out / UNFINISHED_NAME).write_text(key + "\n")
    (out / ".plans.json.999-0").write_text("{half")
    again = CliRunner().invoke(main, [*SEARCH, "--out", str(out)])
    assert again.exit_code == 0, again.output
    assert sorted(p.name for p in out.iterdir()) == ["columns.md", "manifest.json", "plans.csv", "plans.json"]
    other = CliRunner().invoke(main, ["search", "-m", "8b", "-g", "16", "--gbs-seqs", "64", "--out", str(out)])
    assert other.exit_code == 2 and "another search's results" in other.stderr


def test_a_real_kill_during_the_write_leaves_a_folder_the_rerun_accepts(tmp_path):
    out = tmp_path / "out"
    code = ("import os, signal, autoplan.report.results as r\n"
            "real = r.write_text\n"
            "def dying(path, text, **kw):\n"
            "    real(path, text, **kw)\n"
            "    os.kill(os.getpid(), signal.SIGKILL)\n"
            "r.write_text = dying\n"
            "from autoplan.cli import main\n"
            f"main({[*SEARCH, '--out', str(out)]!r})\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == -signal.SIGKILL
    assert (out / "plans.csv").exists() and not (out / "manifest.json").exists()
    again = CliRunner().invoke(main, [*SEARCH, "--out", str(out)])
    assert again.exit_code == 0, again.output


def test_a_second_run_into_a_locked_folder_is_refused_naming_it(tmp_path):
    from autoplan.report.destination import LOCK_NAME, check_out_dir

    out = tmp_path / "out"
    folder = check_out_dir(out, "some study")
    try:
        result = CliRunner().invoke(main, [*SEARCH, "--out", str(out)])
        assert result.exit_code == 2
        assert re.search(rf"--out {re.escape(str(out))} is being written by another autoplan run "
                         rf"\(process {os.getpid()}\)", result.stderr), result.stderr
    finally:
        folder.release()
    assert not (out / LOCK_NAME).exists()
    assert CliRunner().invoke(main, [*SEARCH, "--out", str(out)]).exit_code == 0


def test_two_different_searches_into_one_folder_never_both_succeed(tmp_path):
    out = tmp_path / "out"
    runs = [subprocess.Popen([sys.executable, "-m", "autoplan.cli", "search", "-m", "8b", "-g", str(gpus),
                              "--gbs-seqs", "64", "--out", str(out)], stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True) for gpus in (8, 16)]
    codes = [run.wait(timeout=300) for run in runs]
    assert sorted(codes) == [0, 2], [run.stderr.read() for run in runs]
    manifest = json.loads((out / "manifest.json").read_text())
    winner = 8 if codes[0] == 0 else 16
    assert manifest["inputs"]["gpus"] == winner


def test_a_full_standard_output_is_named(tmp_path):
    line = f"{sys.executable} -m autoplan.cli estimate {' '.join(SMALL)} --tp 2 > /dev/full"
    done = subprocess.run(["bash", "-c", line], capture_output=True, text=True, timeout=300)
    assert done.returncode == 2
    assert done.stderr == "Error: cannot write standard output: No space left on device\n"


def test_a_closed_pipe_exits_0_quietly_for_every_printing_command(tmp_path):
    layouts = _layouts(tmp_path, rows=300)
    for command in (f"search {' '.join(SMALL)} --top 1000 --format csv --out {tmp_path / 's'}",
                    f"capacity -m 8b --train-tokens 1T --gbs-tokens 4M -g 64..128 --hardware h100-sxm --no-plots "
                    f"--format csv --out {tmp_path / 'c'}",
                    f"compare {layouts} {' '.join(SMALL)} --format json",
                    f"explain {' '.join(SMALL)} --tp 2 --full --format csv"):
        line = f"{sys.executable} -m autoplan.cli {command} | head -c 1 >/dev/null"
        started = time.monotonic()
        done = subprocess.run(["bash", "-o", "pipefail", "-c", line], capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, (command, done.stderr)
        assert "Error" not in done.stderr and "Traceback" not in done.stderr, command
        assert time.monotonic() - started < 300
