"""A study in a real PostgreSQL server, the storage for workers on several machines.

A throw-away cluster is made with ``initdb`` and started with ``pg_ctl`` on a free port of
127.0.0.1 (its unix socket in the cluster's folder), then ``autoplan search --workers 2
--storage postgresql+psycopg2://...`` runs on it. Skipped unless the server binaries (Debian's
``postgresql`` package: /usr/lib/postgresql/*/bin) and a driver (psycopg2 or psycopg 3) are
installed; as root (which initdb refuses) the server runs as the ``postgres`` user through
``runuser``. Skipped, too, when the server does not start.
"""

from __future__ import annotations

import collections
import glob
import importlib.util
import json
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

import optuna
import pytest
from click.testing import CliRunner

from autoplan.cli import main
from autoplan.search.storage import WRITER_ATTR

SEARCH = ["search", "-m", "8b", "-g", "64", "--gbs-seqs", "256", "--pp", "1,2,4", "--vpp", "1,2",
          "--mbs", "1,2", "--format", "json"]


def _server_bin() -> Path | None:
    found = shutil.which("initdb")
    if found:
        return Path(found).parent
    for folder in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if (Path(folder) / "initdb").exists() and (Path(folder) / "pg_ctl").exists():
            return Path(folder)
    return None


def _driver() -> str | None:
    for module, dialect in (("psycopg2", "psycopg2"), ("psycopg", "psycopg")):
        if importlib.util.find_spec(module) is not None:
            return dialect
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _as_server_user() -> tuple[list[str], str]:
    """(command prefix, database user): the current user, or ``postgres`` when running as root."""
    if os.geteuid() != 0:
        return [], pwd.getpwuid(os.geteuid()).pw_name
    runuser = shutil.which("runuser")
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        runuser = None
    if runuser is None:
        pytest.skip("running as root without a 'postgres' user and runuser: initdb refuses root")
    return [runuser, "-u", "postgres", "--"], "postgres"


@pytest.fixture(scope="module")
def postgres_url(tmp_path_factory):
    bin_dir, dialect = _server_bin(), _driver()
    if bin_dir is None or dialect is None:
        pytest.skip("needs PostgreSQL server binaries (initdb, pg_ctl) and psycopg2 or psycopg")
    prefix, user = _as_server_user()
    # root's pytest folders are private to root: the server user gets a folder of its own.
    folder = Path(tempfile.mkdtemp(prefix="autoplan-pg-")) if prefix else tmp_path_factory.mktemp("pg")
    if prefix:
        shutil.chown(folder, user="postgres")
    data, port = folder / "data", _free_port()
    run = lambda *args: subprocess.run([*prefix, *map(str, args)], capture_output=True,  # noqa: E731
                                       text=True, timeout=120)
    try:
        made = run(bin_dir / "initdb", "-D", data, "-U", user, "--auth=trust", "--no-sync")
        started = made.returncode == 0 and run(
            bin_dir / "pg_ctl", "-D", data, "-l", folder / "server.log", "-w", "-t", "60", "-o",
            f"-p {port} -k {folder} -c listen_addresses=127.0.0.1 -c fsync=off", "start").returncode == 0
        if not started:
            pytest.skip(f"the PostgreSQL server did not start: {(made.stderr or made.stdout)[-300:]}")
        yield f"postgresql+{dialect}://{user}@127.0.0.1:{port}/postgres"
    finally:
        if (data / "postmaster.pid").exists():
            run(bin_dir / "pg_ctl", "-D", data, "-m", "immediate", "stop")
        if prefix:
            shutil.rmtree(folder, ignore_errors=True)


def test_two_workers_share_a_postgresql_study_and_resume_it(postgres_url, tmp_path):
    args = [*SEARCH, "--sampler", "tpe", "--workers", "2", "--storage", postgres_url, "--study-name", "pg"]
    first = CliRunner().invoke(main, [*args, "--trials", "64", "--out", str(tmp_path / "first")])
    assert first.exit_code == 0, first.output + first.stderr
    study = optuna.load_study(study_name="pg", storage=postgres_url)
    before = {t.number: (t.params, t.values) for t in study.trials}
    assert sorted(before) == list(range(len(before))) and len(before) >= 64
    writers = collections.Counter(t.system_attrs[WRITER_ATTR] for t in study.trials)
    assert len(writers) == 2 and min(writers.values()) >= 32  # 32 each, plus the polish's additions

    again = CliRunner().invoke(main, [*args, "--trials", str(len(before) + 32), "--out", str(tmp_path / "again")])
    assert again.exit_code == 0, again.output + again.stderr
    after = {t.number: (t.params, t.values)
             for t in optuna.load_study(study_name="pg", storage=postgres_url).trials}
    assert {n: after[n] for n in before} == before
    assert sorted(after) == list(range(len(after))) and len(after) >= len(before) + 32


def test_exhaustive_workers_store_every_layout_once_in_postgresql(postgres_url, tmp_path, monkeypatch):
    from autoplan.search import exhaustive

    monkeypatch.setattr(exhaustive, "CHUNK_SIZE", 512)
    args = [*SEARCH, "--sampler", "exhaustive", "--workers", "3", "--storage", postgres_url, "--study-name", "ex",
            "--out", str(tmp_path / "ex")]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output + result.stderr
    recipe = json.loads((tmp_path / "ex" / "manifest.json").read_text())["recipe"]
    rows = recipe["candidates"] - recipe["reasons"].get("degrees", 0)  # plans.csv folds twins
    trials = optuna.load_study(study_name="ex", storage=postgres_url).trials
    assert sorted(t.number for t in trials) == list(range(rows))
    assert len({tuple(sorted(t.params.items())) for t in trials}) == rows


def test_four_processes_create_one_postgresql_study_at_once(postgres_url):
    spec = importlib.util.spec_from_file_location("concurrent_open", Path(__file__).with_name("test_concurrent_open.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.open_together(postgres_url)
