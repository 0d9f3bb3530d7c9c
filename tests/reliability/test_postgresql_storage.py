"""A study in a real PostgreSQL server, the storage for workers on several machines.

A throw-away server (the ``postgres_url`` fixture of conftest.py) runs ``autoplan search
--workers 2 --storage postgresql+psycopg2://...``. Under the ``postgresql`` marker.
"""

from __future__ import annotations

import collections
import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import optuna
import pytest
from click.testing import CliRunner

from autoplan.cli import main
from autoplan.search.optuna_search import BATCH_SIZE  # a batch is written whole or not at all
from autoplan.search.storage import WRITER_ATTR

pytestmark = pytest.mark.postgresql  # starts a server: `pytest -m postgresql`

SEARCH = ["search", "-m", "8b", "-g", "64", "--gbs-seqs", "256", "--pp", "1,2,4", "--vpp", "1,2",
          "--mbs", "1,2", "--format", "json"]


def test_two_workers_share_a_postgresql_study_and_resume_it(postgres_url, tmp_path):
    args = [*SEARCH, "--sampler", "tpe", "--workers", "2", "--storage", postgres_url, "--study-name", "pg"]
    first = CliRunner().invoke(main, [*args, "--trials", "64", "--out", str(tmp_path / "first")])
    assert first.exit_code == 0, first.output + first.stderr
    study = optuna.load_study(study_name="pg", storage=postgres_url)
    before = {t.number: (t.params, t.values) for t in study.trials}
    assert sorted(before) == list(range(len(before))) and len(before) >= 64
    writers = collections.Counter(t.system_attrs[WRITER_ATTR] for t in study.trials)
    assert len(writers) == 2 and min(writers.values()) >= 32  # 32 each, plus the polish's additions

    again = CliRunner().invoke(main, [*args, "--trials", str(len(before) + 32), "--out", str(tmp_path / "again")])
    assert again.exit_code == 0, again.output + again.stderr
    after = {t.number: (t.params, t.values)
             for t in optuna.load_study(study_name="pg", storage=postgres_url).trials}
    assert {n: after[n] for n in before} == before
    assert sorted(after) == list(range(len(after))) and len(after) >= len(before) + 32


def test_exhaustive_workers_store_every_layout_once_in_postgresql(postgres_url, tmp_path, monkeypatch):
    from autoplan.search import exhaustive

    monkeypatch.setattr(exhaustive, "CHUNK_SIZE", 512)
    args = [*SEARCH, "--sampler", "exhaustive", "--workers", "3", "--storage", postgres_url, "--study-name", "ex",
            "--out", str(tmp_path / "ex")]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output + result.stderr
    recipe = json.loads((tmp_path / "ex" / "manifest.json").read_text())["recipe"]
    rows = recipe["candidates"] - recipe["reasons"].get("degrees", 0)  # plans.csv folds twins
    trials = optuna.load_study(study_name="ex", storage=postgres_url).trials
    assert sorted(t.number for t in trials) == list(range(rows))
    assert len({tuple(sorted(t.params.items())) for t in trials}) == rows


def test_four_processes_create_one_postgresql_study_at_once(postgres_url):
    _sibling("test_concurrent_open.py").open_together(postgres_url)


def _sibling(name: str):
    spec = importlib.util.spec_from_file_location(name.removesuffix(".py"), Path(__file__).with_name(name))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_kill_9_of_the_search_with_4_workers_on_postgresql_leaves_none_and_resumes(postgres_url, tmp_path):
    """Issue 48: every worker gone within 10 s of ``kill -9`` of the search; the rerun resumes
    every stored trial (what was lost is at most each worker's batch in flight)."""
    lease = _sibling("test_worker_lease.py")
    marker = uuid.uuid4().hex
    args = [*SEARCH, "--sampler", "tpe", "--workers", "4", "--storage", postgres_url, "--study-name", "kill"]
    proc = subprocess.Popen([sys.executable, "-m", "autoplan.cli", *args, "--trials", "100000",
                             "--out", str(tmp_path / "killed")], cwd=tmp_path, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env={**os.environ, "AUTOPLAN_KILL_TEST": marker})
    key = f"AUTOPLAN_KILL_TEST={marker}".encode()
    try:
        deadline = time.monotonic() + 120
        while (at_kill := _stored(postgres_url, "kill")) < 8 * BATCH_SIZE:  # every worker writing
            assert proc.poll() is None and time.monotonic() < deadline, "the search stored too few trials"
            time.sleep(0.1)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        end = time.monotonic() + lease.GONE_WITHIN_S
        while (left := lease._marked(key)) and time.monotonic() < end:
            time.sleep(0.1)
        assert left == [], f"workers {left} alive {lease.GONE_WITHIN_S:.0f} s after kill -9 of the search"
    finally:
        for pid in lease._marked(key):
            os.kill(pid, signal.SIGKILL)
    kept = optuna.load_study(study_name="kill", storage=postgres_url).trials
    assert len(kept) >= at_kill and sorted(t.number for t in kept) == list(range(len(kept)))
    again = CliRunner().invoke(main, [*args, "--trials", str(len(kept) + 32), "--out", str(tmp_path / "again")])
    assert again.exit_code == 0, again.output + again.stderr
    assert f": {len(kept):,} stored trials reused" in again.stderr
    after = {t.number: t.params for t in optuna.load_study(study_name="kill", storage=postgres_url).trials}
    assert all(after[t.number] == t.params for t in kept)


def _stored(url: str, name: str) -> int:
    try:
        return len(optuna.load_study(study_name=name, storage=url).get_trials(deepcopy=False))
    except KeyError:  # not created yet
        return 0
