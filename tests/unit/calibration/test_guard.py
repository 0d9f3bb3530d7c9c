"""The calibration guard: fitted values are kept only where they beat the starting values on
rows the fit did not see."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from autoplan.calibration.fit import FitReport, predict, prepare
from autoplan.calibration.guard import guard, median_abs_pct, sign_test_p
from autoplan.calibration.rows import Row
from autoplan.cost.context import CostContext
from autoplan.profiles import load_profile
from autoplan.profiles.parameter_files import load_defaults
from autoplan.specs.hardware import load_gpu, make_cluster
from autoplan.specs.models import load_model
from autoplan.specs.training import TrainingSpec

START = load_defaults()
MODEL = load_model("usp-1b")


def context(row: Row) -> CostContext:
    training = TrainingSpec(make_cluster(load_gpu("h100-sxm"), 16), 4096, 64)
    return CostContext(model=MODEL, training=training, profile=load_profile("nanotron"), parameters=START)


@pytest.fixture(scope="module")
def prepared():
    """Rows measured exactly as the starting values predict them."""
    rows = [Row(source="s", row_id=f"s:{i}", model=MODEL, hardware="h100-sxm", trainer="nanotron",
                layout={"gpus": 16, "seq_len": 4096, "gbs_seqs": 64, "tp": tp, "pp": 1, "mbs": mbs, "zero": 1})
            for i, (tp, mbs) in enumerate(((1, 1), (2, 1), (4, 1), (8, 1), (1, 2), (2, 2)))]
    truth = predict(prepare(rows, context))
    rows = [replace(r, tokens_per_s_per_gpu=float(t), peak_memory_bytes=float(m))
            for r, t, m in zip(rows, truth["tokens_per_s_per_gpu"], truth["peak_memory_bytes"])]
    return prepare(rows, context)


def report(params: dict[str, float]) -> FitReport:
    return FitReport(trainer="nanotron", hardware="h100-sxm", params=params, row_ids=[], num_time_rows=6,
                     num_memory_rows=6, loss_before=0.0, loss_after=0.0, errors_before={}, errors_after={},
                     evaluations=0, seed=0, loss="soft_l1", flags=[])


def test_a_fit_worse_than_the_start_on_held_out_rows_is_reset(prepared):
    fitted = START.with_values({"gemm_efficiency_max": 0.3})
    held_out = predict(prepared, fitted)  # the start is exact, so the fit is worse
    kept, rep = guard(fitted, report({"gemm_efficiency_max": 0.3}), START, held_out, prepared)
    assert kept.value("gemm_efficiency_max") == START.value("gemm_efficiency_max")
    assert rep.params["gemm_efficiency_max"] == START.value("gemm_efficiency_max")
    assert len(rep.warnings) == 1 and rep.warnings[0].startswith("the fitted tokens/s parameters (gemm_efficiency_max)")


def test_a_fit_better_than_the_start_is_kept(prepared):
    fitted = START.with_values({"gemm_efficiency_max": 0.3})
    # held-out predictions that are exact beat a start that is 50% off
    start = START.with_values({"gemm_efficiency_max": min(1.0, 1.5 * START.value("gemm_efficiency_max"))})
    kept, rep = guard(fitted, report({"gemm_efficiency_max": 0.3}), start, predict(prepared, START), prepared)
    assert kept.value("gemm_efficiency_max") == 0.3 and rep.warnings == []


def test_a_median_gain_on_too_few_rows_is_not_enough(prepared):
    # exact held-out predictions beat a start 50% off on only 4 rows: the sign test's smallest
    # p-value is then 1/2^4 = 0.0625 > 0.05, so the start stays
    rows = prepare(prepared.rows[:4], context)
    start = START.with_values({"gemm_efficiency_max": min(1.0, 1.5 * START.value("gemm_efficiency_max"))})
    kept, rep = guard(START, report({"gemm_efficiency_max": 0.3}), start, predict(rows, START), rows)
    assert kept.value("gemm_efficiency_max") == start.value("gemm_efficiency_max")
    assert "sign test p = 0.06" in rep.warnings[0]


def test_sign_test_p_value():
    # 5 wins, 1 loss, 1 tie: P(X >= 5 | n=6) = (6 + 1) / 64
    mine, theirs = np.array([1, 1, 1, 1, 1, 3, 2.0]), np.array([2, 2, 2, 2, 2, 1, 2.0])
    assert sign_test_p(mine, theirs) == pytest.approx(7 / 64)


def test_median_abs_pct_counts_an_unrunnable_prediction_as_wrong(prepared):
    exact = predict(prepared)
    assert median_abs_pct(exact, prepared, "tokens/s") == pytest.approx(0.0, abs=1e-9)
    broken = {**exact, "tokens_per_s_per_gpu": np.full(6, np.nan)}
    assert median_abs_pct(broken, prepared, "tokens/s") == np.inf
