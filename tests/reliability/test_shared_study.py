"""Many processes on one study (issue 48, item 2), on Optuna's real storages (SQLite, journal
file): an exhaustive study's chunks are claimed with their trials, so every layout is stored
once however many processes run the same search; a study's ``--trials`` bound holds across
processes. Before: 8 processes on one new exhaustive study stored every layout 8 times, and 8
on one tpe study with ``--trials 64`` stored 445 trials.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import optuna
import pytest

from autoplan.api import build_context, build_training
from autoplan.search import SearchOptions, search
from autoplan.search.exhaustive import store_layouts
from autoplan.search.storage import POLISH_ATTR, bulk_add, claims
from autoplan.search.study import open_store
from autoplan.search.trials import frozen_trials
from autoplan.space import load_space

SPACE = load_space("default").with_overrides(pp=(1, 2, 4), vpp=(1, 2), mbs=(1, 2))  # 1,728 layouts
SEARCH = ["search", "-m", "8b", "-g", "64", "--gbs-seqs", "256", "--pp", "1,2,4", "--vpp", "1,2",
          "--mbs", "1,2", "--format", "json"]


def _storages(tmp_path) -> dict[str, str]:
    return {"sqlite": f"sqlite:///{tmp_path / 'study.db'}", "journal": str(tmp_path / "study.log")}


@pytest.fixture(scope="module")
def ctx():
    return build_context("8b", build_training(64, 8192, 256))


@pytest.fixture(scope="module")
def assessed(ctx):
    return search(ctx, SPACE, SearchOptions(sampler="exhaustive"))


def _load(storage: str, name: str):
    if "://" not in storage:
        from optuna.storages.journal import JournalFileBackend, JournalStorage

        storage = JournalStorage(JournalFileBackend(storage))
    return optuna.load_study(study_name=name, storage=storage)


@pytest.mark.parametrize("kind", ["sqlite", "journal"])
def test_a_chunk_stored_by_one_process_is_not_stored_by_another(ctx, assessed, tmp_path, kind):
    storage = _storages(tmp_path)[kind]
    options = SearchOptions(sampler="exhaustive", storage=storage, study_name="e")
    one, two = (open_store(ctx, SPACE, options, "exhaustive") for _ in range(2))  # both open it new
    rows = len(assessed.table)
    assert store_layouts(one, SPACE, assessed.table) == rows
    assert store_layouts(two, SPACE, assessed.table) == 0  # chunk 0 is held: nothing added
    assert len(_load(storage, "e").trials) == rows
    assert len(claims(_load(storage, "e"))) == 1  # 1,728 layouts: one chunk of 65,536


@pytest.mark.parametrize("kind", ["sqlite", "journal"])
def test_a_write_past_the_trial_bound_is_cut_at_it(ctx, assessed, tmp_path, kind):
    storage = _storages(tmp_path)[kind]
    study = open_store(ctx, SPACE, SearchOptions(sampler="random", storage=storage, study_name="b"),
                       "random").persistent
    trials = frozen_trials(SPACE, assessed.table, 1)[:40]
    assert bulk_add(study, trials[:24], limit=32) == 24
    assert bulk_add(study, trials[24:40], limit=32) == 8  # 24 + 16 > 32: cut to 32
    assert bulk_add(study, trials[:1], limit=32) == 0
    polished = frozen_trials(SPACE, assessed.table, 1, system_attrs={POLISH_ATTR: True})[:3]
    assert bulk_add(study, polished) == 3  # the polish is not bounded, nor counted
    assert len(_load(storage, "b").trials) == 35


def _together(commands: list[list[str]], cwd) -> list[subprocess.CompletedProcess]:
    procs = [subprocess.Popen(c, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
             for c in commands]
    errors = [p.communicate(timeout=300)[1] for p in procs]
    assert [p.returncode for p in procs] == [0] * len(procs), [e[-400:] for e in errors]
    return procs


@pytest.mark.slow  # 8 processes: ~20 s on 2 cores; `pytest -m slow`
def test_eight_processes_on_one_new_exhaustive_study_store_every_layout_once(tmp_path):
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    base = [sys.executable, "-m", "autoplan.cli", *SEARCH, "--sampler", "exhaustive"]
    alone = subprocess.run([*base, "--out", str(tmp_path / "alone")], cwd=tmp_path, capture_output=True,
                           text=True, timeout=300)
    assert alone.returncode == 0, alone.stderr
    _together([[*base, "--storage", storage, "--study-name", "e", "--out", str(tmp_path / f"o{i}")]
               for i in range(8)], tmp_path)
    trials = _load(storage, "e").trials
    layouts = {tuple(sorted(t.params.items())) for t in trials}
    recipe = json.loads((tmp_path / "alone" / "manifest.json").read_text())["recipe"]
    rows = recipe["candidates"] - recipe["reasons"].get("degrees", 0)  # layouts with an integer dp
    assert len(trials) == len(layouts) == rows  # each once (before: 8 x rows)
    plans = (tmp_path / "alone" / "plans.csv").read_bytes()
    assert all((tmp_path / f"o{i}" / "plans.csv").read_bytes() == plans for i in range(8))


@pytest.mark.slow  # 8 processes: ~20 s on 2 cores; `pytest -m slow`
@pytest.mark.parametrize("kind", ["sqlite", "journal"])
def test_eight_processes_on_one_study_keep_its_trial_bound(tmp_path, kind):
    storage = _storages(tmp_path)[kind]
    start = time.monotonic()
    _together([[sys.executable, "-m", "autoplan.cli", *SEARCH, "--sampler", "tpe", "--trials", "64",
                "--seed", str(i), "--storage", storage, "--study-name", "t", "--out", str(tmp_path / f"o{i}")]
               for i in range(8)], tmp_path)
    trials = _load(storage, "t").trials
    sampled = [t for t in trials if not t.system_attrs.get(POLISH_ATTR)]
    assert len(sampled) == 64, f"{len(sampled)} sampled trials after {time.monotonic() - start:.0f} s"
    assert sorted(t.number for t in trials) == list(range(len(trials)))
