"""Several processes on one SQLite study: figures of issue 48 item 7.

1. ``kill -9`` of the main process of ``--workers 4`` (tpe) mid-search: how long until every
   worker is gone (their PDEATHSIG lease), how many trials the study kept, and that the rerun
   resumes them all (the loss is at most each worker's batch in flight, 16 trials).
2. 8 processes started at once on one new exhaustive study (chunks of 512 layouts): every
   chunk claimed once, every layout stored once, and each process's plans.csv identical to a
   one-process run without storage.

Run: ``python benchmarks/storage_concurrency.py`` (about a minute on 2 cores).
"""

from __future__ import annotations

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


def kill_main(work: Path) -> None:
    db = work / "kill.db"
    marker = f"AUTOPLAN_BENCH={uuid.uuid4().hex}"
    env = {**os.environ, "AUTOPLAN_BENCH": marker.split("=")[1]}
    args = [*SEARCH, "--sampler", "tpe", "--trials", "100000", "--workers", "4", "--storage", f"sqlite:///{db}",
            "--study-name", "kill"]
    proc = subprocess.Popen([sys.executable, "-m", "autoplan.cli", *args, "--out", str(work / "k1")], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while not db.exists() or count(db, "SELECT count(*) FROM trials") < 400:  # mid-search
        time.sleep(0.2)
    workers = [p for p in marked(marker.encode()) if p != proc.pid]
    os.kill(proc.pid, signal.SIGKILL)
    killed = time.monotonic()
    proc.wait()
    while marked(marker.encode()) and time.monotonic() - killed < 30:
        time.sleep(0.05)
    gone_s, left = time.monotonic() - killed, marked(marker.encode())
    kept = count(db, "SELECT count(*) FROM trials")
    rerun = [*SEARCH, "--sampler", "tpe", "--trials", str(kept + 64), "--workers", "4", "--storage",
             f"sqlite:///{db}", "--study-name", "kill", "--out", str(work / "k2")]
    again = subprocess.run([sys.executable, "-m", "autoplan.cli", *rerun], capture_output=True, text=True)
    reused = [line for line in again.stderr.splitlines() if "stored trials reused" in line]
    print(f"kill -9 of --workers 4 (tpe, SQLite): {len(workers)} workers gone {gone_s:.2f} s after the kill "
          f"({len(left)} left); {kept} trials kept; rerun exit {again.returncode}: {reused[0] if reused else '?'}")


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
    work = Path(tempfile.mkdtemp(prefix="autoplan-concurrency-"))
    kill_main(work)
    race(work)


if __name__ == "__main__":
    main()
