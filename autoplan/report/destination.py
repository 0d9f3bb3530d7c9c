"""Where results go: checked before any work, each file written whole or not at all.

A result folder (``search --out``) must be new, empty, or hold an earlier result of the same
study (its manifest.json carries the study key, :func:`autoplan.search.study.study_meta`); then
only the files that earlier run listed are removed. A folder of another run is refused, so no
stale report or launch script ends up next to new plans. One run writes into a folder at a time
(a lock file, ``fcntl.flock``); a run marks the folder unfinished before its first file and
clears the mark after its manifest lists them all, so the folder of a run killed part way is
replaced whole by a rerun of the same study, and refused to any other. Each file is written to a temporary
name beside it and renamed over the target, so a full disk or a kill leaves the old file or
none, never a truncated one. A destination that is not a regular file (``/dev/null``,
``/dev/full``) is written in place. Every failure is an ``OutputError``: one line, exit code 2.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
from pathlib import Path

from autoplan.errors import AutoplanError


class OutputError(AutoplanError):
    """A destination that cannot be written (a file where a folder is needed, read-only, full)."""


def _fail(path: Path | str, exc: OSError) -> OutputError:
    return OutputError(f"cannot write {path}: {exc.strerror or type(exc).__name__}")


# A new --out path with one of these endings names a file, not the folder the results go in.
FILE_SUFFIXES = (".json", ".csv", ".yaml", ".yml", ".md", ".html", ".txt", ".sh")
LOCK_NAME = ".autoplan.lock"  # held (fcntl.flock) by the one run writing into a result folder
UNFINISHED_NAME = ".autoplan.unfinished"  # the study key of a run that has started writing its files


class ResultFolder:
    """A result folder claimed by :func:`check_out_dir` for one run: locked until
    :meth:`release`, so a second run into it is refused rather than mixing its files in."""

    def __init__(self, path: Path, owned: list[Path], made: bool, lock_fd: int | None):
        self.path, self.owned, self.made, self._lock_fd = path, owned, made, lock_fd

    def start_writing(self, key: str) -> None:
        """Remove the earlier result's files and mark the folder as being written by the study
        ``key``: a run killed from here on (kill -9, power loss) leaves a folder that a rerun of
        the same study recognises and replaces whole."""
        write_text(self.path / UNFINISHED_NAME, key + "\n")
        clear(self.owned)

    def finish(self) -> None:
        """Every file is written and listed in manifest.json."""
        (self.path / UNFINISHED_NAME).unlink(missing_ok=True)

    def abandon(self) -> None:
        """The run failed before writing: remove the folder if this run made it (still empty)."""
        self.release()
        if self.made:
            with contextlib.suppress(OSError):
                self.path.rmdir()

    def release(self) -> None:
        """Unlock: the lock file is removed while still held (a run waiting on it then finds it
        replaced, :func:`_lock`), then closed, which releases the flock."""
        if self._lock_fd is not None:
            with contextlib.suppress(OSError):
                (self.path / LOCK_NAME).unlink()
            os.close(self._lock_fd)
            self._lock_fd = None


def check_out_dir(out: str | Path, key: str) -> ResultFolder:
    """Create (or accept) the result folder ``out`` for the study ``key``, prove it writable and
    lock it for this run; its ``owned`` files are an earlier result of the same study (or all
    files of one of its runs that stopped while writing), for :meth:`ResultFolder.start_writing`."""
    path = Path(out)
    if path.is_symlink() and not path.exists():
        raise OutputError(f"--out {out}: a link to nothing ({os.readlink(path)})")
    if path.exists() and not path.is_dir():
        raise OutputError(f"--out {out}: not a folder; give a new or empty folder")
    if not os.path.lexists(path) and path.suffix.lower() in FILE_SUFFIXES:
        raise OutputError(f"--out {out}: names a {path.suffix} file, but --out is the folder the results go in "
                          f"(their files and a manifest.json inside it); did you mean --out {path.with_suffix('')}?")
    made = not os.path.lexists(path)
    _owned(path, key, out)  # refuse another run's folder before writing into it
    try:
        path.mkdir(parents=True, exist_ok=True)
        folder = ResultFolder(path, [], made, _lock(path, out))
    except OSError as exc:
        raise OutputError(f"--out {out}: cannot write there: {exc.strerror or type(exc).__name__}") from None
    try:
        _probe(path, out)
        folder.owned = _owned(path, key, out)  # again, now that no other run can write there
    except OutputError:
        folder.abandon()
        raise
    return folder


def _probe(path: Path, out: str | Path) -> None:
    """Prove ``path`` writable: a byte written, synced and removed."""
    try:
        handle, probe = _new_file(path, ".probe-")
        try:
            os.write(handle, b"x")
            os.fsync(handle)
        finally:
            os.close(handle)
            probe.unlink()
    except OSError as exc:
        raise OutputError(f"--out {out}: cannot write there: {exc.strerror or type(exc).__name__}") from None


def _owned(path: Path, key: str, out: str | Path) -> list[Path]:
    """The files of ``path`` a run of the study ``key`` may replace; another run's folder refused."""
    if not path.is_dir() or not any(p.name != LOCK_NAME for p in path.iterdir()):
        return []
    unfinished = _read_text(path / UNFINISHED_NAME).strip()
    if unfinished == key:  # this study's run stopped while writing: every file is its
        return [p for p in path.rglob("*") if (p.is_file() or p.is_symlink())
                and p.name not in (LOCK_NAME, UNFINISHED_NAME)]
    manifest = _read_manifest(path / "manifest.json")
    if unfinished or manifest.get("study_key") != key:
        what = ("another search's results (its manifest.json has other inputs)" if manifest or unfinished else
                "files that are not a search result of these inputs")
        raise OutputError(f"--out {out} holds {what}; give a new or empty folder")
    return [path / name for name in manifest.get("files", []) if _inside(path, name)]


