"""Every way a --storage can fail ends the search with one line naming the storage and what to
do, and exit code 2: never exit 3 or a traceback (issue 48, the storage part).

Each case starts from a real study (a small tpe search stored in SQLite or a journal file) and
breaks it the way the machine would: random bytes over page 2 of the database, a journal line
Optuna does not know or that is not JSON, a FIFO or a device as the journal, a full disk (the
SQLite driver's own ``database or disk is full`` error, raised where its ``executemany`` would
raise it: no small file system can be mounted here), a lock held by another connection, a
PostgreSQL driver that is not installed. A journal whose last line a crash cut is no failure:
the torn line is dropped with a note and the study resumes.
"""

from __future__ import annotations

import json
import os
import sqlite3
import stat
from pathlib import Path

import optuna
import pytest
from click.testing import CliRunner

from autoplan.cli import main
from autoplan.search import storage, storage_faults

SEARCH = ["search", "-m", "8b", "-g", "64", "--gbs-seqs", "256", "--pp", "1,2", "--vpp", "1", "--cp", "1",
          "--mbs", "1,2", "--sampler", "tpe", "--format", "json"]
PAGE_BYTES = 4096  # SQLite's default page size (PRAGMA page_size of a new database)


def _search(tmp_path: Path, where: str, trials: int, out: str = "out"):
    result = CliRunner().invoke(main, [*SEARCH, "--trials", str(trials), "--storage", where,
                                       "--study-name", "s", "--out", str(tmp_path / out)])
    return result.exit_code, result.stderr


@pytest.fixture(scope="module")
def stored(tmp_path_factory) -> dict[str, Path]:
    """A 16-trial study in an SQLite file and in a journal file, made once, copied per test."""
    folder = tmp_path_factory.mktemp("stored")
    for name in ("study.db", "study.log"):
        where = f"sqlite:///{folder / name}" if name.endswith(".db") else str(folder / name)
        code, err = _search(folder, where, 16, out=f"{name}.out")
        assert code == 0, err
    return {"sqlite": folder / "study.db", "journal": folder / "study.log"}


def _copy(stored: dict[str, Path], kind: str, tmp_path: Path) -> Path:
    path = tmp_path / stored[kind].name
    path.write_bytes(stored[kind].read_bytes())
    return path


def _garble_page_2(path: Path) -> None:
    with open(path, "r+b") as handle:
        handle.seek(PAGE_BYTES)
        handle.write(os.urandom(PAGE_BYTES))


def _append_line(text: str):
    def damage(path: Path) -> None:
        with open(path, "a") as handle:
            handle.write(text + "\n")
    return damage


def _garble_line(number: int):
    def damage(path: Path) -> None:
        lines = path.read_text().splitlines(keepends=True)
        lines[number - 1] = "{garbled" + lines[number - 1][1:]
        path.write_text("".join(lines))
    return damage


def _journal_lines(stored: dict[str, Path]) -> int:
    return len(stored["journal"].read_text().splitlines())


# (case, storage kind, how it is broken, what the one line must say)
BROKEN = [
    ("garbled sqlite page 2", "sqlite", _garble_page_2, "is damaged (database disk image is malformed)"),
    ("journal op unknown", "journal", _append_line('{"op_code": 99, "worker_id": "w"}'),
     "line {last+1} has an unknown op_code 99"),
    ("journal line not JSON", "journal", _garble_line(3), "line 3 is not a journal record"),
]


@pytest.mark.parametrize("case, kind, damage, said", BROKEN, ids=[c[0] for c in BROKEN])
def test_a_damaged_study_stops_with_one_line_naming_the_file(stored, tmp_path, case, kind, damage, said):
    path = _copy(stored, kind, tmp_path)
    damage(path)
    where = f"sqlite:///{path}" if kind == "sqlite" else str(path)
    code, err = _search(tmp_path, where, 32)
    expected = said.replace("{last+1}", str(_journal_lines(stored) + 1))
    assert (code, err.count("\n")) == (2, 1), err
    assert err.startswith(f"Error: --storage {where}: ") and expected in err, err
    assert "restore it from a copy, or give a new --storage file" in err


@pytest.mark.parametrize("make", [os.mkfifo, None], ids=["fifo", "/dev/zero"])
def test_a_journal_that_is_not_a_regular_file_is_refused_before_it_is_opened(tmp_path, make):
    """A FIFO would block the open forever; /dev/zero would be read until memory runs out."""
    if make is None:
        path = Path("/dev/zero")
        if not path.exists() or not stat.S_ISCHR(path.stat().st_mode):
            pytest.skip("no /dev/zero character device")
    else:
        path = tmp_path / "study.log"
        make(path)
    code, err = _search(tmp_path, str(path), 16)
    kind = "a FIFO" if make else "a device"
    assert (code, err) == (2, f"Error: --storage {path}: is {kind}; a journal must be a regular file "
                              "(give a new file name to start a study)\n")


def test_a_full_disk_under_the_sqlite_file_stops_with_one_line_and_resumes(stored, tmp_path, monkeypatch):
    """The driver's ENOSPC error (SQLITE_FULL), raised by the executemany of the batch insert."""
    from sqlalchemy.dialects.sqlite.pysqlite import SQLiteDialect_pysqlite

    path = _copy(stored, "sqlite", tmp_path)
    before = len(optuna.load_study(study_name="s", storage=f"sqlite:///{path}").trials)

    def full(self, cursor, statement, parameters, context=None):
        raise sqlite3.OperationalError("database or disk is full")

    with monkeypatch.context() as patch:
        patch.setattr(SQLiteDialect_pysqlite, "do_executemany", full)
        code, err = _search(tmp_path, f"sqlite:///{path}", 32)
    assert (code, err.count("\n")) == (2, 1), err
    assert err == (f"Error: --storage sqlite:///{path}: the disk under {path} is full: free space, then rerun "
                   "the same command to resume (the study keeps every batch written)\n")
    code, err = _search(tmp_path, f"sqlite:///{path}", 32)
    assert code == 0 and f"{before} stored trials reused" in err, err


