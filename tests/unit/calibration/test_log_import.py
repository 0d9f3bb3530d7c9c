"""Training-log import: Megatron-LM, torchtitan and nanotron step lines -> one measured row.

The excerpts follow the lines these trainers print (Megatron ``training_log`` and
``report_memory``; torchtitan ``MetricsProcessor.log``; nanotron ``LoggerWriter`` with the
``1.6E`` and ``human_format`` value formats); numbers are made up, the arithmetic of each
expected value is in a comment.
"""

from __future__ import annotations

import csv
import math

import numpy as np
import pytest
from click.testing import CliRunner

from autoplan.calibration.log_import import LogImportError, human_number, parse_log
from autoplan.cli import main
from autoplan.errors import AutoplanError
from autoplan.units import GiB, MiB

MEGATRON = """\
> building train, validation, and test datasets ...
[before the start of training step] datetime: 2025-04-13 23:41:00
 [2025-04-13 23:41:12] iteration        1/      20 | consumed samples:          512 | elapsed time per iteration (ms): 9147.6 | learning rate: 0.000000E+00 | global batch size:   512 | lm loss: 1.082000E+01 | loss scale: 1.0 | number of skipped iterations:   0 | number of nan iterations:   0 |
[Rank 0] (after 1 iterations) memory (MB) | allocated: 21464.33 | max allocated: 50464.34 | reserved: 55576.00 | max reserved: 55576.00
[Rank 4] (after 1 iterations) memory (MB) | allocated: 20464.33 | max allocated: 52464.34 | reserved: 56000.00 | max reserved: 57344.00
 [2025-04-13 23:41:20] iteration        2/      20 | consumed samples:         1024 | elapsed time per iteration (ms): 4300.0 | learning rate: 1.000000E-05 | global batch size:   512 | lm loss: 1.050000E+01 | loss scale: 1.0 | grad norm: 3.100 | number of skipped iterations:   0 | number of nan iterations:   0 |
 [2025-04-13 23:41:24] iteration        3/      20 | consumed samples:         1536 | elapsed time per iteration (ms): 4200.0 | throughput per GPU (TFLOP/s/GPU): 401.2 | learning rate: 1.000000E-05 | global batch size:   512 | lm loss: 1.010000E+01 |
 [2025-04-13 23:41:28] iteration        4/      20 | consumed samples:         2048 | elapsed time per iteration (ms): 4100.0 | learning rate: 1.000000E-05 | global batch size:   512 | lm loss: 9.900000E+00 |
 [2025-04-13 23:41:32] iteration        5/      20 | consumed samples:         2560 | elapsed time per iteration (ms): 4000.0 | learning rate: 1.000000E-05 | global batch size:   512 | lm loss: 9.800000E+00 |
"""

TORCHTITAN = """\
[rank0]:[titan] 2025-01-30 10:03:01,122 - root - INFO - Training starts at step 1.
[rank0]:[titan] 2025-01-30 10:03:21,122 - root - INFO - \x1b[31mstep:  1  \x1b[32mloss: 12.2500  \x1b[38;2;180;60;0mgrad_norm:  4.0000  \x1b[38;2;54;234;195mmemory: 72.13GiB(75.92%)  \x1b[34mtps: 1,152  \x1b[36mtflops: 66.73  \x1b[35mmfu: 6.75%\x1b[39m
[rank0]:[titan] 2025-01-30 10:03:31,122 - root - INFO - step: 10  loss:  9.8910  grad_norm:  2.1200  memory: 61.23GiB(64.46%)  tps: 5,762  tflops: 333.70  mfu: 33.74%
[rank1]:[titan] 2025-01-30 10:03:31,130 - root - INFO - step: 10  loss:  9.8910  grad_norm:  2.1200  memory: 61.50GiB(64.74%)  tps: 5,770  tflops: 334.16  mfu: 33.79%
[rank0]:[titan] 2025-01-30 10:03:41,122 - root - INFO - step: 20  loss:  8.1234  grad_norm:  1.5000  memory: 61.23GiB(64.46%)  tps: 5,801  tflops: 335.96  mfu: 33.97%
[rank0]:[titan] 2025-01-30 10:03:45,000 - root - INFO - validate step: 20  loss:  8.2000  memory: 63.00GiB(66.32%)  tps: 9,999
[rank0]:[titan] 2025-01-30 10:03:51,122 - root - INFO - step: 30  loss:  7.5555  grad_norm:  1.2000  memory: 61.24GiB(64.47%)  tps: 5,790  tflops: 335.32  mfu: 33.90%
[rank0]:[titan] 2025-01-30 10:04:01,122 - root - INFO - step: 40  loss:  7.1000  grad_norm:  1.1000  memory: 61.24GiB(64.47%)  tps: 5,795  tflops: 335.61  mfu: 33.93%
"""

