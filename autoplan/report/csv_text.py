"""CSV text from column arrays, byte for byte what pandas' ``to_csv`` writes, without pandas.

pandas writes ~10^4 rows/s with 50 columns and costs ~0.15 s to import; a search's plans.csv
(up to 10^5 rows) is written here from the arrays instead: floats with ``float_format``
(``%.9g``: NaN as an empty cell, infinities as ``inf``), integers as integers, booleans as
True/False, text quoted only where it holds a comma, a quote or a line break (the ``csv``
module's QUOTE_MINIMAL, as pandas). tests/unit/report/test_csv_text.py checks it against pandas.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Mapping

import numpy as np


def column_text(values: np.ndarray, float_format: str) -> list[str]:
    """The cells of one column as text (unquoted)."""
    if values.dtype == bool:
        return ["True" if v else "False" for v in values.tolist()]
    if values.dtype.kind in "iu":
        return [str(v) for v in values.tolist()]
    if values.dtype.kind == "f" and not np.isnan(values).any():
        return [float_format % v for v in values.tolist()]
    if values.dtype.kind == "f":
        return ["" if math.isnan(v) else float_format % v for v in values.tolist()]
    return ["" if v is None else str(v) for v in values.tolist()]


def csv_text(columns: Mapping[str, np.ndarray], float_format: str = "%.9g") -> str:
    """A header line and one line per row, ``\\n`` line ends."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(list(columns))
    writer.writerows(zip(*(column_text(np.asarray(v), float_format) for v in columns.values())))
    return buffer.getvalue()
