"""Reading the files a user names: regular files only, a size cap, strict UTF-8 and CSV.

Every file given on the command line (a model ``config.json``, hardware, space and profile YAML,
``plans.json``, the CSVs of ``compare`` and ``calibrate``, a training log) is read through
:func:`read_user_text`. A FIFO, ``/dev/zero`` or a symlink to a device is refused before a byte
is read (a FIFO would hang, a device would read until memory runs out), and so is a file larger
than the cap of its kind. A UTF-8 byte-order mark (spreadsheets write one) is dropped.
"""

from __future__ import annotations

import csv
import io
import os
import stat

from autoplan.errors import SpecError, shown

MAX_SPEC_BYTES = 16 * 2**20  # model, hardware, space, profile files and plans.json
MAX_CSV_BYTES = 64 * 2**20  # layouts for compare, measured runs for calibrate
MAX_LOG_BYTES = 512 * 2**20  # training logs (calibrate --from-log)
# Rows and cells of a CSV read (compare, calibrate): counted while reading, so a 64 MiB file of
# short rows is refused before its rows fill memory (3 GB and 267 s for compare of 10^6 rows).
MAX_CSV_ROWS = 100_000
MAX_CSV_CELLS = 4_000_000

_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def _check_regular(mode: int, size: int, where: str, max_bytes: int) -> None:
    for test, kind in _KINDS:
        if test(mode):
            raise SpecError(where, f"is {kind}, expected a regular file")
    if not stat.S_ISREG(mode):
        raise SpecError(where, "is not a regular file")
    if size > max_bytes:
        raise SpecError(where, f"file is {size:,} bytes, larger than the {max_bytes:,} bytes allowed")


def exists(path: str | os.PathLike) -> bool:
    """``os.path.exists`` that is False, not an error, for a name too long or with a NUL byte."""
    try:
        os.stat(path)
    except (OSError, ValueError):
        return False
    return True


def read_user_bytes(path: str | os.PathLike, *, max_bytes: int = MAX_SPEC_BYTES) -> bytes:
    """The bytes of a regular file of at most ``max_bytes``; anything else is a ``SpecError``."""
    where = os.fspath(path)
    try:
        info = os.stat(path)  # follows symlinks: a link to /dev/zero is a character device
        _check_regular(info.st_mode, info.st_size, where, max_bytes)
        # O_NONBLOCK: should the file be swapped for a FIFO after the check, open does not hang.
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    except OSError as exc:
        raise SpecError(where, f"cannot read file ({exc.strerror or exc})") from None
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        _check_regular(info.st_mode, info.st_size, where, max_bytes)
        try:
            data = handle.read(max_bytes + 1)
        except OSError as exc:
            raise SpecError(where, f"cannot read file ({exc.strerror or exc})") from None
    if len(data) > max_bytes:
        raise SpecError(where, f"file is larger than the {max_bytes:,} bytes allowed")
    return data


def read_user_text(path: str | os.PathLike, *, max_bytes: int = MAX_SPEC_BYTES, errors: str = "strict") -> str:
    """The UTF-8 text of a regular file (see :func:`read_user_bytes`), without a byte-order mark.

    ``errors="replace"`` reads text that is mostly UTF-8 (training logs)."""
    data = read_user_bytes(path, max_bytes=max_bytes)
    try:
        return data.decode("utf-8-sig", errors=errors)
    except UnicodeDecodeError as exc:
        raise SpecError(os.fspath(path), f"not UTF-8 text (byte {exc.start})") from None


def read_user_csv(path: str | os.PathLike, *, max_bytes: int = MAX_CSV_BYTES,
                  allow_no_rows: bool = False) -> tuple[list[str], list[dict[str, str]]]:
    """(columns, rows) of a CSV with a header: every cell as text, blank lines skipped.

    Refused with the line number: a duplicate column name and a row with more fields than the
    header (a stray comma would otherwise shift every later cell one column). A short row has
    its missing cells blank.
    """
    where = os.fspath(path)
    reader = csv.reader(io.StringIO(read_user_text(path, max_bytes=max_bytes), newline=""))
    try:
        header = next(reader, None)
        if header is None:
            raise SpecError(where, "file is empty")
        columns = [cell.strip() for cell in header]
        _check_header(columns, where)
        rows = []
        for cells in reader:
            if not cells or not any(cell.strip() for cell in cells):
                continue
            if len(rows) >= MAX_CSV_ROWS or (len(rows) + 1) * len(columns) > MAX_CSV_CELLS:
                limit = min(MAX_CSV_ROWS, MAX_CSV_CELLS // len(columns))
                raise SpecError(where, f"more than {limit:,} rows of {len(columns)} columns (at most {MAX_CSV_ROWS:,} "
                                       f"rows and {MAX_CSV_CELLS:,} cells are read): split it into files of at most "
                                       f"{limit:,} rows, each with the header line")
            if len(cells) > len(columns):
                raise SpecError(where, f"line {reader.line_num}: {len(cells)} fields, but the header has "
                                       f"{len(columns)} columns (a stray comma, or a value with a comma not in quotes?)")
            rows.append(dict(zip(columns, cells + [""] * (len(columns) - len(cells)))))
    except csv.Error as exc:
        raise SpecError(where, f"not a valid CSV (line {reader.line_num}: {exc})") from None
    if not rows and not allow_no_rows:
        raise SpecError(where, "has a header but no rows")
    return columns, rows


def _check_header(columns: list[str], where: str) -> None:
    seen: set[str] = set()
    for i, column in enumerate(columns, start=1):
        if not column:
            raise SpecError(where, f"line 1: column {i} has no name")
        if column in seen:
            raise SpecError(where, f"line 1: column {shown(column)} appears twice")
        seen.add(column)

