"""Optuna studies for every sampler: in memory by default, or in a storage URL, resumable.

The samplers work on an in-memory study (fast ask/tell); with ``--storage`` its finished trials
are copied to the persistent study after every batch in one transaction (:func:`bulk_add`), and
a resumed run starts by loading the persistent study's finished trials. A batch is written
whole or not at all, so an interrupted run loses no finished trial.

Several processes can share one study (``--workers N``, or the same command on several
machines): each keeps its own working study, writes its finished trials tagged with its
``writer`` id, and before every batch copies the trials the others wrote (:meth:`StudyStore.sync`)
so the samplers learn from all of them. Storages: an RDB URL (``sqlite:///study.db``, with a
long lock timeout so concurrent writers wait instead of failing; ``postgresql://...`` for several
machines) or a journal file path (``study.log``, Optuna's ``JournalFileBackend``).

Optuna's ``RDBStorage`` writes one trial per transaction with several queries (~10-25 ms per
trial on SQLite, measured), which would make storing an exhaustive search of 10^4 layouts take
minutes; :func:`bulk_add` inserts the rows of many trials with one ``executemany`` per table of
Optuna's own schema (``optuna/storages/_rdb/models.py``), and falls back to
``Study.add_trials`` for other storages or if that schema changes.
"""

from __future__ import annotations

import contextlib
import copy
import datetime
import json
import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from autoplan.errors import AutoplanError
from autoplan.search import storage_faults
from autoplan.search.storage_faults import StorageError, describe

__all__ = ["StorageError", "StudyMismatchError", "StudyStore", "bulk_add", "make_storage", "open_study"]
WRITER_ATTR = "autoplan:writer"  # system attribute: which process wrote a trial
POLISH_ATTR = "autoplan:polish"  # system attribute of a layout tpe's polish added (not sampled)
# Study system attribute prefix: a unit of trials (an exhaustive chunk) already stored; Optuna's
# RDB schema makes (study, key) unique, so two processes cannot both claim one unit.
CLAIM_PREFIX = "autoplan:stored:"
# A journal writer holds its lock file for one append (milliseconds); an older lock file was
# left by a killed process, and Optuna's default 30 s grace would stall the next run that long.
JOURNAL_LOCK_GRACE_S = 3  # Optuna warns below 3
# Several processes creating one new database race on Optuna's schema setup ("table ... already
# exists", a unique-constraint error); each retries the open this many times, backing off.
OPEN_ATTEMPTS = 8
SQLITE_HEADER = b"SQLite format 3\x00"


class StudyMismatchError(AutoplanError):
    """A stored study that was made for other inputs (model, GPUs, batch, space, objectives)."""


@dataclass
class StudyStore:
    """The working (in-memory) study and, with a storage, the persistent one."""

    working: Any
    persistent: Any = None
    num_loaded: int = 0  # finished trials copied from the persistent study at the start
    meta: dict = field(default_factory=dict)
    writer: str = field(default_factory=lambda: uuid.uuid4().hex)
    stored: set = field(default_factory=set)  # working trial numbers in the persistent study
    seen: set = field(default_factory=set)  # ids of the persistent trials copied in
    resumed: str = ""  # one line on what a resumed study brings (search.study.resumed_line)
    unclaimed: Any = None  # exhaustive: layouts stored without chunk claims (search.legacy)

    @property
    def study(self):
        """The study that holds every trial (the persistent one when there is one)."""
        return self.persistent if self.persistent is not None else self.working

    def flush(self, limit: int | None = None) -> int:
        """Write the working study's newly finished trials to the persistent study (one
        transaction: all of them or none). ``limit``: the study holds at most this many sampled
        trials afterwards, whichever processes wrote them (:func:`bulk_add`); returns how many
        were written (fewer than the new ones once the study is full)."""
        if self.persistent is None:
            return 0
        new = [t for t in self.working.get_trials(deepcopy=False)
               if t.state.is_finished() and t.number not in self.stored]
        added = bulk_add(self.persistent, [self._tagged(t) for t in new], limit=limit)
        self.stored.update(t.number for t in new)
        return added

    def sync(self) -> int:
        """Copy the finished trials other processes wrote to the persistent study into the
        working one; returns how many."""
        if self.persistent is None:
            return 0
        import optuna

        complete = (optuna.trial.TrialState.COMPLETE,)
        new = [t for t in self.persistent.get_trials(deepcopy=False, states=complete)
               if t._trial_id not in self.seen and t.system_attrs.get(WRITER_ATTR) != self.writer]
        self.seen.update(t._trial_id for t in new)
        first = len(self.working.get_trials(deepcopy=False))
        self.working.add_trials(new)
        self.stored.update(range(first, first + len(new)))  # in-memory studies number in order
        return len(new)

    def _tagged(self, trial):
        tagged = copy.copy(trial)
        tagged.system_attrs = {**trial.system_attrs, WRITER_ATTR: self.writer}
        return tagged