NANOTRON_1_6E = """\
[default0]:07/20/2024 10:11:02 [INFO|DP=0|PP=0|TP=0|ip-26-0-160-225]:  Memory usage: 16953.15MiB. Peak allocated 16953.15MiB. Peak reserved: 18244.00MiB
[default0]:07/20/2024 10:11:12 [INFO|DP=0|PP=0|TP=0|ip-26-0-160-225]: iteration: 1 / 10 | consumed_tokens: 1.05M | elapsed_time_per_iteration_ms: 15.2K | tokens_per_sec: 6.900000E+04 | tokens_per_sec_per_gpu: 8.625000E+03 | global_batch_size:   256 | lm_loss: 1.220000E+01 | lr: 3.000E-04 | model_tflops_per_gpu: 78.40 | hardware_tflops_per_gpu: 78.40 | grad_norm: 10.312
[default0]:07/20/2024 10:11:12 [INFO|DP=0|PP=0|TP=0|ip-26-0-160-225]:  Memory usage: 33906.30MiB. Peak allocated 50860.46MiB. Peak reserved: 61462.00MiB
[default0]:07/20/2024 10:11:15 [INFO|DP=0|PP=0|TP=0|ip-26-0-160-225]: iteration: 2 / 10 | consumed_tokens: 2.1M | elapsed_time_per_iteration_ms: 3.45K | tokens_per_sec: 3.040000E+05 | tokens_per_sec_per_gpu: 3.800000E+04 | global_batch_size:   256 | lm_loss: 1.180000E+01
[default0]:07/20/2024 10:11:18 [INFO|DP=0|PP=0|TP=0|ip-26-0-160-225]: iteration: 3 / 10 | consumed_tokens: 3.15M | elapsed_time_per_iteration_ms: 3.3K | tokens_per_sec: 3.120000E+05 | tokens_per_sec_per_gpu: 3.900000E+04 | global_batch_size:   256 | lm_loss: 1.100000E+01
[default0]:07/20/2024 10:11:21 [INFO|DP=0|PP=0|TP=0|ip-26-0-160-225]: iteration: 4 / 10 | consumed_tokens: 4.19M | elapsed_time_per_iteration_ms: 3.35K | tokens_per_sec: 3.080000E+05 | tokens_per_sec_per_gpu: 3.850000E+04 | global_batch_size:   256 | lm_loss: 1.010000E+01
[default0]:07/20/2024 10:11:24 [INFO|DP=0|PP=0|TP=0|ip-26-0-160-225]: iteration: 5 / 10 | consumed_tokens: 5.24M | elapsed_time_per_iteration_ms: 3.2K | tokens_per_sec: 3.200000E+05 | tokens_per_sec_per_gpu: 4.000000E+04 | global_batch_size:   256 | lm_loss: 9.800000E+00
"""

NANOTRON_HUMAN = """\
\x1b[2;3m07/20 10:11:15 [INFO|DP=0|PP=0|TP=0]\x1b[0m: iteration: 1 / 10 | consumed_tokens: 1.05M | time_per_iteration_ms: 15.2K | tokens_per_sec: 69K | tokens_per_sec_per_gpu: 8.62K | global_batch_size: 1.05M | grad_norm: 10.3 | lm_loss: 12.2 | lr: 0.0003 | model_tflops_per_gpu: 78.4 | eta: 0:02:17
\x1b[2;3m07/20 10:11:18 [INFO|DP=0|PP=0|TP=0]\x1b[0m: iteration: 2 / 10 | consumed_tokens: 2.1M | time_per_iteration_ms: 3.45K | tokens_per_sec: 304K | tokens_per_sec_per_gpu: 38K | global_batch_size: 1.05M | grad_norm: 3.1 | lm_loss: 11.8 | lr: 0.0003 | model_tflops_per_gpu: 345 | eta: 0:00:28
\x1b[2;3m07/20 10:11:21 [INFO|DP=0|PP=0|TP=0]\x1b[0m: iteration: 3 / 10 | consumed_tokens: 3.15M | time_per_iteration_ms: 3.3K | tokens_per_sec: 312K | tokens_per_sec_per_gpu: 39K | global_batch_size: 1.05M | grad_norm: 2.2 | lm_loss: 11 | lr: 0.0003 | model_tflops_per_gpu: 354 | eta: 0:00:23
"""


