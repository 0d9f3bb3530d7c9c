"""How a ``--storage`` fails: one line naming the storage, what went wrong and what to do.

Every storage failure ends the search with a ``StorageError`` (exit code 2), never a traceback:
:func:`guard` wraps what a search (or a worker) does with its study and turns the exceptions of
SQLAlchemy, of Optuna (``StorageInternalError`` wraps SQLAlchemy's), of sqlite3 and of a journal
file's reads and writes into one line (:func:`describe`). A batch is written whole or not at all,
so after a failure the same command resumes the study.

Two waits come before a failure:

* A PostgreSQL server that drops the connection (killed, restarted) is reconnected to with
  back-off for up to ``RECONNECT_WITHIN_S`` (:func:`reconnecting`): every method of the Optuna
  storage and autoplan's bulk insert is retried, on a fresh connection (``pool_pre_ping``).
  An insert whose commit was under way when the server died may have been stored: the exhaustive
  sampler's chunks are claimed with their trials (nothing is stored twice); a retried batch of
  another sampler may be stored twice, which a resumed count takes as trials done.
* An SQLite file locked by another process is waited on for ``SQLITE_LOCK_TIMEOUT_S`` (the
  driver's busy timeout); after ``LOCK_NOTICE_S`` one line says what it waits for
  (:func:`watch_sqlite_locks`); then the search stops with one line.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import logging
import re
import sqlite3
import sys
import threading
import time
from collections.abc import Callable, Iterator

from autoplan.errors import AutoplanError

SQLITE_LOCK_TIMEOUT_S = 600.0  # a writer waits this long for another's transaction to end
LOCK_NOTICE_S = 3.0  # after this long waiting for an SQLite lock, say so (once per process)
RECONNECT_WITHIN_S = 30.0  # a PostgreSQL server back within this long is reconnected to
RECONNECT_FIRST_DELAY_S = 0.25  # back-off: 0.25, 0.5, 1, 2, 4, 4, ... s between attempts
RECONNECT_MAX_DELAY_S = 4.0
KEPT = "the study keeps every batch written"


class _StderrLine(logging.Handler):
    """A note as one line on the stderr of the moment (a CLI runner's, in tests)."""

    def emit(self, record: logging.LogRecord) -> None:
        sys.stderr.write(f"{record.getMessage()}\n")
        sys.stderr.flush()


NOTES = logging.getLogger("autoplan.storage")  # notes on waits: one line each on stderr
NOTES.addHandler(_StderrLine())
NOTES.propagate = False


class StorageError(AutoplanError):
    """A --storage that cannot be opened or used (bad URL, missing driver, unreachable server,
    damaged file, full disk, lock held too long)."""


def shown(storage: str) -> str:
    """``storage`` as messages show it: an URL's password masked."""
    return re.sub(r"(://[^/:@]*:)[^/@]*@", r"\1***@", storage)


@contextlib.contextmanager
def guard(storage: str | None) -> Iterator[None]:
    """Turn a storage's exceptions raised in the block into one-line ``StorageError``s."""
    if storage is None:
        yield
        return
    try:
        yield
    except AutoplanError:
        raise
    except Exception as exc:
        if not is_storage_fault(storage, exc):
            raise
        raise StorageError(describe(storage, exc)) from None


def is_storage_fault(storage: str, exc: BaseException) -> bool:
    """An exception of the storage's driver (an RDB URL) or of the journal file's I/O."""
    if isinstance(exc, sqlite3.Error):
        return True
    if "://" not in storage:  # the journal's reads and writes (a full disk has no file name)
        return isinstance(exc, OSError) and (exc.filename is None or str(exc.filename).startswith(storage))
    import optuna
    from sqlalchemy.exc import SQLAlchemyError

    return isinstance(exc, (SQLAlchemyError, optuna.exceptions.StorageInternalError))


def root_cause(exc: BaseException) -> BaseException:
    """The driver's own exception under SQLAlchemy's and Optuna's wrappers."""
    seen = set()
    while id(exc) not in seen:
        seen.add(id(exc))
        inner = getattr(exc, "orig", None) or exc.__cause__
        if inner is None:
            break
        exc = inner
    return exc


def describe(storage: str, exc: BaseException) -> str:
    """One line: the storage, what failed (the driver's first line), what to do."""
    cause = root_cause(exc)
    text = " ".join(str(cause).strip().splitlines()[:1]) or type(cause).__name__
    text = text.split("\n[SQL:")[0].strip()
    where = file_of(storage)
    if getattr(cause, "errno", None) == errno.ENOSPC or "disk is full" in text or "No space left" in text:
        todo = f"the disk under {where} is full: free space, then rerun the same command to resume ({KEPT})"
    elif re.search(r"malformed|not a database|file is encrypted|disk I/O error", text):
        todo = f"{where} is damaged ({text}): restore it from a copy, or give a new --storage file"
    elif "locked" in text and where:
        todo = (f"gave up after {SQLITE_LOCK_TIMEOUT_S:g} s waiting for the lock on {where} held by "
                f"another process: end that process or rerun later ({KEPT})")
    elif is_disconnect(storage, exc):
        todo = (f"the server is unreachable ({text}) and did not come back within {RECONNECT_WITHIN_S:g} s: "
                f"start it, then rerun the same command to resume ({KEPT})")
    else:
        todo = f"{text}: rerun the same command once that is fixed ({KEPT})"
    return f"--storage {shown(storage)}: {todo}"


def file_of(storage: str) -> str:
    """The file of an SQLite URL or journal path ('' for a server URL)."""
    if "://" not in storage:
        return storage
    if not storage.startswith("sqlite"):
        return ""
    return storage.split("://", 1)[1].removeprefix("/").split("?", 1)[0]


def is_disconnect(storage: str, exc: BaseException) -> bool:
    """A server that is down or dropped the connection (not SQLite, not a bad query)."""
    if "://" not in storage or storage.startswith("sqlite"):
        return False
    from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError

    for err in (exc, exc.__cause__):
        if isinstance(err, (OperationalError, InterfaceError)) or (
                isinstance(err, DBAPIError) and err.connection_invalidated):
            return True
    return False


def reconnecting(storage: str, call: Callable) -> Callable:
    """``call`` retried with back-off while the server of ``storage`` is unreachable, for up
    to ``RECONNECT_WITHIN_S``; then the last error is raised (and :func:`guard` says it)."""
    @functools.wraps(call)
    def retried(*args, **kwargs):
        start, delay, noted = time.monotonic(), RECONNECT_FIRST_DELAY_S, False
        while True:
            try:
                return call(*args, **kwargs)
            except Exception as exc:
                if not is_disconnect(storage, exc) or time.monotonic() - start >= RECONNECT_WITHIN_S:
                    raise
                if not noted:
                    NOTES.warning(f"Note: lost the connection to --storage {shown(storage)}; "
                                  f"reconnecting for up to {RECONNECT_WITHIN_S:g} s")
                    noted = True
            time.sleep(min(delay, max(0.0, start + RECONNECT_WITHIN_S - time.monotonic())))
            delay = min(2 * delay, RECONNECT_MAX_DELAY_S)
    return retried


def reconnect_methods(rdb, storage: str) -> None:
    """Retry every public method of an Optuna ``RDBStorage`` (and those Optuna's cache calls)
    on a dropped connection (:func:`reconnecting`)."""
    from optuna.storages import BaseStorage

    names = {n for n in dir(BaseStorage) if not n.startswith("__")} | {"_get_trials"}
    for name in names:
        method = getattr(rdb, name, None)
        if callable(method):
            setattr(rdb, name, reconnecting(storage, method))


# SQLite files watched for lock waits: path -> when this process's running statement on it began.
_RUNNING: dict[str, float | None] = {}


def watch_sqlite_locks(path: str) -> None:
    """After ``LOCK_NOTICE_S`` in one statement on the SQLite file ``path``, if another
    connection holds its write lock, say once what the search waits for. Call before the engine
    is made (the study's open waits too): SQLAlchemy's cursor events of every engine note when
    a statement on ``path`` began; one thread per file reads it."""
    if path in _RUNNING:
        return
    _listen_to_cursors()
    _RUNNING[path] = None

    def watch() -> None:
        while True:
            time.sleep(min(0.5, LOCK_NOTICE_S / 3))
            since = _RUNNING.get(path)
            if since is not None and time.monotonic() - since >= LOCK_NOTICE_S and _locked(path):
                NOTES.warning(f"Note: waiting for the lock on {path} held by another process "
                              f"(up to {SQLITE_LOCK_TIMEOUT_S:g} s); Ctrl-C to stop")
                return

    threading.Thread(target=watch, name="autoplan-sqlite-lock-watch", daemon=True).start()


@functools.cache
def _listen_to_cursors() -> None:
    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    def mark(conn, began: bool) -> None:
        path = conn.engine.url.database
        if path in _RUNNING:
            _RUNNING[path] = time.monotonic() if began else None

    event.listen(Engine, "before_cursor_execute", lambda conn, *_: mark(conn, True))
    event.listen(Engine, "after_cursor_execute", lambda conn, *_: mark(conn, False))
    event.listen(Engine, "handle_error", lambda context: mark(context.connection, False)
                 if context.connection is not None else None)


def _locked(path: str) -> bool:
    """Whether another connection holds the write lock on the SQLite file ``path``."""
    try:
        probe = sqlite3.connect(path, timeout=0)
    except sqlite3.Error:
        return False
    try:
        probe.execute("BEGIN IMMEDIATE")
        probe.rollback()
        return False
    except sqlite3.OperationalError as exc:
        return "locked" in str(exc)
    finally:
        probe.close()
