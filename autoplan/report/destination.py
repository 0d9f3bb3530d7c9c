"""Where results go: checked before any work, each file written whole or not at all.

A result folder (``search --out``) must be new, empty, or hold an earlier result of the same
study (its manifest.json carries the study key, :func:`autoplan.search.study.study_meta`); then
only the files that earlier run listed are removed. A folder of another run is refused, so no
stale report or launch script ends up next to new plans. Each file is written to a temporary
name beside it and renamed over the target, so a full disk or a kill leaves the old file or
none, never a truncated one. A destination that is not a regular file (``/dev/null``,
``/dev/full``) is written in place. Every failure is an ``OutputError``: one line, exit code 2.
"""

from __future__ import annotations

import itertools
import json
import os
from pathlib import Path

from autoplan.errors import AutoplanError


class OutputError(AutoplanError):
    """A destination that cannot be written (a file where a folder is needed, read-only, full)."""


def _fail(path: Path | str, exc: OSError) -> OutputError:
    return OutputError(f"cannot write {path}: {exc.strerror or type(exc).__name__}")


def check_out_dir(out: str | Path, key: str) -> list[Path]:
    """Create (or accept) the result folder ``out`` for the study ``key`` and prove it writable;
    return the files of an earlier result of the same study, for :func:`clear`."""
    path = Path(out)
    if path.is_symlink() and not path.exists():
        raise OutputError(f"--out {out}: a link to nothing ({os.readlink(path)})")
    if path.exists() and not path.is_dir():
        raise OutputError(f"--out {out}: not a folder; give a new or empty folder")
    owned: list[Path] = []
    if path.is_dir() and any(path.iterdir()):
        manifest = _read_manifest(path / "manifest.json")
        if manifest.get("study_key") != key:
            what = "another search's results (its manifest.json has other inputs)" if manifest else \
                "files that are not a search result of these inputs"
            raise OutputError(f"--out {out} holds {what}; give a new or empty folder")
        owned = [path / name for name in manifest.get("files", []) if _inside(path, name)]
    try:
        path.mkdir(parents=True, exist_ok=True)
        handle, probe = _new_file(path, ".probe-")
        try:
            os.write(handle, b"x")
            os.fsync(handle)
        finally:
            os.close(handle)
            probe.unlink()
    except OSError as exc:
        raise OutputError(f"--out {out}: cannot write there: {exc.strerror or type(exc).__name__}") from None
    return owned


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
    """Write ``text`` to ``path`` whole or not at all (temporary name, then rename). A new
    file gets mode 0644 less the umask (0755 when ``executable``); an existing one keeps its
    mode; a device is written in place and never chmod-ed."""
    path = Path(path)
    data = text.encode("utf-8")
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


def _read_manifest(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _inside(root: Path, name: object) -> bool:
    return isinstance(name, str) and not Path(name).is_absolute() and ".." not in Path(name).parts