@pytest.fixture
def log(tmp_path):
    def write(text: str, name: str = "train.log"):
        path = tmp_path / name
        path.write_text(text, encoding="utf-8")
        return path
    return write


# --- Megatron ---------------------------------------------------------------------------------

def test_megatron_tokens_from_iteration_time_after_warm_up(log):
    s = parse_log(log(MEGATRON), "megatron", gpus=64, seq_len=4096, gbs_seqs=512)
    assert s.skipped_steps == [1, 2] and [e.step for e in s.used] == [3, 4, 5]
    # median time of steps 3-5 = 4100 ms: 512 seqs x 4096 tokens / (4.1 s x 64 GPUs) = 7992.2
    assert s.tokens_per_s_per_gpu == pytest.approx(512 * 4096 / (4.1 * 64))
    # the largest 'max reserved' over the ranks' reports, Megatron's "MB" being MiB
    assert s.peak_memory_bytes == pytest.approx(57344.0 * MiB) and s.peak_memory_gib == pytest.approx(56.0)


def test_megatron_batch_comes_from_the_line_when_it_ramps_up(log):
    text = MEGATRON.replace("global batch size:   512 | lm loss: 9.9", "global batch size:   256 | lm loss: 9.9")
    s = parse_log(log(text), "megatron", gpus=64, seq_len=4096, gbs_seqs=512, skip_steps=3)
    # step 4: 256 x 4096 / (4.1 s x 64) = 3996.1; step 5: 512 x 4096 / (4.0 s x 64) = 8192; median of two
    assert s.tokens_per_s_per_gpu == pytest.approx((256 * 4096 / (4.1 * 64) + 512 * 4096 / (4.0 * 64)) / 2)
    assert any("noisy" in note for note in s.notes)


def test_megatron_needs_the_layout(log):
    with pytest.raises(LogImportError, match="needs gpus, seq_len and gbs_seqs"):
        parse_log(log(MEGATRON), "megatron", gpus=None, seq_len=4096, gbs_seqs=512)


# --- torchtitan -------------------------------------------------------------------------------

def test_torchtitan_tps_and_memory_ignoring_colours_and_validation(log):
    s = parse_log(log(TORCHTITAN), "torchtitan", skip_steps=2)
    # steps 1 and 10 skipped (both ranks' step-10 lines); median of 5801, 5790, 5795 = 5795
    assert s.skipped_steps == [1, 10]
    assert s.tokens_per_s_per_gpu == 5795.0
    assert all(e.tokens_per_s_per_gpu != 9999 for e in s.entries)  # the validate line is not a step
    # peak over all reports (the step-1 line included: memory is a peak, not a rate)
    assert s.peak_memory_bytes == pytest.approx(72.13 * GiB)


def test_torchtitan_without_skipping_takes_every_rank(log):
    s = parse_log(log(TORCHTITAN), "torchtitan", skip_steps=0)
    assert len(s.used) == 6  # 1, 10 (two ranks), 20, 30, 40
    assert s.tokens_per_s_per_gpu == pytest.approx((5770 + 5790) / 2)


# --- nanotron ---------------------------------------------------------------------------------

def test_nanotron_1_6e_format_and_peak_reserved(log):
    s = parse_log(log(NANOTRON_1_6E), "nanotron")
    # steps 3-5: 39000, 38500, 40000 -> median 39000
    assert s.tokens_per_s_per_gpu == pytest.approx(3.9e4)
    assert s.peak_memory_bytes == pytest.approx(61462.0 * MiB)


def test_nanotron_human_format(log):
    s = parse_log(log(NANOTRON_HUMAN), "nanotron", skip_steps=1)
    # steps 2 and 3: 38K and 39K -> 38500; no memory report
    assert s.tokens_per_s_per_gpu == pytest.approx(38500.0)
    assert math.isnan(s.peak_memory_bytes)


def test_nanotron_falls_back_to_tokens_per_sec_over_gpus(log):
    text = "\n".join(line.replace(" | tokens_per_sec_per_gpu: 38K", "").replace(" | tokens_per_sec_per_gpu: 39K", "")
                     for line in NANOTRON_HUMAN.splitlines())
    s = parse_log(log(text), "nanotron", skip_steps=1, gpus=8)
    assert s.tokens_per_s_per_gpu == pytest.approx((304e3 + 312e3) / 2 / 8)


