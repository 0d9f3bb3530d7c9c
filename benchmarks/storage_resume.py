"""Resuming an exhaustive search whose study holds its layouts: wall time and peak RSS.

Issue 48 item 5 measured 60,672 stored trials costing 60 s and 3.45 GiB on resume (~60 KiB per
trial, every trial read whole) against 1.1 s / 0.29 GiB without storage. This script stores a
57,600-layout space once in an SQLite study (~1 minute), then times in fresh processes:

* the search without storage;
* the resume (the study's chunk claims say every layout is stored: no trial is read);
* the resume of the same study without its claims (as an older autoplan stored it: the knob
  values of its COMPLETE trials are read once, in pages, to tell which layouts are stored;
  :mod:`autoplan.search.legacy`), which claims its chunks;
* that study's next resume (claimed now: no trial is read).

Measured here (2 shared cores, load ~3.5, 56,880 trials), before -> after the bounded read:
no storage 1.17 -> 1.38 s, 0.30 GiB; resume 2.12 -> 2.47 s, 0.37 -> 0.38 GiB; resume without
claims 157.20 s / 3.25 GiB (every trial read whole by ``get_trials``: the issue's figure) ->
6.72 s / 0.38 GiB; its next resume 2.72 s / 0.38 GiB (claimed by the one before).

Peak RSS is the child's ``ru_maxrss`` (``resource.getrusage(RUSAGE_CHILDREN)``, KiB on Linux).
Run: ``python benchmarks/storage_resume.py [--db results/resume-bench.db]`` (reuses the file).
"""

from __future__ import annotations

import argparse
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SEARCH = ["search", "-m", "8b", "-g", "512", "--gbs-seqs", "512", "--format", "json", "--sampler", "exhaustive",
          "--tp", "1,2,4,8", "--pp", "1,2,4,8,16", "--vpp", "1,2,4", "--cp", "1,2,4,8", "--mbs", "1,2,4,8,16",
          "--zero", "0,1,2,3", "--recompute", "none,full,selective", "--precision", "bf16,fp8",
          "--pp-split", "balanced,embed-loss", "--study-name", "bench"]


def run(args: list[str], out: Path) -> tuple[float, float, str]:
    """(wall s, peak RSS GiB, stderr) of one ``autoplan`` process (run alone: RUSAGE_CHILDREN
    holds the largest child so far, so each run is measured in a process of its own)."""
    probe = ("import resource, subprocess, sys, time; t = time.monotonic(); "
             "p = subprocess.run(sys.argv[1:], capture_output=True, text=True); "
             "w = time.monotonic() - t; r = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss; "
             "print(f'{w} {r} {p.returncode}'); sys.stderr.write(p.stderr)")
    done = subprocess.run([sys.executable, "-c", probe, sys.executable, "-m", "autoplan.cli", *args,
                           "--out", str(out)], capture_output=True, text=True)
    wall, rss_kib, code = done.stdout.split()
    if code != "0":
        raise SystemExit(f"autoplan failed ({code}): {done.stderr[-500:]}")
    return float(wall), float(rss_kib) / 2**20, done.stderr


def count(db: Path, sql: str) -> int:
    with sqlite3.connect(db) as con:
        return con.execute(sql).fetchone()[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", type=Path, default=None, help="the study file (made if missing)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="autoplan-resume-"))
    db = args.db or work / "study.db"
    if not db.exists():
        start = time.monotonic()
        run([*SEARCH, "--storage", f"sqlite:///{db}"], work / "store")
        print(f"stored the study in {time.monotonic() - start:.1f} s")
    trials = count(db, "SELECT count(*) FROM trials")
    legacy = work / "legacy.db"
    shutil.copy(db, legacy)
    with sqlite3.connect(legacy) as con:
        con.execute("DELETE FROM study_system_attributes WHERE key LIKE 'autoplan:stored:%'")
    print(f"{trials:,} stored trials; resume in a fresh process each:")
    for label, extra in (("no storage", []), ("resume", ["--storage", f"sqlite:///{db}"]),
                         ("resume, no chunk claims", ["--storage", f"sqlite:///{legacy}"]),
                         ("its next resume", ["--storage", f"sqlite:///{legacy}"])):
        wall, rss_gib, _ = run([*SEARCH, *extra], work / label.replace(" ", "_").replace(",", ""))
        print(f"  {label:24s} {wall:6.2f} s  {rss_gib:5.2f} GiB peak RSS")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
