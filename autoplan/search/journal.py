"""A journal file study (``--storage study.log``), checked before and while Optuna reads it.

Optuna's ``JournalFileBackend`` (optuna/storages/journal/_file.py) appends one JSON line per
operation. What can be wrong with the file, and what autoplan does:

* not a regular file: a FIFO would block the open forever, a device like /dev/zero would be
  read until memory runs out, so only a regular file or a path not yet there is accepted
  (:func:`check_path`);
* the last line cut by a crash (a write killed midway, the normal state after a crash): Optuna
  skips it on reading but appends the next operation to it, which garbles both, so the torn
  tail is cut off before the study is opened, under Optuna's own lock, with a note
  (:func:`cut_torn_tail`);
* a line that is not JSON, or names an operation Optuna does not know (Optuna asserts): the
  search stops with the file and line (:class:`CheckedJournalFileBackend`).
"""

from __future__ import annotations

import os
import stat

from optuna.storages.journal import JournalFileBackend
from optuna.storages.journal._file import get_lock_file
from optuna.storages.journal._storage import JournalOperation

from autoplan.search.storage_faults import NOTES, StorageError

TAIL_BLOCK_BYTES = 1 << 16  # the torn tail is looked for backwards, this much at a time
KNOWN_OPS = frozenset(int(op) for op in JournalOperation)


def check_path(path: str) -> None:
    """Refuse a journal path that exists and is not a regular file (links followed)."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return
    except OSError as exc:
        raise StorageError(f"--storage {path}: cannot read it ({exc.strerror})") from None
    if not stat.S_ISREG(mode):
        kind = ("a FIFO" if stat.S_ISFIFO(mode) else "a directory" if stat.S_ISDIR(mode)
                else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "a socket" if stat.S_ISSOCK(mode)
                else "not a regular file")
        raise StorageError(f"--storage {path}: is {kind}; a journal must be a regular file "
                           "(give a new file name to start a study)")


def cut_torn_tail(path: str, lock) -> int:
    """Cut a last line that lacks its newline (a write cut by a crash) from the journal
    ``path``, holding ``lock`` (Optuna's journal lock, which every append holds); returns the
    bytes cut and notes them (0: the file ends cleanly)."""
    if not os.path.exists(path) or os.path.getsize(path) == 0:
        return 0
    with get_lock_file(lock), open(path, "r+b") as handle:
        size = handle.seek(0, os.SEEK_END)
        end = size
        while end > 0:
            start = max(0, end - TAIL_BLOCK_BYTES)
            handle.seek(start)
            block = handle.read(end - start)
            if end == size and block.endswith(b"\n"):
                return 0
            newline = block.rfind(b"\n")
            if newline >= 0:
                end = start + newline + 1
                break
            end = start
        handle.truncate(end)
    NOTES.warning(f"Note: --storage {path}: its last line was cut by a crash ({size - end} bytes); "
                  "dropped it and resuming from the lines before")
    return size - end


class CheckedJournalFileBackend(JournalFileBackend):
    """Optuna's ``JournalFileBackend`` whose reading names a bad line: not JSON, or an unknown
    ``op_code`` (Optuna's replay would assert)."""

    def read_logs(self, log_number_from: int):
        number = log_number_from  # lines are logs: the next one read is line number + 1
        logs = super().read_logs(log_number_from)
        while True:
            try:
                log = next(logs)
            except StopIteration:
                return
            except ValueError as exc:  # json.JSONDecodeError, or Optuna's "Invalid log format."
                raise StorageError(self._bad(number, f"is not a journal record ({exc})")) from None
            op = log.get("op_code") if isinstance(log, dict) else None
            if op not in KNOWN_OPS:
                raise StorageError(self._bad(number, f"has an unknown op_code {op!r} (Optuna knows "
                                                     f"{min(KNOWN_OPS)}-{max(KNOWN_OPS)}; written by another program?)"))
            yield log
            number += 1

    def _bad(self, number: int, what: str) -> str:
        return (f"--storage {self._file_path}: line {number + 1} {what}: the journal is damaged; "
                "restore it from a copy, or give a new --storage file")
