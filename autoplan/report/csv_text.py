"""CSV text from column arrays, byte for byte what pandas' ``to_csv`` writes, without pandas.

pandas writes ~10^4 rows/s with 50 columns and costs ~0.15 s to import; a search's plans.csv
(up to 10^5 rows) is written here from the arrays instead: floats with ``float_format``
(``%.9g``: NaN as an empty cell, infinities as ``inf``), integers as integers, booleans as
True/False, text quoted only where it holds a comma, a quote or a line break (the ``csv``
module's QUOTE_MINIMAL, as pandas), and a text cell a spreadsheet would run as a formula
neutralised (``spreadsheet_safe``). tests/unit/report/test_csv_text.py checks it against pandas.

Speed: most columns of a plans table repeat a few values (the knobs, the setup, the stage), so
each distinct value of a column is formatted once (distinct by its bits, so -0.0 stays '-0') and
the cells are gathered from those; the rows are joined with ``str.join`` rather than the ``csv``
writer, quoting being decided per cell of the text columns only.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

_QUOTE_CHARS = (",", '"', "\n", "\r")
# A text cell a spreadsheet would run as a formula (OWASP, "CSV Injection"): one that starts with
# one of these and is not a number gets a leading apostrophe, which spreadsheets show as text.
_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def spreadsheet_safe(text: str) -> str:
    """``text`` with a leading ' where a spreadsheet would take it for a formula ('=1+1',
    '@SUM(...)', '-cmd'); numbers such as '-0.5' and every other text unchanged."""
    if not text.startswith(_FORMULA_STARTS):
        return text
    try:
        float(text)
        return text
    except ValueError:
        return "'" + text


def safe_frame(frame):
    """A pandas frame whose text cells are ``spreadsheet_safe`` (for ``to_csv``)."""
    out = frame.copy()
    for column in out.columns:
        if out[column].dtype == object or str(out[column].dtype).startswith("str"):
            out[column] = out[column].map(lambda v: spreadsheet_safe(v) if isinstance(v, str) else v)
    out.columns = [spreadsheet_safe(str(c)) for c in out.columns]
    return out


def records_csv(columns: Sequence[str], records: Iterable[Mapping[str, Any]]) -> str:
    """CSV text of ``records`` (a header of ``columns``; keys not in it left out, missing cells
    blank), every text cell and column name ``spreadsheet_safe``: the one writer of dict rows
    (estimate, explain, rerank and calibrate's csv, MEASURED.csv)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow([spreadsheet_safe(str(c)) for c in columns])
    for record in records:
        cells = (record.get(c, "") for c in columns)
        writer.writerow([spreadsheet_safe(v) if isinstance(v, str) else v for v in cells])
    return buffer.getvalue()


def _quoted(text: str) -> str:
    """A cell as QUOTE_MINIMAL writes it: quoted (quotes doubled) when it holds a delimiter,
    a quote or a line break."""
    if any(c in text for c in _QUOTE_CHARS):
        return '"' + text.replace('"', '""') + '"'
    return text


def _distinct_cells(values: np.ndarray, key: np.ndarray, cells) -> list[str]:
    """``cells(values)`` (a list of texts) of every value, formatting each distinct ``key`` (the
    values' bits) once."""
    if len(values) < 64:
        return cells(values)
    _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    return np.array(cells(values[first]), dtype=object)[inverse.reshape(-1)].tolist()


def _float_cells(float_format: str):
    """A function from a float array to its cells: ``float_format``, NaN as an empty cell."""
    def cells(values: np.ndarray) -> list[str]:
        # one format operation for the whole column (~30% faster than one per value); the
        # separator cannot occur in a formatted number
        texts = ((float_format + "\x00") * len(values) % tuple(values.tolist())).split("\x00")
        texts.pop()
        for i in np.flatnonzero(np.isnan(values)).tolist():
            texts[i] = ""
        return texts
    return cells


def column_text(values: np.ndarray, float_format: str) -> list[str]:
    """The cells of one column as text (quoted where the csv module would quote them)."""
    if values.dtype == bool:
        return np.where(values, "True", "False").astype(object).tolist()
    if values.dtype.kind in "iu":
        return _distinct_cells(values, values, lambda v: list(map(str, v.tolist())))
    if values.dtype.kind == "f":
        bits = np.ascontiguousarray(values, dtype=np.float64).view(np.uint64)
        return _distinct_cells(values, bits, _float_cells(float_format))
    cells = values.tolist()
    texts = {v: _quoted("" if v is None else spreadsheet_safe(str(v))) for v in set(cells)}
    return [texts[v] for v in cells]


def csv_text(columns: Mapping[str, np.ndarray], float_format: str = "%.9g") -> str:
    """A header line and one line per row, ``\\n`` line ends."""
    header = ",".join(_quoted(spreadsheet_safe(str(name))) for name in columns)
    cells = [column_text(np.asarray(v), float_format) for v in columns.values()]
    if not cells or not cells[0]:
        return header + "\n"
    return header + "\n" + "\n".join(map(",".join, zip(*cells))) + "\n"