@pytest.mark.parametrize("text, value", [("4.59K", 4590.0), ("2.85E+05", 2.85e5), ("1.2B", 1.2e9), ("38K", 38e3),
                                         ("0.0003", 3e-4), ("1.5E", 1.5e18), ("5,762", 5762.0)])
def test_human_number(text, value):
    assert human_number(text) == pytest.approx(value)


# --- errors -----------------------------------------------------------------------------------

def test_wrong_format_says_what_it_expected(log):
    with pytest.raises(LogImportError, match="no torchtitan step line .* is --log-format right"):
        parse_log(log(MEGATRON), "torchtitan")


def test_every_step_skipped_is_refused_with_the_counts(log):
    with pytest.raises(LogImportError, match=r"found 5 logged step\(s\) \(1, 2, 3, 4, 5\), all skipped .*--skip-steps 5"):
        parse_log(log(MEGATRON), "megatron", gpus=64, seq_len=4096, gbs_seqs=512, skip_steps=5)


def test_unknown_format_and_missing_file(log, tmp_path):
    with pytest.raises(LogImportError, match="unknown log format 'maxtext'; known: megatron"):
        parse_log(log(MEGATRON), "maxtext")
    with pytest.raises(AutoplanError, match="missing.log: cannot read file"):
        parse_log(tmp_path / "missing.log", "megatron", gpus=8, seq_len=4096, gbs_seqs=8)


# --- the command ------------------------------------------------------------------------------

def test_cli_appends_rows_that_calibrate_reads(log, tmp_path):
    measured = tmp_path / "measured.csv"
    base = ["calibrate", "--model", "llama3-8b", "--append-to", str(measured)]
    runner = CliRunner()
    for text, fmt, layout in ((MEGATRON, "megatron", "gpus=64,tp=2,pp=2,gbs_seqs=512,seq_len=4096"),
                              (TORCHTITAN, "torchtitan", "gpus=8,tp=1,zero=1,gbs_seqs=8,seq_len=8192")):
        result = runner.invoke(main, [*base, "--from-log", str(log(text, f"{fmt}.log")), "--log-format", fmt,
                                      "--layout", layout])
        assert result.exit_code == 0, result.output + result.stderr
        assert "appended 1 row" in result.stderr and "median" in result.stderr
    rows = list(csv.DictReader(open(measured, newline="")))
    assert [r["tp"] for r in rows] == ["2", "1"] and rows[0]["dp"] == "16"
    assert float(rows[0]["tokens_per_s_per_gpu"]) == pytest.approx(7992.2, abs=0.1)
    assert float(rows[1]["peak_memory_gib"]) == pytest.approx(72.13)
    from autoplan.calibration.measured import MeasuredContext, read_measured
    from autoplan.profiles import load_profile
    from autoplan.specs.hardware import load_gpu

    context = MeasuredContext(load_gpu("h100-sxm"), load_profile("megatron"), gpus_per_node=4)
    got = read_measured(measured, context)
    assert len(got.rows) == 2 and got.rows[0].layout["pp"] == 2
    # Pickled as its arguments (calibrate --jobs): the copy builds the same contexts, its own caches.
    import pickle

    from autoplan.calibration.fit import predict_rows

    copy = pickle.loads(pickle.dumps(context))
    assert copy(got.rows[0]).cluster.gpus_per_node == 4 and copy.parameters == context.parameters
    mine, theirs = predict_rows(got.rows, copy), predict_rows(got.rows, context)
    assert all(np.array_equal(mine[k], theirs[k]) for k in theirs)


def test_cli_options_override_the_layout_string_and_print_csv(log):
    result = CliRunner().invoke(main, ["calibrate", "--from-log", str(log(MEGATRON)), "--log-format", "megatron",
                                       "-m", "8b", "--layout", "gpus=64,tp=2,pp=2,gbs_seqs=512", "--tp", "4",
                                       "--seq-len", "4096"])
    assert result.exit_code == 0, result.output + result.stderr
    row = next(csv.DictReader(result.stdout.splitlines()))
    assert (row["tp"], row["pp"], row["dp"], row["seq_len"], row["model"]) == ("4", "2", "8", "4096", "llama3-8b")


def test_cli_log_without_a_layout_is_one_clear_error(log):
    result = CliRunner().invoke(main, ["calibrate", "--from-log", str(log(MEGATRON)), "--log-format", "megatron",
                                       "-m", "8b"])
    assert result.exit_code == 2
    assert "layout needs 'gpus'" in result.stderr and "--layout" in result.stderr
