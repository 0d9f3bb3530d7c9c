"""Leave-one-source-out folds: a source's rows never reach the fits that predict it."""

from __future__ import annotations

import pytest

from autoplan.calibration import loso
from autoplan.calibration.accuracy import FIT_PLAN
from autoplan.calibration.sources import load_sources
from autoplan.profiles import load_profile
from autoplan.profiles.transfer import TRANSFERRED


@pytest.fixture(scope="module")
def sources():
    return load_sources()


def test_a_fold_fits_on_every_other_source_and_never_on_the_held_one(sources, monkeypatch):
    seen = {}

    def fake_fit(rows, factory, params, seed, loss, prior_rows):
        pair = (rows[0].trainer, rows[0].hardware)
        seen[pair] = {r.source for r in rows}
        return load_profile(pair[0]).parameters_for(pair[1]), None

    monkeypatch.setattr(loso, "fit_efficiency", fake_fit)
    fits = loso.fold_fits(sources, "korthikanti")
    assert all("korthikanti" not in found for found in seen.values())
    assert set(fits) == set(seen) <= set(FIT_PLAN)
    # the Megatron A100 pair keeps the other A100 source it was fitted on (SC'21)
    assert "sc21" in seen[("megatron", "a100-80gb")]


def test_a_pair_left_without_rows_takes_transferred_parameters(sources, monkeypatch):
    def fake_fit(rows, factory, params, seed, loss, prior_rows):
        if rows and rows[0].hardware == "a100-80gb":
            raise loso.CalibrationError("too few usable rows")
        return load_profile(rows[0].trainer).parameters_for(rows[0].hardware), None

    monkeypatch.setattr(loso, "fit_efficiency", fake_fit)
    fits = loso.fold_fits(sources, "sc21")
    assert ("megatron", "a100-80gb") not in fits
    params = loso.fold_parameters(fits, "megatron", "a100-80gb")
    assert params.fitted_on.startswith(TRANSFERRED)
    # a trainer with no fit in the fold at all borrows another trainer's
    assert loso.fold_parameters(fits, "deepspeed", "h100-sxm").fitted_on.startswith(f"{TRANSFERRED} from ")


def test_pooled_mape_weights_sources_by_their_rows():
    figures = [loso.SourceFigures("sc21", 10, 10.0, 0.0, 0, float("nan"), 80.0, 6),
               loso.SourceFigures("mpt", 30, 20.0, 0.0, 0, float("nan"), 80.0, 6),
               loso.SourceFigures("playbook_sweep", 1000, 500.0, 0.0, 0, float("nan"), 80.0, 6)]  # not a time source
    assert loso.pooled_mape(figures) == pytest.approx((10 * 10.0 + 30 * 20.0) / 40)


def test_stored_folds_give_back_the_fits_they_were_written_from(tmp_path):
    """`validate` predicts with the stored fold fits: every value, the fitted names and their origin
    come back exactly (YAML floats round-trip), and a file written for other inputs is not used."""
    base = load_profile("megatron").parameters_for("h100-sxm")
    fitted = base.with_values({"dp_overlap": 0.123456789012345, "gemm_efficiency_max": 0.7}, fitted_on="fold test")
    folds = {"some_source": {("megatron", "h100-sxm"): fitted}, "empty_fold": {}}
    path = tmp_path / "folds.yaml"
    loso.write_folds(loso.folds_document(folds, "abc", seed=0), path)
    back = loso.stored_folds("abc", path)
    got = back["some_source"][("megatron", "h100-sxm")]
    assert got.values() == fitted.values()
    assert (got.fitted, got.fitted_on) == (fitted.fitted, "fold test")
    assert back["empty_fold"] == {}
    assert loso.stored_folds("another fingerprint", path) is None
    assert loso.stored_folds("abc", tmp_path / "missing.yaml") is None
    assert not list(tmp_path.glob("*.tmp"))
