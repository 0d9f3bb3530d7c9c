"""Studies in SQLite: every sampler records its trials, and a resumed study loses none."""

from __future__ import annotations

from dataclasses import replace

import optuna
import pytest

from autoplan.api import build_context, build_training
from autoplan.search import SearchOptions, search
from autoplan.search.storage import StudyMismatchError, bulk_add
from autoplan.space import load_space

TARGET = build_training(64, 8192, 256)
SPACE = load_space("default").with_overrides(pp=(1, 2, 4), vpp=(1, 2), mbs=(1, 2), zero=(0, 1))


@pytest.fixture(scope="module")
def ctx():
    return build_context("8b", TARGET)


def _options(tmp_path, **kw):
    return SearchOptions(storage=f"sqlite:///{tmp_path / 'study.db'}", study_name="s", **kw)


def _stored(tmp_path, name="s"):
    study = optuna.load_study(study_name=name, storage=f"sqlite:///{tmp_path / 'study.db'}")
    return study.get_trials(deepcopy=False)


def _key(trial):
    return (tuple(sorted(trial.params.items())), tuple(trial.values or ()), trial.state)


@pytest.mark.slow  # a few seconds; `pytest -m slow`
def test_exhaustive_stores_every_evaluated_layout_once(ctx, tmp_path):
    result = search(ctx, SPACE, _options(tmp_path, sampler="exhaustive"))
    trials = _stored(tmp_path)
    assert len(trials) == len(result.table)
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in trials)
    best = max((t for t in trials if all(v <= 0 for v in t.constraints.values())), key=lambda t: t.value)
    assert best.value == pytest.approx(result.table["tokens_per_s_per_gpu"][0])
    assert best.user_attrs["reason"] == ""
    search(ctx, SPACE, _options(tmp_path, sampler="exhaustive"))  # resume: nothing to add
    assert len(_stored(tmp_path)) == len(trials)


def test_tpe_resume_keeps_every_finished_trial(ctx, tmp_path):
    search(ctx, SPACE, _options(tmp_path, sampler="random", trials=32, seed=1))
    first = [_key(t) for t in _stored(tmp_path)]
    assert len(first) == 32
    search(ctx, SPACE, _options(tmp_path, sampler="random", trials=64, seed=2))
    second = [_key(t) for t in _stored(tmp_path)]
    assert second[:32] == first
    assert len(second) == 64


def test_interrupted_run_keeps_its_finished_batches(ctx, tmp_path):
    calls = []

    def interrupt_after_two_batches(done, total):
        calls.append(done)
        if len(calls) == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        search(ctx, SPACE, _options(tmp_path, sampler="tpe", trials=200),
               progress=interrupt_after_two_batches)
    finished = [t for t in _stored(tmp_path) if t.state == optuna.trial.TrialState.COMPLETE]
    assert len(finished) == calls[-1]  # both told batches were flushed before the interrupt
    before = [_key(t) for t in finished]
    result = search(ctx, SPACE, _options(tmp_path, sampler="tpe", trials=48))
    after = [_key(t) for t in _stored(tmp_path) if t.state == optuna.trial.TrialState.COMPLETE]
    assert after[:len(before)] == before
    assert len(after) >= 48
    assert result.feasible.any()


def test_a_study_for_other_inputs_is_refused(ctx, tmp_path):
    search(ctx, SPACE, _options(tmp_path, sampler="random", trials=16))
    other = replace(ctx, training=build_training(64, 8192, 512))
    with pytest.raises(StudyMismatchError, match="gbs_seqs: stored 256, now 512"):
        search(other, SPACE, _options(tmp_path, sampler="random", trials=16))
    with pytest.raises(StudyMismatchError, match="optimises"):
        search(ctx, SPACE, _options(tmp_path, sampler="nsga2", trials=16))


def test_bulk_insert_matches_optuna_add_trials(ctx, tmp_path):
    result = search(ctx, SPACE, SearchOptions(sampler="random", trials=16))
    trials = result.study.get_trials(deepcopy=False)
    url = f"sqlite:///{tmp_path / 'study.db'}"
    fast = optuna.create_study(storage=url, study_name="fast", direction="maximize")
    slow = optuna.create_study(storage=url, study_name="slow", direction="maximize")
    bulk_add(fast, trials)
    slow.add_trials(trials)
    fields = lambda t: (t.number, t.state, t.params, t.distributions, t.values, t.user_attrs,  # noqa: E731
                        t.constraints)
    assert [fields(t) for t in _stored(tmp_path, "fast")] == [fields(t) for t in _stored(tmp_path, "slow")]
    assert len(fast.trials) == 16