def test_a_journal_line_cut_by_a_crash_is_dropped_with_a_note_and_the_study_resumes(stored, tmp_path):
    path = _copy(stored, "journal", tmp_path)
    whole = path.read_bytes()
    last = whole[:-1].rsplit(b"\n", 1)[1] + b"\n"
    path.write_bytes(whole[:len(whole) - len(last) // 2])  # a write killed halfway through the last line
    code, err = _search(tmp_path, str(path), 32)
    assert code == 0, err
    assert err.startswith(f"Note: --storage {path}: its last line was cut by a crash "
                          f"({len(last) - len(last) // 2} bytes); dropped it"), err
    lines = path.read_bytes().splitlines()
    assert all(json.loads(line)["op_code"] >= 0 for line in lines)  # every line whole again
    assert len(lines) > _journal_lines(stored)


def test_a_locked_sqlite_file_is_waited_on_with_one_note_then_given_up(stored, tmp_path, monkeypatch):
    """Another connection holds the write lock for longer than the timeout (shortened here
    from 600 s to 1.5 s, the note from 3 s to 0.3 s)."""
    monkeypatch.setattr(storage_faults, "LOCK_NOTICE_S", 0.3)
    monkeypatch.setattr(storage_faults, "SQLITE_LOCK_TIMEOUT_S", 1.5)
    path = _copy(stored, "sqlite", tmp_path)
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        code, err = _search(tmp_path, f"sqlite:///{path}", 32)
    finally:
        holder.rollback()
        holder.close()
    assert code == 2, err
    assert err.splitlines() == [
        f"Note: waiting for the lock on {path} held by another process (up to 1.5 s); Ctrl-C to stop",
        f"Error: --storage sqlite:///{path}: gave up after 1.5 s waiting for the lock on {path} held by "
        "another process: end that process or rerun later (the study keeps every batch written)"], err


def _default_driver() -> str:
    from sqlalchemy.engine import make_url

    return make_url("postgresql://u@h/db").get_dialect().driver  # psycopg2 to SQLAlchemy 2.0, psycopg from 2.1


# (drivers installed, URL given, URL used): a bare URL gets an installed driver; others stay.
DRIVERS = [
    ({"psycopg2"}, "postgresql://u@h/db", "postgresql+psycopg2://u@h/db"),
    ({"psycopg"}, "postgresql://u@h/db", "postgresql+psycopg://u@h/db"),
    ({"psycopg", "psycopg2"}, "postgresql://u@h/db", "postgresql://u@h/db"),  # the default is there
    ({"psycopg2"}, "postgresql+psycopg://u@h/db", "postgresql+psycopg://u@h/db"),  # named: kept
    ({"psycopg2"}, "postgresql://u:secret@h:5433/db?sslmode=require",
     "postgresql+psycopg2://u:secret@h:5433/db?sslmode=require"),
]


@pytest.mark.parametrize("installed, given, used", DRIVERS)
def test_a_bare_postgresql_url_uses_the_driver_that_is_installed(monkeypatch, installed, given, used):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: object() if name in installed else None
                        if name in storage.POSTGRES_DRIVERS.values() else real(name, *a))
    default = _default_driver()
    expected = given if default in installed and given == "postgresql://u@h/db" else used
    assert storage.with_driver(given) == expected


def test_a_postgresql_url_without_any_driver_says_what_to_install(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name in storage.POSTGRES_DRIVERS.values() else real(name, *a))
    with pytest.raises(storage.StorageError, match=r"postgresql://u:\*\*\*@h/db: no PostgreSQL driver is "
                                                   r"installed: pip install 'autoplan\[postgres\]'"):
        storage.with_driver("postgresql://u:secret@h/db")


def _dropped():
    from sqlalchemy.exc import OperationalError

    return OperationalError("SELECT 1", {}, Exception("server closed the connection unexpectedly"))


def test_a_dropped_server_connection_is_retried_until_it_comes_back(monkeypatch, capsys):
    monkeypatch.setattr(storage_faults, "RECONNECT_FIRST_DELAY_S", 0.01)
    calls = []

    def flaky():
        calls.append(1)
        if len(calls) < 4:
            raise _dropped()
        return "stored"

    assert storage_faults.reconnecting("postgresql://u@h/db", flaky)() == "stored"
    assert len(calls) == 4
    assert capsys.readouterr().err == (
        "Note: lost the connection to --storage postgresql://u@h/db; reconnecting for up to 30 s\n")


def test_a_server_that_stays_away_stops_the_search_with_one_line(monkeypatch):
    monkeypatch.setattr(storage_faults, "RECONNECT_WITHIN_S", 0.2)
    monkeypatch.setattr(storage_faults, "RECONNECT_FIRST_DELAY_S", 0.01)

    def down():
        raise _dropped()

    with pytest.raises(storage.StorageError) as caught:
        with storage_faults.guard("postgresql://u:pw@h/db"):
            storage_faults.reconnecting("postgresql://u:pw@h/db", down)()
    assert str(caught.value) == (
        "--storage postgresql://u:***@h/db: the server is unreachable (server closed the connection "
        "unexpectedly) and did not come back within 0.2 s: start it, then rerun the same command to "
        "resume (the study keeps every batch written)")
