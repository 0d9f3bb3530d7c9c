"""``--workers N``: N processes on one study through its storage.

Every trial a worker finishes is stored exactly once (numbers 0..n-1, each worker's share), the
workers see each other's trials, the exhaustive sampler gives the same ranked result however
its chunks are dealt out, and workers without a storage are refused in one line.
"""

from __future__ import annotations

import collections
import json

import optuna
import pytest
from click.testing import CliRunner

from autoplan.api import build_context, build_training
from autoplan.cli import main
from autoplan.search import SearchOptions, exhaustive, search
from autoplan.search.optuna_search import BATCH_SIZE, ask_and_tell, baselines
from autoplan.search.parallel import shares
from autoplan.search.storage import WRITER_ATTR
from autoplan.search.study import open_store
from autoplan.space import load_space

TARGET = build_training(64, 8192, 256)
SPACE = load_space("default").with_overrides(pp=(1, 2, 4), vpp=(1, 2), mbs=(1, 2))  # 1,728 layouts
SEARCH = ["search", "-m", "8b", "-g", "64", "--gbs-seqs", "256", "--pp", "1,2,4", "--vpp", "1,2",
          "--mbs", "1,2", "--format", "json"]


@pytest.fixture(scope="module")
def ctx():
    return build_context("8b", TARGET)


def _trials(storage: str, name: str) -> list:
    return optuna.load_study(study_name=name, storage=storage).get_trials(deepcopy=False)


def test_shares_add_up_and_differ_by_at_most_one():
    assert shares(10, 3) == [4, 3, 3]
    assert shares(2, 4) == [1, 1, 0, 0]
    assert sum(shares(1001, 7)) == 1001


def test_two_workers_store_every_trial_once(tmp_path):
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    result = CliRunner().invoke(main, [*SEARCH, "--sampler", "random", "--trials", "80", "--workers", "2",
                                       "--storage", storage, "--study-name", "w", "--out", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output + result.stderr
    trials = _trials(storage, "w")
    # random has no polish step: the study holds exactly --trials trials, 40 from each worker.
    assert sorted(t.number for t in trials) == list(range(80))
    assert len({t._trial_id for t in trials}) == 80
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in trials)
    assert sorted(collections.Counter(t.system_attrs[WRITER_ATTR] for t in trials).values()) == [40, 40]


def test_a_resumed_parallel_tpe_study_keeps_every_trial(ctx, tmp_path):
    options = dict(sampler="tpe", storage=f"sqlite:///{tmp_path / 'study.db'}", study_name="r", workers=2)
    search(ctx, SPACE, SearchOptions(trials=40, **options))
    first = {t.number: (t.params, t.values) for t in _trials(options["storage"], "r")}
    result = search(ctx, SPACE, SearchOptions(trials=72, **options))
    after = {t.number: (t.params, t.values) for t in _trials(options["storage"], "r")}
    assert {n: after[n] for n in first} == first
    assert sorted(after) == list(range(len(after)))
    assert 72 <= len(after) <= 72 + 2 * 64  # tpe's polish adds at most 64 better layouts per run
    assert result.feasible.any()


def test_workers_see_each_others_trials(ctx, tmp_path):
    """StudyStore.sync copies the trials another process wrote, never its own."""
    options = SearchOptions(sampler="random", trials=16, storage=f"sqlite:///{tmp_path / 'study.db'}",
                            study_name="s")
    one, two = (open_store(ctx, SPACE, options, "random") for _ in range(2))
    ask_and_tell(ctx, SPACE, one, sampler="random", trials=16)
    assert two.sync() == 16 and one.sync() == 0
    assert len(two.working.get_trials(deepcopy=False)) == 16
    ask_and_tell(ctx, SPACE, two, sampler="random", trials=32, baselines_first=False)
    assert one.sync() == 16 and len(_trials(options.storage, "s")) == 32


@pytest.mark.slow  # a few seconds; `pytest -m slow`
def test_exhaustive_chunks_dealt_to_workers_give_the_same_plans_csv(tmp_path, monkeypatch):
    """Chunks of 256 layouts dealt to 3 processes give the plans.csv of a one-process run (in
    one chunk of 1,728 layouts), and the study holds every assessed layout once."""
    args = [*SEARCH, "--sampler", "exhaustive"]
    one = CliRunner().invoke(main, [*args, "--out", str(tmp_path / "one")])
    assert one.exit_code == 0, one.output + one.stderr
    monkeypatch.setattr(exhaustive, "CHUNK_SIZE", 256)  # read by the parent, passed to the workers
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    three = CliRunner().invoke(main, [*args, "--workers", "3", "--storage", storage, "--study-name", "e",
                                      "--out", str(tmp_path / "three")])
    assert three.exit_code == 0, three.output + three.stderr
    assert (tmp_path / "three" / "plans.csv").read_bytes() == (tmp_path / "one" / "plans.csv").read_bytes()
    trials = _trials(storage, "e")
    recipe = json.loads((tmp_path / "one" / "manifest.json").read_text())["recipe"]
    rows = recipe["candidates"] - recipe["reasons"].get("degrees", 0)  # plans.csv folds twins
    assert len(trials) == rows and sorted(t.number for t in trials) == list(range(rows))
    assert len({tuple(sorted(t.params.items())) for t in trials}) == rows


def test_a_journal_file_works_as_the_shared_storage(ctx, tmp_path):
    journal = tmp_path / "study.log"
    search(ctx, SPACE, SearchOptions(sampler="random", trials=40, workers=2, storage=str(journal),
                                             study_name="j", seed=5))
    from optuna.storages.journal import JournalFileBackend, JournalStorage

    study = optuna.load_study(study_name="j", storage=JournalStorage(JournalFileBackend(str(journal))))
    assert sorted(t.number for t in study.trials) == list(range(40))


@pytest.mark.parametrize("args, message", [
    (["--workers", "2"], "--workers 2 needs --storage"),
    (["--storage", "sqlite:/study.db"], "expected an RDB URL like sqlite:///"),
    (["--storage", "nonsense://x"], "--storage nonsense://x: "),
    (["--storage", "sqlite:///nowhere/study.db", "--sampler", "random"], "unable to open database file"),
])
def test_storage_and_worker_errors_are_one_line(tmp_path, monkeypatch, args, message):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, [*SEARCH, "--trials", "16", "--out", "out", *args])
    assert result.exit_code == 2, result.output + result.stderr
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_every_trial_is_stored_when_the_baselines_outnumber_a_batch(ctx, tmp_path):
    """9 pipeline depths x 2 recompute modes = 18 known-good layouts enqueued before a batch of
    16: the two still waiting after the first batch are stored once they run."""
    space = SPACE.with_overrides(pp=(1, 2, 3, 4, 5, 6, 7, 8, 16))
    assert len(baselines(ctx, space)) > BATCH_SIZE
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    result = search(ctx, space, SearchOptions(sampler="random", trials=48, storage=storage,
                                                      study_name="b", allow_uneven_pp=True))
    stored = _trials(storage, "b")
    assert sorted(t.number for t in stored) == list(range(48))
    working = result.store.working.get_trials(deepcopy=False)
    assert [(t.params, t.values) for t in stored] == [(t.params, t.values) for t in working]
