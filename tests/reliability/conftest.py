"""Fixtures of the reliability tests: a throw-away PostgreSQL server.

A cluster is made with ``initdb`` and started with ``pg_ctl`` on a free port of 127.0.0.1 (its
unix socket in the cluster's folder). Skipped unless the server binaries (on PATH, e.g.
/usr/local/bin, or Debian's /usr/lib/postgresql/*/bin) and a driver (psycopg2 or psycopg 3) are
installed; as root (which initdb refuses) the server runs as the ``postgres`` user through
``runuser``. Skipped, too, when the server does not start. The tests using it are marked
``postgresql`` (not in the default run: `pytest -m postgresql`).
"""

from __future__ import annotations

import glob
import importlib.util
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest


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


@dataclass
class Server:
    """A running throw-away server: ``url`` names its driver; ``stop``/``start`` it."""

    url: str
    bare_url: str  # postgresql://user@host:port/db, the form README shows
    pg_ctl: list[str]

    def stop(self) -> None:
        subprocess.run([*self.pg_ctl, "-m", "immediate", "stop"], capture_output=True, timeout=60)

    def start(self) -> None:
        subprocess.run([*self.pg_ctl, "-w", "-t", "60", "start"], capture_output=True, timeout=90)


@pytest.fixture(scope="module")
def postgres_server(tmp_path_factory):
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
        options = f"-p {port} -k {folder} -c listen_addresses=127.0.0.1 -c fsync=off"
        yield Server(url=f"postgresql+{dialect}://{user}@127.0.0.1:{port}/postgres",
                     bare_url=f"postgresql://{user}@127.0.0.1:{port}/postgres",
                     pg_ctl=[*prefix, str(bin_dir / "pg_ctl"), "-D", str(data), "-l", str(folder / "server.log"),
                             "-o", options])
    finally:
        if (data / "postmaster.pid").exists():
            run(bin_dir / "pg_ctl", "-D", data, "-m", "immediate", "stop")
        if prefix:
            shutil.rmtree(folder, ignore_errors=True)




@pytest.fixture(scope="module")
def postgres_url(postgres_server) -> str:
    return postgres_server.url
