"""Tables and lines as rich prints them on a stream that is not a terminal, without importing rich.

Importing rich's table and console costs ~50-100 ms and drawing one ~25 ms, a quarter of the
headline command's time; the output that goes to a pipe or a file (scripts, CI, ``| less``) is
plain text that is cheap to draw. :func:`render_table` draws what ``rich.table.Table`` (box
HEAVY_HEAD, padding 0 1, header on, not expanded) prints at a given width, and
:func:`plain_line` what ``Console.print`` prints for one line, both only where that is simple:
every cell fits without wrapping, the text holds no rich markup (``[``) or emoji code
(``:name:``), every character is one terminal cell wide and the stream is UTF-8 and not a
terminal. Elsewhere they return None and the caller draws with rich, so the bytes are rich's
either way (tests/unit/cli/test_text_table.py compares the two).
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass

# rich's HEAVY_HEAD box: (left, horizontal or padding, divider, right) of each kind of line
_TOP, _HEAD, _HEAD_RULE, _BODY, _BOTTOM = "┏━┳┓", "┃ ┃┃", "┡━╇┩", "│ ││", "└─┴┘"
# Characters one cell wide in rich's cell_len: printable ASCII and the few Latin-1 signs used.
_ONE_CELL = re.compile(r"[\x20-\x7e\u00b1\u00b5\u00b7\n]*")
_RICH_SYNTAX = re.compile(r"\[|:\S*:")  # markup tags, emoji codes (':smile:')


@dataclass(frozen=True)
class TextColumn:
    """A column: header (lines split at '\\n'), 'left' or 'right' justified, minimum width in
    cells (without padding)."""

    header: str
    justify: str = "left"
    min_width: int = 0


def may_be_terminal(stream) -> bool:
    """True unless rich would treat ``stream`` as a plain file: not a terminal, and none of the
    variables that make rich treat it as one (TTY_COMPATIBLE, FORCE_COLOR) is set."""
    if os.environ.get("TTY_COMPATIBLE", "") or os.environ.get("FORCE_COLOR") is not None:
        return True
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def is_plain_stream(stream) -> bool:
    """Whether rich writes to ``stream`` without styles and with its Unicode box: not a terminal,
    an encoding whose name starts with 'utf' (else rich draws an ASCII box), not Windows (whose
    legacy console gets other box characters)."""
    encoding = (getattr(stream, "encoding", "utf-8") or "utf-8").lower()
    return sys.platform != "win32" and encoding.startswith("utf") and not may_be_terminal(stream)


def _simple(text: str) -> bool:
    """Text that rich prints as written: one-cell characters, no markup or emoji code, no
    whitespace at either end of a line, no line break at the end (rich drops that last line)."""
    return (_ONE_CELL.fullmatch(text) is not None and not text.endswith("\n") and _RICH_SYNTAX.search(text) is None
            and all(line == line.strip() for line in text.split("\n")))


def plain_line(text: str, width: int) -> str | None:
    """``text`` as ``Console(width=width).print(text)`` writes it (with its line end), or None
    where rich would change it (wrap, markup, emoji)."""
    if "\n" in text or len(text) > width or not _simple(text):
        return None
    return text + "\n"


def _cell_lines(text: str, width: int, justify: str, height: int, bottom: bool) -> list[str]:
    """The lines of one padded cell: justified in ``width - 2``, aligned top (body) or bottom
    (header) in ``height`` lines."""
    inner = width - 2
    lines = [(f" {line.rjust(inner)} " if justify == "right" else f" {line.ljust(inner)} ")
             for line in text.split("\n")]
    blank = [" " * width] * (height - len(lines))
    return blank + lines if bottom else lines + blank


def _row_lines(cells: Sequence[str], columns: Sequence[TextColumn], widths: list[int],
               box: str, bottom: bool) -> list[str]:
    height = max(len(cell.split("\n")) for cell in cells)
    drawn = [_cell_lines(cell, w, c.justify, height, bottom) for cell, c, w in zip(cells, columns, widths)]
    return [box[0] + box[2].join(parts) + box[3] for parts in zip(*drawn)]


def _rule(widths: list[int], box: str) -> str:
    return box[0] + box[2].join(box[1] * w for w in widths) + box[3]


def render_table(title: str, columns: Sequence[TextColumn], rows: Sequence[Sequence[str]],
                 width: int) -> str | None:
    """The table as rich prints ``Table(title=title)`` with these columns and rows on a console
    ``width`` cells wide that is not a terminal, or None where rich would do more than pad and
    justify (a table or title wider than ``width``, markup, emoji codes, wide characters)."""
    texts = [title, *(c.header for c in columns), *(cell for row in rows for cell in row)]
    if not columns or any(len(row) != len(columns) for row in rows) or not all(map(_simple, texts)):
        return None
    widths = [2 + max(c.min_width, *(len(line) for text in (c.header, *(row[i] for row in rows))
                                     for line in text.split("\n")))
              for i, c in enumerate(columns)]
    table_width = sum(widths) + len(columns) + 1
    if table_width > width or len(title) > table_width or "\n" in title:
        return None
    lines = []
    if title:
        left = (table_width - len(title)) // 2
        lines.append(" " * left + title + " " * (table_width - len(title) - left))
    lines.append(_rule(widths, _TOP))
    lines += _row_lines([c.header for c in columns], columns, widths, _HEAD, bottom=True)
    lines.append(_rule(widths, _HEAD_RULE))
    for row in rows:
        lines += _row_lines(row, columns, widths, _BODY, bottom=False)
    lines.append(_rule(widths, _BOTTOM))
    return "\n".join(lines) + "\n"


def rich_table(title: str, columns: Sequence[TextColumn], rows: Sequence[Sequence[str]],
               no_wrap: Sequence[bool]):
    """The same table as a ``rich.table.Table`` (for terminals and what :func:`render_table`
    declines); ``no_wrap`` per column."""
    from rich.table import Table

    table = Table(title=title or None)
    for column, fixed in zip(columns, no_wrap):
        table.add_column(column.header, justify=column.justify, no_wrap=fixed,
                         min_width=column.min_width or None)
    for row in rows:
        table.add_row(*row)
    return table
