"""Hostile input on every command (issue 18, items 3, 4, 8 and 9): each case reproduces a defect
of the audit and must now end in one line on stderr and exit code 2, quickly.

A case that hangs (a FIFO opened for reading waits for a writer) is stopped by an alarm and fails.
"""

from __future__ import annotations

import json
import os
import signal

import pytest
from click.testing import CliRunner

from autoplan.cli import main

E8 = ["-g", "8", "--gbs-seqs", "8"]
GOOD_CONFIG = dict(model_type="llama", num_hidden_layers=2, hidden_size=256, intermediate_size=512,
                   num_attention_heads=4, vocab_size=1000)
PLAN = {"model": "llama3-8b", "plans": [{"gpus": 8, "tp": 1, "pp": 1, "dp": 8, "gbs_seqs": 8, "seq_len": 8192}]}
MEASURED = "gpus,tp,gbs_seqs,tokens_per_s_per_gpu\n8,1,64,9000\n8,2,64,8500\n8,4,64,8000\n8,8,64,7000\n"
LOG = "iteration 10/100 | elapsed time per iteration (ms): 1000.0 | global batch size: 8 |\n"


def run(args: list[str], seconds: int = 20):
    """The CLI in-process; SIGALRM turns a hang into a failure."""
    def hang(*_):
        raise TimeoutError(f"autoplan {' '.join(args)} ran over {seconds} s")

    if not hasattr(signal, "SIGALRM"):  # Windows: no alarm, no limit
        return CliRunner().invoke(main, args)
    previous = signal.signal(signal.SIGALRM, hang)
    signal.alarm(seconds)
    try:
        return CliRunner().invoke(main, args)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def check_refused(args: list[str], text: str, code: int = 2) -> str:
    result = run(args)
    everything = result.output + result.stderr
    assert "Traceback" not in everything and "Internal error" not in everything, everything
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert result.exit_code == code, everything
    lines = result.stderr.strip("\n").splitlines()
    assert len(lines) == 1 and text in lines[0], lines
    return lines[0]


@pytest.fixture
def work(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("AUTOPLAN_DEBUG", raising=False)
    return tmp_path


# --- item 3: anything but a regular file is refused before reading ------------------------------

def _commands(path: str) -> dict[str, list[str]]:
    return {
        "model": ["estimate", "-m", path, *E8],
        "hardware": ["estimate", "-m", "8b", "--hardware", path, *E8],
        "space": ["search", "-m", "8b", *E8, "--space", path, "--out", "out"],
        "profile": ["estimate", "-m", "8b", "--profile", path, *E8],
        "export-plan": ["export", path, "--to", "megatron"],
        "compare-csv": ["compare", path, "-m", "8b", *E8],
        "calibrate-csv": ["calibrate", path, "-m", "8b"],
        "from-log": ["calibrate", "--from-log", path, "--log-format", "megatron", "-m", "8b",
                     "--layout", "gpus=8,gbs_seqs=8"],
    }


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs os.mkfifo")
@pytest.mark.parametrize("option", list(_commands("x")))
def test_a_fifo_is_refused_everywhere(work, option):
    os.mkfifo(work / "input.yaml")
    check_refused(_commands("./input.yaml")[option], "input.yaml: is a FIFO (named pipe), expected a regular file")


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="needs /dev/zero")
@pytest.mark.parametrize("option", list(_commands("x")))
def test_a_link_to_dev_zero_is_refused_everywhere(work, option):
    (work / "zero.yaml").symlink_to("/dev/zero")
    check_refused(_commands("./zero.yaml")[option], "zero.yaml: is a character device, expected a regular file")


def test_a_config_over_16_mib_is_refused_with_its_size(work):
    (work / "big.json").write_text(json.dumps({**GOOD_CONFIG, "pad": "x" * (17 * 2**20)}))
    check_refused(["estimate", "-m", "big.json", *E8], "bytes, larger than the 16,777,216 bytes allowed")


# --- item 4: no alias expansion; no whole value in a message ------------------------------------

