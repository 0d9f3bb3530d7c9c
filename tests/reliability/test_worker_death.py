"""A worker process that dies (SIGKILL) or fails to start stops the search with one line instead
of hanging it; the study keeps every batch written, so rerunning the same command resumes it.
Tested with real processes (issue 18, item 1)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from autoplan.search import parallel

pytestmark = pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="needs /proc")

SEARCH = ["search", "-m", "8b", "-g", "64", "--gbs-seqs", "256", "--sampler", "tpe", "--study-name", "s",
          "--workers", "2", "--format", "json"]


def _spawned_workers(pid: int) -> list[int]:
    """Child processes of ``pid`` started by multiprocessing's spawn (not its resource tracker)."""
    children = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        children += [int(c) for c in (task / "children").read_text().split()]
    found = []
    for child in children:
        with open(f"/proc/{child}/cmdline", "rb") as handle:
            cmdline = handle.read()
        if b"spawn_main" in cmdline and b"resource_tracker" not in cmdline:
            found.append(child)
    return found


@pytest.mark.slow  # a few seconds; `pytest -m slow`
def test_a_killed_worker_stops_the_search_with_one_line(tmp_path):
    command = [sys.executable, "-m", "autoplan.cli", *SEARCH, "--storage", f"sqlite:///{tmp_path / 's.db'}",
               "--trials", "1000000", "--out", str(tmp_path / "out")]
    proc = subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not (workers := _spawned_workers(proc.pid)):
            assert proc.poll() is None and time.monotonic() < deadline, "no worker started"
            time.sleep(0.1)
        time.sleep(2)  # let it write a few batches
        os.kill(workers[0], signal.SIGKILL)
        _, stderr = proc.communicate(timeout=60)  # before the fix: waited forever
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 2, stderr
    assert stderr.strip().count("\n") == 0, stderr
    assert "search worker 1 (pid" in stderr and "killed by signal 9" in stderr and "rerun" in stderr


def _exit_at_once(*args):
    os._exit(7)  # as a worker that cannot start (a failed import, a killed interpreter)


def test_a_worker_that_fails_to_start_does_not_hang_the_parent():
    with pytest.raises(parallel.WorkerError, match=r"search worker 1 .*exit code 7"):
        with parallel._workers([(_exit_at_once, ())]) as pool:
            pool.results()


def test_workers_outliving_the_deadline_are_stopped(monkeypatch):
    monkeypatch.setattr(parallel, "DEADLINE_GRACE_S", 0.5)
    start = time.monotonic()
    with pytest.raises(parallel.WorkerError, match="after --timeout"):
        with parallel._workers([(time.sleep, (60,))], deadline=time.monotonic()) as pool:
            pool.results()
    assert time.monotonic() - start < 20