def _lock(path: Path, out: str | Path) -> int | None:
    """An open descriptor of the folder's lock file, locked (exclusive, not waiting); another run
    holding it is an ``OutputError`` that names the folder and that run's process id. A lock
    file removed by its holder between our open and our flock is opened again (the inode
    check), so two runs never hold two different files."""
    try:
        import fcntl
    except ImportError:  # not POSIX: no lock
        return None
    lock_path = path / LOCK_NAME
    for _ in range(MAX_NAME_TRIES):
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 32).decode("ascii", "replace").strip()
            os.close(fd)
            raise OutputError(f"--out {out} is being written by another autoplan run (process {holder or '?'}); "
                              "wait for it to finish, or give another folder") from None
        try:
            same = os.stat(lock_path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
            return fd
        os.close(fd)
    raise OutputError(f"--out {out}: its lock file {LOCK_NAME} keeps being replaced")


def clear(owned: list[Path]) -> None:
    """Remove an earlier result's files (and the folders they leave empty)."""
    for file in owned:
        if file.is_file() or file.is_symlink():
            file.unlink()
    for folder in sorted({f.parent for f in owned}, key=lambda p: len(p.parts), reverse=True):
        if folder.is_dir() and not any(folder.iterdir()):
            folder.rmdir()


def check_out_file(out: str | Path) -> None:
    """Refuse, before any work, a file destination that cannot be written: a folder, a link to
    nothing, a path under a file, a read-only folder."""
    path = Path(out)
    if path.is_symlink() and not path.exists():
        raise OutputError(f"{out}: a link to nothing ({os.readlink(path)})")
    if path.is_dir():
        raise OutputError(f"{out}: a folder; give a file name")
    if path.exists() and not path.is_file():
        return  # a device or pipe, written in place
    parent = path.absolute().parent
    while not parent.exists() and not parent.is_symlink():  # missing folders are made on writing
        parent = parent.parent
    if not parent.is_dir():
        raise OutputError(f"{out}: {parent} is not a folder")
    if not os.access(parent, os.W_OK | os.X_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise OutputError(f"{out}: not writable")


def write_text(path: str | Path, text: str, *, executable: bool = False) -> Path:
    """Write ``text`` (UTF-8) to ``path`` whole or not at all: :func:`write_bytes`."""
    return write_bytes(path, text.encode("utf-8"), executable=executable)


def write_bytes(path: str | Path, data: bytes, *, executable: bool = False) -> Path:
    """Write ``data`` to ``path`` whole or not at all (temporary name, then rename); a failure
    is an ``OutputError`` naming ``path``. A new file gets mode 0644 less the umask (0755 when
    ``executable``); an existing one keeps its mode; a device is written in place and never
    chmod-ed."""
    path = Path(path)
    if path.exists() and not path.is_file():
        try:
            with open(path, "wb") as handle:
                handle.write(data)
        except OSError as exc:
            raise _fail(path, exc) from None
        return path
    mode = _mode(path, executable)
    try:
        handle, temporary = _new_file(path.parent, f".{path.name}.")
    except OSError as exc:
        raise _fail(path, exc) from None
    try:
        with open(handle, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.chmod(temporary, mode)
        os.replace(temporary, path)
    except OSError as exc:
        os.unlink(temporary)
        raise _fail(path, exc) from None
    return path


_NEW_FILE_FLAGS = (os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
                   | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0))
_serial = itertools.count()
MAX_NAME_TRIES = 1000


def _new_file(folder: Path, prefix: str) -> tuple[int, Path]:
    """A file descriptor and path of a new file in ``folder`` (mode 0600, as ``tempfile``
    makes them), named ``prefix`` + process id + a serial number; never an existing file
    (O_EXCL). ``tempfile`` itself is not imported: with shutil, bz2 and lzma it costs ~5-10 ms
    of a search's start."""
    for _ in range(MAX_NAME_TRIES):
        path = folder / f"{prefix}{os.getpid()}-{next(_serial)}"
        try:
            return os.open(path, _NEW_FILE_FLAGS, 0o600), path
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary name {prefix}* in {folder} after {MAX_NAME_TRIES} tries")


def _mode(path: Path, executable: bool) -> int:
    if path.exists():
        return path.stat().st_mode & 0o7777
    umask = os.umask(0)
    os.umask(umask)
    return (0o777 if executable else 0o666) & ~umask


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")[:1000]
    except OSError:
        return ""


def _read_manifest(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _inside(root: Path, name: object) -> bool:
    return isinstance(name, str) and not Path(name).is_absolute() and ".." not in Path(name).parts