def test_yaml_aliases_are_refused(work):
    bomb = ["model_type: llama", "a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    bomb += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 10)]
    (work / "bomb.yaml").write_text("\n".join(bomb) + "\n")
    check_refused(["estimate", "-m", "bomb.yaml", *E8], "aliases (*a0) are not allowed in autoplan files")


def test_a_long_value_is_cut_in_the_message(work):
    (work / "long.json").write_text(json.dumps({**GOOD_CONFIG, "model_type": "s" * 10**6}))
    line = check_refused(["estimate", "-m", "long.json", *E8], "long.json: model_type")
    assert len(line) < 300 and "…" in line


# --- item 8: bounds and overflow ------------------------------------------------------------------

@pytest.mark.parametrize("args, text", [
    (["--gbs-seqs", "100000000000000000000"], "'--gbs-seqs': 100000000000000000000 is not in the range"),
    (["--gbs-tokens", "1e20"], "--gbs-tokens (1e+20) must be at most 1,099,511,627,776 sequences"),
    (["--gbs-seqs", "8", "--seq-len", "1000000000"], "'--seq-len': a sequence length is a whole number of tokens "
                                                    "from 1 to 100,000,000, got 1000000000"),
    (["--gbs-seqs", "8", "--tp", "99999999999"], "values must lie in [1, 1048576], got 99999999999"),
    (["--gbs-seqs", "8", "--zero", "4"], "values must lie in [0, 3], got 4"),
    (["--gbs-seqs", "8", "--seed", "-1"], "'--seed': -1 is not in the range 0<=x<=4294967295"),
    (["--gbs-seqs", "8", "--seed", "4294967296"], "'--seed': 4294967296 is not in the range"),
])
def test_search_has_the_bounds_of_estimate(work, args, text):
    # before: --gbs-seqs 1e20 exited 0 with grad_acc = -9223372036854775808 in plans.csv
    check_refused(["search", "-m", "8b", "-g", "8", *args, "--out", "out"], text)
    assert not (work / "out").exists()


@pytest.mark.parametrize("command", [["calibrate", "m.csv", "-m", "8b"], ["validate", "--quick"]])
def test_seeds_are_unsigned_32_bit_everywhere(work, command):
    check_refused([*command, "--seed", "4294967296"], "'--seed': 4294967296 is not in the range")


def test_an_integer_of_5000_digits_in_a_config(work):
    (work / "big.yaml").write_text("model_type: llama\nhidden_size: " + "9" * 5000 + "\n")
    check_refused(["estimate", "-m", "big.yaml", *E8], "an integer too long to be a number")
    (work / "big2.json").write_text(json.dumps({**GOOD_CONFIG, "hidden_size": 10**4000}))
    check_refused(["estimate", "-m", "big2.json", *E8], "hidden_size: must be <= 2147483648, got an integer of about "
                                                         "4000 digits")


@pytest.mark.parametrize("name, text", [
    ("n" * 300, "name: at most 255 characters, got 300"),
    ("llama\ud800", "name: control or invalid character '\\ud800'"),
    ("x\x1b]0;pwned\x07", "name: control or invalid character '\\x1b'"),
])
def test_bad_names_in_a_config(work, name, text):
    (work / "m.json").write_text(json.dumps({**GOOD_CONFIG, "name": name}))  # \ud800 as an escape
    line = check_refused(["estimate", "-m", "m.json", *E8], text)
    assert "\x1b" not in line and "\x07" not in line


def test_a_long_model_name_on_the_command_line(work):
    check_refused(["search", "-m", "m" * 5000, *E8, "--out", "out"], "unknown model 'mmmm")
    check_refused(["estimate", "-m", "x\x1b[2J", *E8], "unknown model 'x\\x1b[2J'")


def test_a_deeply_nested_plans_json(work):
    (work / "plans.json").write_text('{"plans": ' + "[" * 5000 + "]" * 5000 + "}")
    check_refused(["export", "plans.json", "--to", "megatron"], "plans.json: invalid JSON: nesting too deep")


@pytest.mark.parametrize("command", [["compare", "rows.csv", "-m", "8b", *E8], ["calibrate", "rows.csv", "-m", "8b"]])
def test_a_csv_row_with_an_extra_field_is_refused(work, command):
    # before: pandas shifted the row one column to the right without a word
    (work / "rows.csv").write_text("gpus,tp,gbs_seqs,tokens_per_s_per_gpu\n8,1,64,9000\n8,2,64,8500,1\n")
    check_refused(command, "rows.csv: line 3: 5 fields, but the header has 4 columns")


# --- item 9: strict units, duplicate keys and columns, a byte-order mark -------------------------

@pytest.mark.parametrize("nic", ["400 Gb/s bidirectional", "400 Gb/s lol"])
@pytest.mark.parametrize("command", [["estimate", "-m", "8b", *E8], ["search", "-m", "8b", *E8, "--out", "o"],
                                     ["compare", "rows.csv", "-m", "8b"], ["calibrate", "rows.csv", "-m", "8b"]])
def test_nic_with_trailing_words_is_refused(work, command, nic):
    (work / "rows.csv").write_text(MEASURED)
    check_refused([*command, "--nic", nic], "'--nic': expected a bandwidth like '400 Gb/s', got trailing text")


def test_nic_per_direction_is_accepted(work):
    result = run(["estimate", "-m", "8b", *E8, "--nic", "400 Gb/s per direction", "--format", "json"])
    # evaluated (0: fits, 1: does not fit); a refused --nic would exit 2
    assert result.exit_code in (0, 1) and json.loads(result.stdout), result.stderr


@pytest.mark.parametrize("name, text, message", [
    ("m.json", json.dumps(GOOD_CONFIG)[:-1] + ', "hidden_size": 512}', "key 'hidden_size' appears twice"),
    ("m.yaml", "model_type: llama\nhidden_size: 256\nhidden_size: 512\n", "key 'hidden_size' appears twice"),
])
def test_duplicate_keys_are_refused(work, name, text, message):
    (work / name).write_text(text)
    check_refused(["estimate", "-m", name, *E8], message)


@pytest.mark.parametrize("command", [["compare", "rows.csv", "-m", "8b", *E8], ["calibrate", "rows.csv", "-m", "8b"]])
def test_duplicate_csv_columns_are_refused(work, command):
    (work / "rows.csv").write_text("gpus,tp,tp,gbs_seqs,tokens_per_s_per_gpu\n8,1,2,64,9000\n")
    check_refused(command, "rows.csv: line 1: column 'tp' appears twice")


def test_csv_with_a_byte_order_mark_reads(work):
    # before: calibrate said "unknown column '\ufefftp'"
    (work / "rows.csv").write_text("tp,gpus,gbs_seqs\n2,8,8\n", encoding="utf-8-sig")
    result = run(["compare", "rows.csv", "-m", "8b"])
    assert result.exit_code == 0, result.stderr
    assert result.stdout.splitlines()[0].startswith("tp,gpus,gbs_seqs,fits")
    (work / "measured.csv").write_text("model," + MEASURED.replace("\n", "\nllama3-8b,")[:-len("llama3-8b,")],
                                       encoding="utf-8-sig")
    result = run(["calibrate", "measured.csv", "--params", "gemm_efficiency_max", "--starts", "1", "--folds", "2",
                  "--max-evals", "20", "-o", "cal.yaml"], seconds=120)
    assert result.exit_code == 0, result.stderr
    assert "\ufeff" not in result.output + result.stderr


# --- issue 48: hostile types and YAML 1.1 readings ---------------------------------------------

@pytest.mark.parametrize("model_type", [["llama"], {"a": 1}, 3])
def test_a_model_type_that_is_not_a_string_is_one_line(work, model_type):
    """A list or a mapping as model_type ended in `TypeError: unhashable type`, exit 3."""
    (work / "m.json").write_text(json.dumps({**GOOD_CONFIG, "model_type": model_type}))
    check_refused(["estimate", "-m", "m.json", *E8], "m.json: model_type must be a string")


@pytest.mark.parametrize("value, shown", [("1:20", "'1:20'"), ("010", "'010'"), ("yes", "'yes'")])
def test_yaml_1_1_readings_of_numbers_are_refused_not_taken(work, value, shown):
    """`num_hidden_layers: 1:20` was read as the sexagesimal 80 (a 18.5B-parameter '8B'), `010`
    as octal 8: YAML 1.2's core schema leaves them strings, which the typed check refuses."""
    text = "\n".join(f"{k}: {v}" for k, v in {**GOOD_CONFIG, "num_hidden_layers": value}.items())
    (work / "m.yaml").write_text(text + "\n")
    check_refused(["estimate", "-m", "m.yaml", *E8], f"num_hidden_layers: expected an integer, got {shown}")
