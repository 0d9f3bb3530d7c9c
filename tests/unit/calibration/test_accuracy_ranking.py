"""Ranking figures of the accuracy report: Spearman, top-1 and best-of-top-3 regret per cell."""

import dataclasses

import numpy as np
import pytest

from autoplan.calibration.accuracy import TOP_K, cell_rankings, spearman
from autoplan.calibration.rows import Row
from autoplan.specs.models import load_model

MODEL = load_model("llama3-8b")


def _row(i: int, mfu: float) -> Row:
    layout = {"gpus": 8, "seq_len": 4096, "gbs_seqs": 64, "tp": 1 + i % 2, "pp": 1, "dp": 8, "mbs": 1, "zero": 1}
    return Row(source="s", row_id=f"s:{i}", model=MODEL, hardware="h100-sxm", trainer="nanotron", layout=layout,
               tokens_per_s_per_gpu=1000.0 * mfu, mfu=mfu, cell="8b/1")


def test_best_of_top3_regret_uses_the_best_measured_of_the_three_ranked_first():
    mfu = [0.50, 0.40, 0.30, 0.20, 0.10]
    rows = [_row(i, m) for i, m in enumerate(mfu)]
    # predicted order: rows 3, 2, 0 first (row 0, the best, third), then 1, 4
    predicted = np.array([7.0, 6.0, 8.0, 9.0, 1.0])
    (cell,) = cell_rankings(rows, predicted)
    assert TOP_K == 3
    assert cell.regret == pytest.approx(1.0 - 0.20 / 0.50)  # row 3 ranked first
    assert cell.regret_top3 == pytest.approx(0.0)  # row 0 is among the top three
    # the best run ranked fourth: the best of the top three is row 1 (0.40)
    predicted = np.array([6.0, 7.0, 8.0, 9.0, 1.0])
    (cell,) = cell_rankings(rows, predicted)
    assert cell.regret_top3 == pytest.approx(1.0 - 0.40 / 0.50)


def test_best_of_top3_regret_never_exceeds_top1_regret():
    rng = np.random.default_rng(0)
    for _ in range(20):
        mfu = rng.uniform(0.1, 0.6, size=7)
        rows = [_row(i, m) for i, m in enumerate(mfu)]
        (cell,) = cell_rankings(rows, rng.uniform(size=7))
        assert 0.0 <= cell.regret_top3 <= cell.regret + 1e-12


def test_regret_is_judged_on_tokens_per_s_and_on_the_mfu_column_apart():
    # Within a cell MFU should be tokens/s times a constant; where a source's two columns
    # disagree (the playbook sweep), the regret on tokens/s and on MFU differ.
    rows = [_row(i, m) for i, m in enumerate([0.50, 0.40, 0.30, 0.20])]
    rows[1] = dataclasses.replace(rows[1], tokens_per_s_per_gpu=600.0)  # fastest by tokens/s
    (cell,) = cell_rankings(rows, np.array([1.0, 9.0, 2.0, 3.0]))  # row 1 ranked first
    assert cell.regret == pytest.approx(0.0) and cell.regret_top3 == pytest.approx(0.0)
    assert cell.regret_mfu == pytest.approx(1.0 - 0.40 / 0.50)
    assert cell.regret_top3_mfu == pytest.approx(1.0 - 0.40 / 0.50)  # rows 1, 3, 2: best MFU 0.40
    assert "tp2" in cell.best  # row 1 (tp = 1 + 1 % 2)


def test_spearman_of_a_reversed_order_is_minus_one():
    assert spearman(np.arange(5.0), -np.arange(5.0)) == pytest.approx(-1.0)
