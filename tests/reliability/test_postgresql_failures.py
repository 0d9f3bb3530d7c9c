"""A PostgreSQL server that goes away mid-search (issue 48, items 1-3): back within the
reconnection window, the search finishes; gone for good, it stops with one line and exit 2 and
the same command resumes, losing at most the batch that was being written. A bare
``postgresql://`` URL (the form README shows) works with the ``[postgres]`` extra's driver.
Under the ``postgresql`` marker (a throw-away server, conftest.py)."""

from __future__ import annotations

import threading
import time

import optuna
import pytest
from click.testing import CliRunner

from autoplan.cli import main
from autoplan.search import storage_faults
from autoplan.search.storage import StudyStore

pytestmark = pytest.mark.postgresql

SEARCH = ["search", "-m", "8b", "-g", "64", "--gbs-seqs", "256", "--pp", "1,2,4", "--vpp", "1,2",
          "--mbs", "1,2", "--sampler", "tpe", "--format", "json"]
BATCH = 16  # trials per batch written (autoplan.search.optuna_search)


def _search(url: str, name: str, trials: int, out):
    result = CliRunner().invoke(main, [*SEARCH, "--trials", str(trials), "--storage", url,
                                       "--study-name", name, "--out", str(out)])
    return result.exit_code, result.stderr


def _on_flush(monkeypatch, number: int, action) -> None:
    """Run ``action`` just before the ``number``-th batch is written."""
    real, calls = StudyStore.flush, []

    def flush(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == number:
            action()
        return real(self, *args, **kwargs)

    monkeypatch.setattr(StudyStore, "flush", flush)


def test_a_bare_postgresql_url_works_with_the_extras_driver(postgres_server, tmp_path):
    code, err = _search(postgres_server.bare_url, "bare", 16, tmp_path / "out")
    assert code == 0, err


def test_a_server_restarted_mid_search_is_reconnected_to_and_the_search_finishes(postgres_server, tmp_path,
                                                                                  monkeypatch):
    def restart() -> None:
        postgres_server.stop()
        threading.Timer(2.0, postgres_server.start).start()  # back in ~3 s, within the 30 s

    _on_flush(monkeypatch, 3, restart)
    code, err = _search(postgres_server.url, "restart", 96, tmp_path / "out")
    assert code == 0, err
    assert "Note: lost the connection to --storage" in err
    trials = optuna.load_study(study_name="restart", storage=postgres_server.url).trials
    assert len(trials) >= 96 and sorted(t.number for t in trials) == list(range(len(trials)))


def test_a_server_killed_for_good_stops_with_one_line_and_the_search_resumes(postgres_server, tmp_path,
                                                                             monkeypatch):
    monkeypatch.setattr(storage_faults, "RECONNECT_WITHIN_S", 2.0)
    _on_flush(monkeypatch, 3, postgres_server.stop)
    try:
        code, err = _search(postgres_server.url, "killed", 96, tmp_path / "first")
    finally:
        postgres_server.start()
    lines = [line for line in err.splitlines() if not line.startswith("Note: ")]
    assert code == 2 and len(lines) == 1, err
    assert lines[0].startswith(f"Error: --storage {postgres_server.url}: the server is unreachable"), err
    assert "did not come back within 2 s: start it, then rerun the same command to resume" in lines[0]
    kept = len(optuna.load_study(study_name="killed", storage=postgres_server.url).trials)
    assert kept >= 2 * BATCH  # the two batches written before the kill; the third is lost

    monkeypatch.undo()
    time.sleep(0.5)
    code, err = _search(postgres_server.url, "killed", 96, tmp_path / "again")
    assert code == 0 and f"{kept} stored trials reused" in err, err
