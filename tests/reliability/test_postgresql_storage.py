"""A study in a real PostgreSQL server, the storage for workers on several machines.

A throw-away server (the ``postgres_url`` fixture of conftest.py) runs ``autoplan search
--workers 2 --storage postgresql+psycopg2://...``. Under the ``postgresql`` marker.
"""

from __future__ import annotations

import collections
import importlib.util
import json
from pathlib import Path

import optuna
import pytest
from click.testing import CliRunner

from autoplan.cli import main
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
    spec = importlib.util.spec_from_file_location("concurrent_open", Path(__file__).with_name("test_concurrent_open.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.open_together(postgres_url)
