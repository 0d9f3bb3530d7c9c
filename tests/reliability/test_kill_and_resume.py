"""A study in SQLite killed with SIGKILL mid-run resumes with --study-name and loses no finished
trial, tested with a real process: ``python -m autoplan.cli search --sampler tpe`` with
far more trials than it can finish is killed once the database holds a few batches, then the
same command resumes the study."""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import subprocess
import sys
import time

import optuna
import pytest
from click.testing import CliRunner

from autoplan.cli import main

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs POSIX signals")

SEARCH = ["search", "-m", "8b", "-g", "64", "--gbs-seqs", "256", "--sampler", "tpe", "--study-name", "killed",
          "--format", "json"]


def _finished(storage: str) -> dict[int, tuple]:
    """number -> (params, values, user_attrs) of every finished trial."""
    study = optuna.load_study(study_name="killed", storage=storage)
    return {t.number: (t.params, t.values, t.user_attrs)
            for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))}


def _count_finished(path) -> int:
    """Finished trials, read-only: the test must not create the database the process creates."""
    if not path.exists():
        return 0
    try:
        with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10)) as db:
            return db.execute("SELECT count(*) FROM trials WHERE state = 'COMPLETE'").fetchone()[0]
    except sqlite3.OperationalError:  # no tables yet
        return 0


def _wait_for(path, proc: subprocess.Popen, minimum: int, timeout_s: float = 60.0) -> None:
    """Return once ``minimum`` trials are finished, the process still running."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stderr.read()
        if _count_finished(path) >= minimum:
            return
        time.sleep(0.05)
    raise AssertionError(f"fewer than {minimum} finished trials after {timeout_s} s")


def test_sigkill_mid_study_then_resume_loses_no_finished_trial(tmp_path):
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    command = [sys.executable, "-m", "autoplan.cli", *SEARCH, "--storage", storage, "--trials", "1000000",
               "--out", str(tmp_path / "killed")]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)
    try:
        _wait_for(tmp_path / "study.db", proc, minimum=48)  # three batches of 16
        before = _finished(storage)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)
        proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL  # it was still running: killed mid-run
    with contextlib.closing(sqlite3.connect(tmp_path / "study.db")) as db:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    at_kill = _finished(storage)
    assert {n: at_kill[n] for n in before} == before

    resumed = CliRunner().invoke(main, [*SEARCH, "--storage", storage, "--trials", str(len(at_kill) + 16),
                                        "--out", str(tmp_path / "resumed")])
    assert resumed.exit_code == 0, resumed.output + resumed.stderr
    after = _finished(storage)
    assert {n: after[n] for n in at_kill} == at_kill  # every finished trial, same number and values
    assert len(after) >= len(at_kill) + 16
    study = optuna.load_study(study_name="killed", storage=storage)
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in study.trials)  # no stale RUNNING
    assert sorted(t.number for t in study.trials) == list(range(len(study.trials)))


def test_python_dash_m_runs_the_cli(tmp_path):
    done = subprocess.run([sys.executable, "-m", "autoplan.cli", "--version"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.startswith("autoplan, version")