def open_study(storage: str | None, study_name: str | None, directions: Sequence[str],
               sampler: Any, meta: dict, *, load_trials: bool = True) -> StudyStore:
    """Create or resume the study; check a resumed one was made for the same inputs.

    ``load_trials`` copies the stored finished trials into the working study (the samplers
    learn from them; the exhaustive sampler does not need them there)."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    working = optuna.create_study(sampler=sampler, directions=list(directions), study_name=study_name)
    if storage is None:
        working.set_user_attr("autoplan", meta)
        return StudyStore(working=working, meta=meta)
    persistent = _create_or_load(storage, study_name, directions)
    _check_resumable(persistent, directions, meta, storage)
    finished = []
    if load_trials:
        finished = persistent.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
        working.add_trials(finished)
    return StudyStore(working=working, persistent=persistent, num_loaded=len(finished), meta=meta,
                      stored=set(range(len(finished))), seen={t._trial_id for t in finished})


def make_storage(storage: str):
    """An Optuna storage for ``--storage``: an RDB URL (``sqlite:///results/study.db``,
    ``postgresql://user@host/db``) or the path of a journal file (``results/study.log``)."""
    if "://" in storage:
        return _rdb_storage(storage)
    if re.match(r"^[A-Za-z][A-Za-z0-9+.-]+:", storage):
        raise StorageError(f"--storage {storage}: expected an RDB URL like sqlite:///results/study.db "
                           "or postgresql://user@host/db, or a journal file path like results/study.log")
    from optuna.storages.journal import JournalFileSymlinkLock, JournalStorage

    from autoplan.search import journal

    journal.check_path(storage)  # before any open: a FIFO blocks it, /dev/zero exhausts memory
    lock = JournalFileSymlinkLock(storage, grace_period=JOURNAL_LOCK_GRACE_S)
    journal.cut_torn_tail(storage, lock)
    return JournalStorage(journal.CheckedJournalFileBackend(storage, lock_obj=lock))


def _rdb_storage(storage: str):
    """An ``RDBStorage``: SQLite with a long busy timeout and a note when it waits for a lock;
    a server with a driver that is installed and reconnection on a dropped connection."""
    from optuna.storages import RDBStorage

    if storage.startswith("sqlite"):
        _check_sqlite_file(storage)
        if path := storage_faults.file_of(storage):
            storage_faults.watch_sqlite_locks(path)
        return RDBStorage(storage, engine_kwargs={"connect_args": {"timeout": storage_faults.SQLITE_LOCK_TIMEOUT_S}})
    rdb = RDBStorage(with_driver(storage), engine_kwargs={"pool_pre_ping": True})
    storage_faults.reconnect_methods(rdb, storage)
    return rdb


# SQLAlchemy's dialect module per PostgreSQL driver autoplan can use, in order of preference.
POSTGRES_DRIVERS = {"psycopg2": "psycopg2", "psycopg": "psycopg"}


def with_driver(storage: str) -> str:
    """``storage`` with a PostgreSQL driver that is installed named in it.

    A bare ``postgresql://`` URL means SQLAlchemy's default driver: psycopg2 up to SQLAlchemy
    2.0, psycopg 3 from 2.1 (its changelog, "psycopg is now the default"), while the
    ``[postgres]`` extra installs psycopg2-binary. So the bare URL keeps the default driver when
    that is installed, else names the installed one; other URLs are returned as they are."""
    import importlib.util

    from sqlalchemy.engine import make_url

    try:
        url = make_url(storage)
    except Exception as exc:  # noqa: BLE001 - SQLAlchemy's ArgumentError: not an URL it parses
        raise StorageError(f"--storage {storage_faults.shown(storage)}: {exc}") from None
    if url.drivername != "postgresql":
        return storage
    installed = [d for d, module in POSTGRES_DRIVERS.items() if importlib.util.find_spec(module) is not None]
    if url.get_dialect().driver in installed:
        return storage
    if not installed:
        raise StorageError(f"--storage {storage_faults.shown(storage)}: no PostgreSQL driver is installed: "
                           "pip install 'autoplan[postgres]' (psycopg2-binary), or psycopg")
    return url.set(drivername=f"postgresql+{installed[0]}").render_as_string(hide_password=False)


def _check_sqlite_file(storage: str) -> None:
    """Refuse a ``sqlite:///path`` whose file exists and is not an SQLite database (SQLite would
    take an empty file as a new database, and fail on any other after the search)."""
    import os

    path = storage.split("://", 1)[1].removeprefix("/").split("?", 1)[0]
    if not path or path == ":memory:" or not os.path.lexists(path):
        return
    if not os.path.isfile(path):
        raise StorageError(f"--storage {storage}: {path} is not a regular file")
    with open(path, "rb") as handle:
        head = handle.read(len(SQLITE_HEADER))
    if head and head != SQLITE_HEADER:
        raise StorageError(f"--storage {storage}: {path} exists and is not an SQLite database; "
                           "give a new file name")


def _create_or_load(storage: str, study_name: str | None, directions: Sequence[str]):
    import random
    import time

    import optuna
    from sqlalchemy.exc import SQLAlchemyError

    for attempt in range(OPEN_ATTEMPTS):
        began = time.monotonic()
        try:
            return _try_create_or_load(storage, study_name, directions)
        except (SQLAlchemyError, optuna.exceptions.DuplicatedStudyError) as exc:
            # A lock held past the whole busy timeout is no race (SQLite also reports a lock
            # at once, without waiting, when two connections would deadlock: that one is).
            waited_out = time.monotonic() - began >= 0.9 * storage_faults.SQLITE_LOCK_TIMEOUT_S
            if attempt == OPEN_ATTEMPTS - 1 or not RACE.search(str(exc)) or waited_out:
                raise StorageError(describe(storage, exc)) from None
            time.sleep(0.05 * 2 ** attempt * (1 + random.random()))  # 0.05 s to ~13 s in all
    raise AssertionError("unreachable")


RACE = re.compile(r"already exists|unique|duplicate|locked", re.IGNORECASE)


def _try_create_or_load(storage: str, study_name: str | None, directions: Sequence[str]):
    import optuna
    from sqlalchemy.exc import SQLAlchemyError

    def create():
        return optuna.create_study(storage=make_storage(storage), study_name=study_name,
                                   directions=list(directions), load_if_exists=True)

    try:
        return storage_faults.reconnecting(storage, create)()
    except (SQLAlchemyError, optuna.exceptions.DuplicatedStudyError):
        raise  # retried by the caller
    except (ValueError, ImportError, OSError) as exc:  # bad URL, driver, server
        if isinstance(exc, AutoplanError):
            raise
        raise StorageError(describe(storage, exc)) from None


def _check_resumable(study, directions: Sequence[str], meta: dict, storage: str) -> None:
    stored = study.user_attrs.get("autoplan")
    names = [d.name.lower() for d in study.directions]
    where = f"study '{study.study_name}' in {storage}"
    if names != [d.lower() for d in directions]:
        raise StudyMismatchError(f"{where} optimises {names}, this sampler needs {list(directions)}: "
                                 "use another --study-name")
    if stored is None:
        if study.get_trials(deepcopy=False):
            raise StudyMismatchError(f"{where} was not made by autoplan: use another --study-name")
        study.set_user_attr("autoplan", meta)
        return
    if stored.get("key") != meta.get("key"):
        now, before = _flatten(meta), _flatten(stored)
        differ = [k for k in sorted(set(now) | set(before), key=lambda k: (k not in NAMED_INPUTS, k))
                  if k != "key" and now.get(k) != before.get(k)]
        shown = "; ".join(f"{NAMED_INPUTS.get(k, k)}: stored {before.get(k)!r}, now {now.get(k)!r}"
                          for k in differ[:3])
        more = f" and {len(differ) - 3} more" if len(differ) > 3 else ""
        raise StudyMismatchError(f"{where} was made for other inputs ({shown or 'an older autoplan'}{more}): "
                                 "resume it with the same inputs or use another --study-name")


# Inputs a user names (shown first, by these words, when a resumed study differs): another
# trainer also differs in every calibrated parameter, which would hide the trainer itself.
NAMED_INPUTS = {"profile.name": "trainer", "model.name": "model", "cluster.gpu.name": "GPU"}


def _flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    """``{"cluster": {"gpu": {"name": x}}}`` -> ``{"cluster.gpu.name": x}``."""
    if not isinstance(data, dict):
        return {prefix: data}
    flat: dict[str, Any] = {}
    for key, value in data.items():
        flat.update(_flatten(value, f"{prefix}.{key}" if prefix else str(key)))
    return flat


def bulk_add(study, trials: Sequence, *, claim: str | None = None, limit: int | None = None) -> int:
    """Add finished ``FrozenTrial``s to ``study`` in one transaction where the storage allows;
    returns how many were added.

    ``claim`` (a key under ``CLAIM_PREFIX``) is stored with them, atomically: if the study holds
    it already (another process stored this unit) nothing is added. ``limit``: the study's
    sampled trials (finished, not added by the polish) do not exceed it; the trials past it are
    dropped. Both are checked under the storage's write lock (an RDB transaction, or for a
    journal file an exclusive lock on ``<journal>.autoplan.lock``), so they hold across
    processes."""
    if not trials and claim is None:
        return 0
    rdb = _rdb(study)
    if rdb is not None:
        insert = storage_faults.reconnecting(str(rdb.engine.url), _rdb_bulk_insert)
        return insert(rdb, study._study_id, trials, claim=claim, limit=limit)
    with _journal_lock(study):
        attrs = study._storage.get_study_system_attrs(study._study_id) if claim else {}
        if claim in attrs:
            return 0
        if limit is not None:
            trials = trials[:max(0, limit - count_sampled(study.get_trials(deepcopy=False)))]
        if trials:
            study.add_trials(trials)
        if claim:
            study._storage.set_study_system_attr(study._study_id, claim, len(trials))
    return len(trials)


def count_sampled(trials: Sequence) -> int:
    """The finished trials a sampler asked for (the polish's additions not counted)."""
    return sum(1 for t in trials if t.state.name == "COMPLETE" and not t.system_attrs.get(POLISH_ATTR))


def claims(study) -> set[str]:
    """The units (``CLAIM_PREFIX`` keys) the study holds: one small read, no trial is loaded."""
    return {k for k in study._storage.get_study_system_attrs(study._study_id) if k.startswith(CLAIM_PREFIX)}


def num_trials(study) -> int:
    """How many trials the study holds, counted by the storage where it can (RDB: one query)."""
    rdb = _rdb(study)
    if rdb is None:
        return len(study.get_trials(deepcopy=False))
    import sqlalchemy as sa
    from optuna.storages._rdb import models
    from optuna.storages._rdb.storage import _create_scoped_session

    table = models.TrialModel.__table__
    with _create_scoped_session(rdb.scoped_session) as session:
        return session.execute(sa.select(sa.func.count()).select_from(table)
                               .where(table.c.study_id == study._study_id)).scalar_one()


def _rdb(study):
    """The study's ``RDBStorage`` (under Optuna's cache), or None for other storages."""
    backend = getattr(getattr(study, "_storage", None), "_backend", None)
    try:
        from optuna.storages import RDBStorage
    except ImportError:  # pragma: no cover - optuna without SQLAlchemy
        return None
    return backend if isinstance(backend, RDBStorage) else None


@contextlib.contextmanager
def _journal_lock(study):
    """An exclusive lock for a check-then-write on a journal file study (``fcntl.flock`` of a
    file beside it; Optuna's own lock covers one append only). Nothing for other storages."""
    backend = getattr(getattr(study, "_storage", None), "_backend", None)
    path = getattr(backend, "_file_path", None)
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX: one append at a time only
        fcntl = None
    if path is None or fcntl is None:
        yield
        return
    with open(f"{path}.autoplan.lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _rdb_bulk_insert(storage, study_id: int, trials: Sequence, *, claim: str | None = None,
                     limit: int | None = None) -> int:
    """Insert trials with their params, values and attributes: one executemany per table;
    ``claim`` and ``limit`` as in :func:`bulk_add`, checked after taking the write lock."""
    import sqlalchemy as sa
    from optuna.storages._rdb import models
    from optuna.storages._rdb.storage import _create_scoped_session

    studies = models.StudyModel.__table__
    claims_table = models.StudySystemAttributeModel.__table__
    with _create_scoped_session(storage.scoped_session) as session:
        # Take the write lock before counting, so concurrent writers number their trials in
        # turn: a no-op UPDATE locks the study's row (PostgreSQL, MySQL) and opens SQLite's write
        # transaction (a SELECT alone would not, and two writers could read the same count).
        locked = session.execute(studies.update().where(studies.c.study_id == study_id)
                                 .values(study_name=studies.c.study_name)).rowcount
        if not locked:
            raise KeyError(f"no study with id {study_id}")
        if claim is not None:
            held = session.execute(sa.select(claims_table.c.key).where(
                claims_table.c.study_id == study_id, claims_table.c.key == claim)).first()
            if held is not None:
                return 0
        if limit is not None:
            trials = trials[:max(0, limit - _rdb_count_sampled(session, study_id))]
        if claim is not None:
            session.execute(claims_table.insert(), [{"study_id": study_id, "key": claim,
                                                     "value_json": json.dumps(len(trials))}])
        if trials:
            _insert_trials(session, study_id, trials)
    return len(trials)


def _rdb_count_sampled(session, study_id: int) -> int:
    """:func:`count_sampled` as one query."""
    import sqlalchemy as sa
    from optuna.storages._rdb import models
    from optuna.trial import TrialState

    table = models.TrialModel.__table__
    attrs = models.TrialSystemAttributeModel.__table__
    polished = sa.select(attrs.c.trial_id).where(attrs.c.key == POLISH_ATTR)
    return session.execute(sa.select(sa.func.count()).select_from(table).where(
        table.c.study_id == study_id, table.c.state == TrialState.COMPLETE,
        table.c.trial_id.not_in(polished))).scalar_one()


def _insert_trials(session, study_id: int, trials: Sequence) -> None:
    """The trials' rows, numbered after the study's (the caller holds the write lock)."""
    import sqlalchemy as sa
    from optuna.storages._rdb import models

    table = models.TrialModel.__table__
    start = session.execute(sa.select(sa.func.count()).select_from(table)
                            .where(table.c.study_id == study_id)).scalar_one()
    now = datetime.datetime.now(datetime.timezone.utc)
    session.execute(table.insert(), [
        {"number": start + k, "study_id": study_id, "state": t.state,
         "datetime_start": _naive_utc(t.datetime_start or now),
         "datetime_complete": _naive_utc(t.datetime_complete or now)}
        for k, t in enumerate(trials)])
    ids = dict(session.execute(sa.select(table.c.number, table.c.trial_id).where(
        table.c.study_id == study_id, table.c.number >= start)).all())
    for model, rows in _child_rows(trials, [ids[start + k] for k in range(len(trials))]).items():
        if rows:
            session.execute(model.__table__.insert(), rows)


def _naive_utc(moment: datetime.datetime) -> datetime.datetime:
    """Optuna's RDB schema stores naive UTC datetimes (see TrialModel)."""
    return moment.astimezone(datetime.timezone.utc).replace(tzinfo=None)


def _child_rows(trials: Sequence, trial_ids: list[int]) -> dict[Any, list[dict]]:
    """Rows of the params, values, user and system attribute tables of ``trials``."""
    from optuna.distributions import distribution_to_json
    from optuna.storages._rdb import models

    rows: dict[Any, list[dict]] = {models.TrialParamModel: [], models.TrialValueModel: [],
                                   models.TrialUserAttributeModel: [], models.TrialSystemAttributeModel: []}
    dist_json: dict[int, str] = {}
    for trial_id, t in zip(trial_ids, trials):
        for name, value in t.params.items():
            dist = t.distributions[name]
            text = dist_json.setdefault(id(dist), distribution_to_json(dist))
            rows[models.TrialParamModel].append(
                {"trial_id": trial_id, "param_name": name,
                 "param_value": dist.to_internal_repr(value), "distribution_json": text})
        for objective, value in enumerate(t.values or ()):
            stored, kind = models.TrialValueModel.value_to_stored_repr(value)
            rows[models.TrialValueModel].append(
                {"trial_id": trial_id, "objective": objective, "value": stored, "value_type": kind})
        for model, attrs in ((models.TrialUserAttributeModel, t.user_attrs),
                             (models.TrialSystemAttributeModel, t.system_attrs)):
            rows[model] += [{"trial_id": trial_id, "key": key, "value_json": json.dumps(value)}
                            for key, value in attrs.items()]
    return rows
