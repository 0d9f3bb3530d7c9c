"""Training-log import on real trainer logs (``logs/*.log``: each file's header names the GitHub
thread or README it was copied from and the layout stated there), and the per-line refusal of
non-finite figures. Each expected value is the arithmetic in its comment, from the lines."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from autoplan.calibration.log_import import LogImportError, parse_log
from autoplan.units import GiB, MiB

LOGS = Path(__file__).parent / "logs"


def test_megatron_mixtral_issue_756():
    # 16 GPUs, gbs 128 from the lines; seq_len 4096 assumed for the arithmetic (not in the excerpt)
    s = parse_log(LOGS / "megatron_mixtral_8x7b_16xh100.log", "megatron", gpus=16, seq_len=4096, gbs_seqs=128)
    assert s.skipped_steps == [2, 3] and [e.step for e in s.used] == [71, 72, 73]
    # median of 5361.6, 5470.7, 5829.9 ms = 5470.7 ms: 128 x 4096 / (5.4707 s x 16) = 5989.7 tokens/s/GPU
    assert s.tokens_per_s_per_gpu == pytest.approx(128 * 4096 / (5.4707 * 16))
    assert s.tokens_range == pytest.approx((128 * 4096 / (5.8299 * 16), 128 * 4096 / (5.3616 * 16)))
    # reserved = 'max reserved' 61480.0 MiB; allocated = 'max allocated' 54250.98583984375 MiB
    assert s.peak_memory_bytes == pytest.approx(61480.0 * MiB)
    assert s.peak_allocated_bytes == pytest.approx(54250.98583984375 * MiB)


def test_megatron_bridge_reads_as_megatron():
    s = parse_log(LOGS / "megatron_mixtral_8x7b_16xh100.log", "megatron-bridge", gpus=16, seq_len=4096,
                  gbs_seqs=128, skip_steps=0)
    assert s.log_format == "megatron" and len(s.used) == 5


def test_torchtitan_llama3_8b_pr_1287():
    s = parse_log(LOGS / "torchtitan_llama3_8b_8gpu.log", "torchtitan")
    # steps 200 and 210 skipped; median of 5,868 5,869 5,864 5,862 = (5864 + 5868) / 2 = 5866
    assert s.skipped_steps == [200, 210] and s.tokens_per_s_per_gpu == 5866.0
    assert s.tokens_range == (5862.0, 5869.0)
    # torchtitan's memory is max_memory_reserved (GiB); it prints no allocated figure
    assert s.peak_memory_bytes == pytest.approx(49.66 * GiB) and math.isnan(s.peak_allocated_bytes)


def test_nanotron_issue_390_and_pr_23():
    s = parse_log(LOGS / "nanotron_2gpu.log", "nanotron")
    assert [e.step for e in s.used] == [327283, 327284] and s.tokens_per_s_per_gpu == pytest.approx(11.4e3)
    assert math.isnan(s.peak_memory_bytes)
    s = parse_log(LOGS / "nanotron_memory_8gpu.log", "nanotron", skip_steps=0)
    # median of 1.78K 1.94K 2.03K = 1940; cuda_max_memory_reserved 547M = 547e6 bytes (human format)
    assert s.tokens_per_s_per_gpu == pytest.approx(1940.0) and s.peak_memory_bytes == pytest.approx(547e6)


def test_megatron_deepspeed_polaris_readme():
    s = parse_log(LOGS / "deepspeed_polaris_tp2_zero2.log", "deepspeed", gpus=8, seq_len=4096, gbs_seqs=32,
                  skip_steps=0)
    # Megatron-DeepSpeed's own per-GPU figure: tgs 1613.503 (= 3.151 samples/s x 4096 / 8 = 1613.3)
    assert s.tokens_per_s_per_gpu == pytest.approx(1613.503)
    # reserved: the larger 'max reserved' of ranks 0 and 1 = 35824.0 MiB; allocated 22332.37 MiB
    assert s.peak_memory_bytes == pytest.approx(35824.0 * MiB)
    assert s.peak_allocated_bytes == pytest.approx(22332.37255859375 * MiB)


def test_deepspeed_engine_timer_lines():
    s = parse_log(LOGS / "deepspeed_engine_timer.log", "deepspeed", gpus=192, seq_len=4096, gbs_seqs=768,
                  skip_steps=1)
    # step 200: CurrSamplesPerSec 58.75503515561452 (global samples) x 4096 / 192 GPUs = 1253.4
    assert s.tokens_per_s_per_gpu == pytest.approx(58.75503515561452 * 4096 / 192)
    # MaxMemAllocated 19.52 "GB" (GiB) is allocated memory: no reserved peak is taken from it
    assert math.isnan(s.peak_memory_bytes) and s.peak_allocated_bytes == pytest.approx(19.52 * GiB)
    assert any("allocated memory only" in note for note in s.notes)


@pytest.mark.parametrize("name, fmt, old, new, line", [
    ("torchtitan_llama3_8b_8gpu.log", "torchtitan", "tps: 5,868", "tps: inf", 11),
    ("torchtitan_llama3_8b_8gpu.log", "torchtitan", "memory: 49.66GiB(52.28%)  tps: 5,868",
     "memory: nanGiB(52.28%)  tps: 5,868", 11),
    ("megatron_mixtral_8x7b_16xh100.log", "megatron", "(ms): 5470.7", "(ms): nan", 11),
    ("megatron_mixtral_8x7b_16xh100.log", "megatron", "max reserved: 61480.0", "max reserved: -inf", 7),
    ("nanotron_2gpu.log", "nanotron", "tokens_per_sec_per_gpu: 11.4K | global_batch_size: 64 | lm_loss: 2.51",
     "tokens_per_sec_per_gpu: -inf | global_batch_size: 64 | lm_loss: 2.51", 7),
    ("deepspeed_engine_timer.log", "deepspeed", "CurrSamplesPerSec=58.75503515561452", "CurrSamplesPerSec=inf", 9),
    ("deepspeed_polaris_tp2_zero2.log", "deepspeed", "second(tgs): 1613.503", "second(tgs): 1e999", 19),
])
def test_a_non_finite_figure_is_refused_with_file_and_line(tmp_path, name, fmt, old, new, line):
    text = (LOGS / name).read_text(encoding="utf-8")
    assert old in text
    path = tmp_path / name
    path.write_text(text.replace(old, new, 1), encoding="utf-8")
    with pytest.raises(LogImportError, match=rf"{name}:{line}: .* expected a finite number > 0"):
        parse_log(path, fmt, gpus=192, seq_len=4096, gbs_seqs=128)


def test_a_log_without_a_step_line_says_what_it_expected(tmp_path):
    path = tmp_path / "empty.log"
    path.write_text("NCCL INFO Connected all trees\n", encoding="utf-8")
    with pytest.raises(LogImportError, match=r"no deepspeed step line .*tgs.*CurrSamplesPerSec"):
        parse_log(path, "deepspeed", gpus=8, seq_len=4096, gbs_seqs=32)
