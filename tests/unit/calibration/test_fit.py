"""Calibration: recovers parameters from rows the model generated itself, deterministic for a
seed, never leaves the bounds, refuses too few rows; splits and cross-validation."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from autoplan.calibration.fit import (
    CalibrationError,
    cross_validate,
    fit_efficiency,
    fold_assignment,
    predict_rows,
    split_rows,
    training_fold_mask,
)
from autoplan.calibration.rows import Row
from autoplan.calibration.simplex import nelder_mead
from autoplan.cost.context import CostContext
from autoplan.errors import AutoplanError
from autoplan.profiles import PARAMETERS, CalibratedParameters, load_profile
from autoplan.profiles.parameter_files import load_defaults
from autoplan.specs.hardware import load_gpu, make_cluster
from autoplan.specs.models import load_model
from autoplan.specs.training import TrainingSpec
from autoplan.units import GiB

MODEL = load_model("usp-1b")
START = load_defaults()  # where every fit starts (the uncalibrated defaults)
TRUE = START.with_values({"gemm_efficiency_max": 0.55, "attention_efficiency": 0.35,
                          "memory_reserve_bytes": 3.0 * GiB, "allocator_overhead": 0.08})
LAYOUTS = [dict(tp=tp, pp=pp, mbs=mbs, zero=zero)
           for tp, pp, mbs, zero in [(1, 1, 1, 0), (1, 1, 2, 1), (2, 1, 1, 1), (2, 2, 2, 1), (4, 1, 4, 0),
                                     (1, 2, 1, 1), (8, 1, 8, 1), (1, 4, 1, 0), (2, 1, 4, 0), (4, 2, 1, 1)]]


def _context(row: Row, eff: CalibratedParameters = START) -> CostContext:
    profile = load_profile("nanotron")
    gpus, seq_len, gbs_seqs = row.setup
    training = TrainingSpec(make_cluster(load_gpu("h100-sxm"), gpus), seq_len, gbs_seqs)
    return CostContext(model=MODEL, training=training, profile=profile, parameters=eff)


def _rows(eff: CalibratedParameters, n: int = len(LAYOUTS), gpus: int = 16, scale: float = 1.0) -> list[Row]:
    """Rows 'measured' by the cost model itself with efficiency ``eff`` (times ``scale``)."""
    rows = [Row(source="synthetic", row_id=f"synthetic:{i}", model=MODEL, hardware="h100-sxm",
                trainer="nanotron", layout={"gpus": gpus, "seq_len": 4096, "gbs_seqs": 64, **lay})
            for i, lay in enumerate(LAYOUTS[:n])]
    truth = predict_rows(rows, lambda r: _context(r, eff))
    return [replace(r, tokens_per_s_per_gpu=float(t) * scale, peak_memory_bytes=float(m))
            for r, t, m in zip(rows, truth["tokens_per_s_per_gpu"], truth["peak_memory_bytes"])]


PARAMS = ("gemm_efficiency_max", "attention_efficiency", "memory_reserve_bytes", "allocator_overhead")


@pytest.fixture(scope="module")
def fitted():
    # without the shrinkage prior: exact synthetic rows, so the truth is the optimum
    return fit_efficiency(_rows(TRUE), _context, PARAMS, seed=0, starts=1, max_evals=250, prior_rows=0.0)


def test_fit_recovers_known_parameters(fitted):
    eff, report = fitted
    for name in PARAMS:
        assert eff.value(name) == pytest.approx(TRUE.value(name), rel=0.02), name
    assert report.loss_after < 1e-6 < report.loss_before
    assert report.errors_after["tokens_mape_pct"] < 0.5
    assert report.num_time_rows == report.num_memory_rows == len(LAYOUTS)


def test_fit_is_deterministic_for_a_seed():
    rows = _rows(TRUE, n=6)
    runs = [fit_efficiency(rows, _context, ("gemm_efficiency_max", "attention_efficiency"), seed=3,
                           starts=2, max_evals=60)[0] for _ in range(2)]
    assert runs[0] == runs[1]


def test_fitted_values_stay_inside_bounds_and_a_fit_on_a_bound_is_flagged():
    # Measured 1.5x faster than gemm_efficiency_max = 1 allows: the fit must stop at the bound,
    # and the report must say so.
    rows = _rows(TRUE.with_values({"gemm_efficiency_max": 1.0}), n=6, scale=1.5)
    eff, report = fit_efficiency(rows, _context, ("gemm_efficiency_max", "scale_out_efficiency"), seed=0,
                                 starts=1, max_evals=80, prior_rows=0.0)
    for name, p in PARAMETERS.items():
        assert p.bounds[0] <= eff.value(name) <= p.bounds[1], name
    assert eff.efficiency.gemm_efficiency_max == pytest.approx(1.0, abs=1e-3)
    flagged = {f.name: f.reason for f in report.flags}
    assert "gemm_efficiency_max" in flagged and "bound 1" in flagged["gemm_efficiency_max"]


def test_a_fit_inside_the_plausible_ranges_is_not_flagged(fitted):
    _, report = fitted  # TRUE's values: 0.55, 0.35, 3 GiB, 0.08, all inside their plausible ranges (0.3, on the
    # attention range's edge, can come back a hair below it)
    assert report.flags == []


def test_too_few_rows_is_refused_with_the_counts():
    rows = _rows(TRUE, n=2)
    with pytest.raises(CalibrationError, match=r"too few usable rows.*need >= 3.*got 2") as info:
        fit_efficiency(rows, _context, ("gemm_efficiency_max", "scale_out_efficiency"))
    assert isinstance(info.value, AutoplanError)
    no_memory = [replace(r, peak_memory_bytes=float("nan")) for r in _rows(TRUE, n=5)]
    with pytest.raises(CalibrationError, match="memory"):
        fit_efficiency(no_memory, _context, ("memory_reserve_bytes",))
    with pytest.raises(CalibrationError, match="too few usable rows"):
        fit_efficiency([], _context, ("gemm_efficiency_max",))


def test_bad_parameter_and_mixed_pairs_are_refused():
    rows = _rows(TRUE, n=4)
    with pytest.raises(CalibrationError, match="unknown"):
        fit_efficiency(rows, _context, ("gemm_speed",))
    mixed = rows[:3] + [replace(rows[3], trainer="megatron")]
    with pytest.raises(CalibrationError, match="one \\(trainer, hardware\\) pair"):
        fit_efficiency(mixed, _context, ("gemm_efficiency_max",))


def test_cross_validation_predicts_every_row_held_out():
    rows = _rows(START.with_values({"gemm_efficiency_max": 0.6}), n=8)
    cv = cross_validate(rows, _context, ("gemm_efficiency_max",), seed=1, k=4, starts=1, max_evals=40,
                        prior_rows=0.0)  # no shrinkage: exact data, so held-out error ~ 0
    assert sorted(np.bincount(cv.folds)) == [2, 2, 2, 2]
    assert np.all(np.isfinite(cv.predicted["tokens_per_s_per_gpu"]))
    assert cv.errors()["tokens_mape_pct"] < 1.0  # exact synthetic data: held-out error ~ 0
    # The folds fitted in two processes give the same fits and predictions.
    parallel = cross_validate(rows, _context, ("gemm_efficiency_max",), seed=1, k=4, starts=1, max_evals=40,
                              prior_rows=0.0, jobs=2)
    assert np.array_equal(parallel.predicted["tokens_per_s_per_gpu"], cv.predicted["tokens_per_s_per_gpu"])
    assert [f.value("gemm_efficiency_max") for f in parallel.fitted] == [f.value("gemm_efficiency_max") for f in cv.fitted]


def test_training_on_one_fold_fits_each_fold_on_the_fold_before_it():
    folds = fold_assignment(30, 3, seed=2)
    for fold in range(3):
        train = training_fold_mask(folds, fold, "one")
        assert np.array_equal(train, folds == (fold - 1) % 3)  # one fold, never the predicted one
        assert train.sum() == 10
        assert np.array_equal(training_fold_mask(folds, fold, "others"), folds != fold)
    with pytest.raises(CalibrationError, match="train_on"):
        training_fold_mask(folds, 0, "half")


def test_split_is_seeded_and_per_source():
    rows = [replace(r, source=src, row_id=f"{src}:{i}") for src in ("a", "b")
            for i, r in enumerate(_rows(TRUE, n=10))]
    fit, held = split_rows(rows, 0.3, seed=7)
    assert [r.row_id for r in fit] == [r.row_id for r in split_rows(rows, 0.3, seed=7)[0]]
    assert sum(r.source == "a" for r in fit) == sum(r.source == "b" for r in fit) == 3
    assert len(fit) + len(held) == len(rows)
    with pytest.raises(CalibrationError, match="fraction"):
        split_rows(rows, 1.5)


def test_nelder_mead_minimises_rosenbrock():
    def rosen(x):
        return (1 - x[0]) ** 2 + 100 * (x[1] - x[0] ** 2) ** 2
    x, value, evals = nelder_mead(rosen, np.array([-1.2, 1.0]), max_evals=2000, ftol=1e-14, xtol=1e-8)
    assert value < 1e-8 and np.allclose(x, [1.0, 1.0], atol=1e-3) and evals <= 2000


def test_shrinkage_keeps_a_fit_on_few_rows_near_the_start_and_fades_with_more_rows():
    truth = START.with_values({"gemm_efficiency_max": 0.45})
    params = ("gemm_efficiency_max",)
    few = fit_efficiency(_rows(truth, n=4), _context, params, starts=1, max_evals=80, prior_rows=20.0)[0]
    many = fit_efficiency(_rows(truth, n=10), _context, params, starts=1, max_evals=80, prior_rows=20.0)[0]
    start, target = START.value("gemm_efficiency_max"), 0.45
    lo, hi = sorted((start, target))
    assert lo < few.value("gemm_efficiency_max") < hi  # pulled toward the start, not at the truth
    assert abs(many.value("gemm_efficiency_max") - target) < abs(few.value("gemm_efficiency_max") - target)


def test_a_parameter_the_rows_cannot_see_is_left_alone_with_a_warning():
    rows = _rows(TRUE, n=6, gpus=8)  # one node: no collective leaves NVLink
    eff, report = fit_efficiency(rows, _context, ("gemm_efficiency_max", "scale_out_efficiency"), starts=1,
                                 max_evals=60)
    assert "scale_out_efficiency" not in report.params
    assert eff.value("scale_out_efficiency") == START.value("scale_out_efficiency")
    assert any(w.startswith("scale_out_efficiency cannot be identified from these rows") for w in report.warnings)
    with pytest.raises(CalibrationError, match="cannot identify any of the parameters"):
        fit_efficiency(rows, _context, ("scale_out_efficiency",), starts=1, max_evals=20)


def test_trimmed_loss_ignores_the_worst_half():
    from autoplan.calibration.fit import trimmed

    # the best half (0.1, 0.1) gives 0.01; the outliers (5, 9) do not count
    assert trimmed(np.array([0.1, -0.1, 5.0, 9.0])) == pytest.approx(0.01)


def test_memory_params_are_the_parameters_that_move_predicted_memory():
    """MEMORY_PARAMS (judged, shrunk and guarded with the memory rows) are exactly the
    parameters whose value changes a predicted peak memory: each parameter is moved to the far
    end of its bounds on pipelined and unpipelined layouts of every ZeRO stage and recompute."""
    from autoplan.api import build_context, build_training
    from autoplan.calibration.fit import MEMORY_PARAMS
    from autoplan.cost.evaluate import evaluate
    from autoplan.space import enumerate_space, load_space

    training = build_training(64, 4096, 256)
    batch, _ = enumerate_space(load_space("default").with_overrides(tp=(1, 2), pp=(1, 2, 4), vpp=(1,), cp=(1,),
                                                                    mbs=(1, 2), zero=(0, 1, 3)), training)
    moving = set()
    for trainer in ("megatron", "nanotron"):
        ctx = build_context("8b", training, trainer=trainer)
        start = evaluate(ctx, batch)["peak_memory_bytes"]
        for name, p in PARAMETERS.items():
            low, high = p.bounds
            value = ctx.parameters.value(name)
            far = high if value - low < high - value else low
            moved = replace(ctx, parameters=ctx.parameters.with_values({name: far}))
            if not np.array_equal(evaluate(moved, batch)["peak_memory_bytes"], start):
                moving.add(name)
    assert moving == set(MEMORY_PARAMS)
