"""Exhaustive studies stored without chunk claims (issue 48): a resume reads only which layouts
they hold (the knob values of COMPLETE trials, never the trials whole), stores none of them
again, claims the study so later resumes read claims only, and stays exact when killed while
claiming."""

from __future__ import annotations

import numpy as np
import optuna
import pytest

from autoplan.api import build_context, build_training
from autoplan.search import SearchOptions, legacy, recipe, search
from autoplan.search.exhaustive import flat_index, num_chunks, store_layouts
from autoplan.search.storage import _rdb, bulk_add, claims, num_trials
from autoplan.search.study import open_store
from autoplan.search.trials import frozen_trials
from autoplan.space import load_space

SPACE = load_space("default").with_overrides(pp=(1, 2, 4), vpp=(1, 2), mbs=(1, 2))  # 1,728 layouts
CHUNK = 256  # 1,728 layouts: 7 chunks


@pytest.fixture(scope="module")
def ctx():
    return build_context("8b", build_training(64, 8192, 256))


@pytest.fixture(scope="module")
def assessed(ctx):
    return search(ctx, SPACE, SearchOptions(sampler="exhaustive"))


@pytest.fixture(params=["sqlite", "journal"])
def storage(request, tmp_path):
    return f"sqlite:///{tmp_path / 'study.db'}" if request.param == "sqlite" else str(tmp_path / "study.log")


def _store(ctx, storage):
    """A new process's view of the study (its own StudyStore, nothing cached)."""
    return open_store(ctx, SPACE, SearchOptions(sampler="exhaustive", storage=storage, study_name="e"),
                      "exhaustive")


def _legacy_study(ctx, assessed, storage, rows=None):
    """The study as an autoplan before chunk claims stored it: its trials, no claim."""
    table = assessed.table if rows is None else recipe.take(assessed.table, rows)
    study = _store(ctx, storage).study
    bulk_add(study, frozen_trials(SPACE, table, 1))
    assert not claims(study)
    return study


def test_the_layouts_read_are_those_stored(ctx, assessed, storage):
    study = _legacy_study(ctx, assessed, storage)
    expected = np.unique(flat_index(SPACE, assessed.table.batch))  # what was added, computed apart
    assert np.array_equal(legacy.stored_flat_indices(study, SPACE), expected)


def test_the_rdb_pages_agree_with_the_trials(ctx, assessed, tmp_path, monkeypatch):
    """The SQL read (in pages smaller than the study) and Optuna's trials give the same layouts."""
    study = _legacy_study(ctx, assessed, f"sqlite:///{tmp_path / 'study.db'}")
    monkeypatch.setattr(legacy, "PAGE_TRIALS", 100)
    pages = list(legacy._rdb_pages(_rdb(study), study._study_id, SPACE))
    assert len(pages) == -(-len(assessed.table) // 100)
    trials = np.concatenate(list(legacy._trial_pages(study, SPACE)))
    assert np.array_equal(np.concatenate(pages), trials)


def test_a_knob_stored_with_two_distributions_is_read_by_value(ctx, assessed, storage):
    """Trials whose ``mbs`` choices are in another order (its stored index means another value)."""
    from optuna.distributions import CategoricalDistribution

    study = _store(ctx, storage).study
    trials = frozen_trials(SPACE, assessed.table, 1)
    other = {**trials[0].distributions, "mbs": CategoricalDistribution(list(SPACE.values["mbs"])[::-1])}
    bulk_add(study, trials[::2] + [optuna.trial.create_trial(params=t.params, distributions=other, values=t.values)
                                   for t in trials[1::2]])
    expected = np.unique(flat_index(SPACE, assessed.table.batch))
    assert np.array_equal(legacy.stored_flat_indices(study, SPACE), expected)


def test_a_resume_stores_nothing_again_and_claims_the_study(ctx, assessed, storage, monkeypatch):
    study = _legacy_study(ctx, assessed, storage)
    before = num_trials(study)
    assert store_layouts(_store(ctx, storage), SPACE, assessed.table, CHUNK) == 0
    assert num_trials(study) == before
    assert len(claims(_store(ctx, storage).study)) == num_chunks(SPACE, CHUNK)
    monkeypatch.setattr(legacy, "stored_flat_indices", _no_trial_read)  # claimed: no trial is read
    assert store_layouts(_store(ctx, storage), SPACE, assessed.table, CHUNK) == 0


def test_a_resume_killed_while_claiming_stores_nothing_twice(ctx, assessed, storage):
    """Half the chunks claimed, then a kill: the next process still reads what is stored."""
    study = _legacy_study(ctx, assessed, storage)
    before = num_trials(study)
    first = np.flatnonzero(flat_index(SPACE, assessed.table.batch) < 3 * CHUNK)  # chunks 0-2
    assert store_layouts(_store(ctx, storage), SPACE, recipe.take(assessed.table, first), CHUNK) == 0
    assert 0 < len(claims(_store(ctx, storage).study)) < num_chunks(SPACE, CHUNK)
    assert store_layouts(_store(ctx, storage), SPACE, assessed.table, CHUNK) == 0
    assert num_trials(study) == before


def test_layouts_missing_from_a_partly_stored_study_are_added_once(ctx, assessed, storage):
    half = np.arange(0, len(assessed.table), 2)
    study = _legacy_study(ctx, assessed, storage, rows=half)
    assert store_layouts(_store(ctx, storage), SPACE, assessed.table, CHUNK) == len(assessed.table) - len(half)
    keys = [tuple(sorted(t.params.items())) for t in study.get_trials(deepcopy=False)]
    assert len(keys) == len(set(keys)) == len(assessed.table)


def test_a_resumed_search_of_a_claim_less_study_writes_the_same_plans(ctx, assessed, tmp_path):
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    search(ctx, SPACE, SearchOptions(sampler="exhaustive", storage=storage, study_name="e"))
    study = optuna.load_study(study_name="e", storage=storage)
    with study._storage._backend.engine.begin() as con:  # claims deleted, as storage_resume.py does
        con.exec_driver_sql("DELETE FROM study_system_attributes WHERE key LIKE 'autoplan:stored:%'")
    resumed = search(ctx, SPACE, SearchOptions(sampler="exhaustive", storage=storage, study_name="e"))
    assert resumed.to_frame().equals(assessed.to_frame())
    assert num_trials(study) == len(assessed.table)


def _no_trial_read(*_args):
    raise AssertionError("a claimed study's trials were read")


def test_the_resume_note_says_the_study_has_no_claims(ctx, assessed, storage):
    _legacy_study(ctx, assessed, storage)
    note = _store(ctx, storage).resumed
    assert f"{len(assessed.table):,} stored layouts reused (stored without chunk claims" in note
    assert note.endswith("1 of 1 chunks left to store")
