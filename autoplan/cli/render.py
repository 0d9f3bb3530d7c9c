"""Output formatting shared by commands: rich tables, CSV and JSON of flat records."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

import click


def _plain(value: Any) -> Any:
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            return None
        if value.is_integer() and abs(value) < 2**53:
            return int(value)
    return value


def emit_records(records: Sequence[dict[str, Any]], output_format: str, *, columns: Sequence[str],
                 title: str = "", headers: dict[str, str] | None = None,
                 formatters: dict[str, Any] | None = None, json_key: str | None = None) -> None:
    """Print ``records`` as a rich table (``columns``), CSV (every key) or JSON."""
    if output_format == "json":
        payload: Any = [{k: _plain(v) for k, v in r.items()} for r in records]
        if json_key:
            payload = {json_key: payload}
        click.echo(json.dumps(payload, indent=2))
        return
    if output_format == "csv":
        from autoplan.report.csv_text import records_csv

        keys = list(records[0].keys()) if records else list(columns)
        click.echo(records_csv(keys, ({k: _plain(v) for k, v in r.items()} for r in records)), nl=False)
        return
    from rich.table import Table

    table = Table(title=title or None)
    headers = headers or {}
    formatters = formatters or {}
    for column in columns:
        table.add_column(headers.get(column, column), overflow="fold")
    for record in records:
        table.add_row(*[formatters.get(c, str)(record.get(c, "")) for c in columns])
    stdout_console(width=200).print(table)


def stdout_console(**kwargs):
    """A rich Console on stdout whose reader leaving raises ``BrokenPipeError`` (the CLI exits
    0 quietly, as `head` expects) instead of rich's ``SystemExit(1)``."""
    from rich.console import Console

    class _Console(Console):
        def on_broken_pipe(self) -> None:
            self.quiet = True
            raise BrokenPipeError

    return _Console(**kwargs)
