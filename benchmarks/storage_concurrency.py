"""Several processes on one study (SQLite; PostgreSQL with ``--postgresql URL``): issue 48 item 7.

1. ``kill -9`` of the main process of ``--workers 4`` (tpe) mid-search, on SQLite and with
   ``--postgresql`` on that server too: how long until every worker is gone (their PDEATHSIG
   lease), how many trials the study kept, and that the rerun resumes them all (the loss is at
   most each worker's batch in flight, 16 trials: a batch is written whole or not at all).
2. 8 processes started at once on one new exhaustive study (chunks of 512 layouts): every
   chunk claimed once, every layout stored once, and each process's plans.csv identical to a
   one-process run without storage.

Run: ``python benchmarks/storage_concurrency.py [--postgresql postgresql://user@127.0.0.1:5432/postgres]``
(about a minute on 2 cores). A throw-away server as tests/reliability/conftest.py starts one:
``initdb -D DIR -U postgres --auth=trust`` then ``pg_ctl -D DIR -o "-p PORT -k DIR" start``
(as the ``postgres`` user via ``runuser -u postgres --`` when root).

Measured here (2 shared cores, 2026-12-02): kill -9 on SQLite, 4 workers gone 0.09 s after the
kill, 416 trials counted just before it and 416 kept, the rerun reused all 416; on PostgreSQL
4 workers gone in 0.09 s, 400 counted and 400 kept, 400 reused; 8 processes on one exhaustive
study (13.8 s): 3 chunks claimed, 1,296 trials, 1,296 distinct, plans.csv identical 8 of 8.
"""

from __future__ import annotations

import argparse
import filecmp
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

SEARCH = ["search", "-m", "8b", "-g", "64", "--gbs-seqs", "256", "--format", "json"]
EXHAUSTIVE = [*SEARCH, "--sampler", "exhaustive", "--pp", "1,2,4", "--vpp", "1,2", "--mbs", "1,2,4"]
CHUNK = 512
# One process of the exhaustive race: the CLI with a small chunk size, so there are chunks to race for.
RACER = ("import sys; from autoplan.search import exhaustive; exhaustive.CHUNK_SIZE = %d; "
         "from autoplan.cli import main; sys.argv[0] = 'autoplan'; main()" % CHUNK)


def marked(marker: bytes) -> list[int]:
    """Live processes whose environment holds ``marker`` (spawned workers inherit it)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker in (entry / "environ").read_bytes().split(b"\0") and \
                        (entry / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def kill_main(work: Path, storage: str, label: str) -> None:
    marker = f"AUTOPLAN_BENCH={uuid.uuid4().hex}"
    env = {**os.environ, "AUTOPLAN_BENCH": marker.split("=")[1]}
    name = f"kill-{uuid.uuid4().hex[:8]}"
    args = [*SEARCH, "--sampler", "tpe", "--trials", "100000", "--workers", "4", "--storage", storage,
            "--study-name", name]
    proc = subprocess.Popen([sys.executable, "-m", "autoplan.cli", *args, "--out", str(work / f"{name}-1")],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while (at_kill := stored(storage, name)) < 400:  # mid-search
        time.sleep(0.2)
    workers = [p for p in marked(marker.encode()) if p != proc.pid]
    os.kill(proc.pid, signal.SIGKILL)
    killed = time.monotonic()
    proc.wait()
    while marked(marker.encode()) and time.monotonic() - killed < 30:
        time.sleep(0.05)
    gone_s, left = time.monotonic() - killed, marked(marker.encode())
    kept = stored(storage, name)
    rerun = [*SEARCH, "--sampler", "tpe", "--trials", str(kept + 64), "--workers", "4", "--storage", storage,
             "--study-name", name, "--out", str(work / f"{name}-2")]
    again = subprocess.run([sys.executable, "-m", "autoplan.cli", *rerun], capture_output=True, text=True)
    reused = [line for line in again.stderr.splitlines() if "stored trials reused" in line]
    print(f"kill -9 of --workers 4 (tpe, {label}): {len(workers)} workers gone {gone_s:.2f} s after the kill "
          f"({len(left)} left); {at_kill} trials counted just before it, {kept} kept "
          f"(a batch is 16 trials per worker); rerun exit {again.returncode}: "
          f"{reused[0].split(': ', 2)[-1] if reused else '?'}")


def stored(storage: str, name: str) -> int:
    """The trials of study ``name`` in the RDB ``storage`` (0 before the study exists)."""
    import sqlalchemy as sa

    from autoplan.search.storage import with_driver

    engine = sa.create_engine(with_driver(storage))
    try:
        with engine.connect() as con:
            return con.execute(sa.text("SELECT count(*) FROM trials JOIN studies USING (study_id) "
                                       "WHERE study_name = :n"), {"n": name}).scalar_one()
    except sa.exc.SQLAlchemyError:  # the schema is not made yet
        return 0
    finally:
        engine.dispose()


def race(work: Path, processes: int = 8) -> None:
    db = work / "race.db"
    base = [sys.executable, "-c", RACER, *EXHAUSTIVE]
    alone = subprocess.run([*base, "--out", str(work / "alone")], capture_output=True, text=True)
    assert alone.returncode == 0, alone.stderr
    start = time.monotonic()
    procs = [subprocess.Popen([*base, "--storage", f"sqlite:///{db}", "--study-name", "race",
                               "--out", str(work / f"p{i}")], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              text=True) for i in range(processes)]
    codes = [p.wait() for p in procs]
    wall = time.monotonic() - start
    trials = count(db, "SELECT count(*) FROM trials")
    distinct = len(set(params(db)))
    claims = count(db, "SELECT count(*) FROM study_system_attributes WHERE key LIKE 'autoplan:stored:%'")
    same = sum(filecmp.cmp(work / "alone" / "plans.csv", work / f"p{i}" / "plans.csv", shallow=False)
               for i in range(processes))
    print(f"{processes} processes on one new exhaustive study ({wall:.1f} s, exit codes {sorted(set(codes))}): "
          f"{claims} chunks claimed, {trials} trials, {distinct} distinct layouts; "
          f"plans.csv identical to one process without storage: {same} of {processes}")


def params(db: Path) -> list[tuple]:
    with sqlite3.connect(db) as con:
        rows = con.execute("SELECT trial_id, param_name, param_value FROM trial_params").fetchall()
    by_trial: dict[int, list] = {}
    for trial, name, value in rows:
        by_trial.setdefault(trial, []).append((name, value))
    return [tuple(sorted(v)) for v in by_trial.values()]


def count(db: Path, sql: str) -> int:
    with sqlite3.connect(db, timeout=60) as con:
        return con.execute(sql).fetchone()[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--postgresql", metavar="URL", help="also kill -9 a search on this server's study")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="autoplan-concurrency-"))
    kill_main(work, f"sqlite:///{work / 'kill.db'}", "SQLite")
    if args.postgresql:
        kill_main(work, args.postgresql, "PostgreSQL")
    race(work)


if __name__ == "__main__":
    main()
