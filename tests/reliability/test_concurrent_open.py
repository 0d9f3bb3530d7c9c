"""Storage faults: four processes creating one new SQLite study at once all succeed (Optuna's
schema setup races; the open is retried with back-off), a non-database file given as
``sqlite:///`` is refused untouched, a stale journal lock does not stall the next run (issue 18,
items 7 and 9)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

import pytest
from click.testing import CliRunner

from autoplan.cli import main
from autoplan.search.storage import JOURNAL_LOCK_GRACE_S, StorageError, make_storage

OPEN = textwrap.dedent("""
    import sys, time
    from autoplan.search.storage import open_study
    from optuna.samplers import RandomSampler
    time.sleep(max(0.0, float(sys.argv[2]) - time.time()))  # start together
    store = open_study(sys.argv[1], "together", ["maximize"], RandomSampler(), {"key": "k"})
    print(store.persistent.study_name)
""")


def open_together(storage: str, processes: int = 4) -> None:
    """``processes`` processes open one new study in ``storage`` at the same moment; all succeed
    (also used by test_postgresql_storage.py)."""
    start = str(time.time() + 4)
    procs = [subprocess.Popen([sys.executable, "-c", OPEN, storage, start], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(processes)]
    outputs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0] * processes, [err[-300:] for _, err in outputs]
    assert all(out.strip() == "together" for out, _ in outputs)


@pytest.mark.slow  # a few seconds; `pytest -m slow`
def test_four_processes_create_one_sqlite_study_at_once(tmp_path):
    open_together(f"sqlite:///{tmp_path / 'new.db'}")


def test_a_file_that_is_not_a_database_is_refused_untouched(tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")
    with pytest.raises(StorageError, match="is not an SQLite database"):
        make_storage(f"sqlite:///{notes}")
    assert notes.read_text() == "my notes\n"


def test_a_stale_journal_lock_does_not_stall_the_next_run(tmp_path):
    journal = tmp_path / "study.log"
    os.symlink(str(journal), str(journal) + ".lock")  # as left by a process killed holding the lock
    past = time.time() - 60
    os.utime(str(journal) + ".lock", (past, past), follow_symlinks=False)
    start = time.monotonic()
    result = CliRunner().invoke(main, ["search", "-m", "8b", "-g", "8", "--gbs-seqs", "64", "--sampler", "random",
                                       "--trials", "16", "--storage", str(journal), "--format", "json",
                                       "--out", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    assert time.monotonic() - start < 30 - JOURNAL_LOCK_GRACE_S  # Optuna's default grace is 30 s
