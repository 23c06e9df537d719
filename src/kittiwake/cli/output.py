"""How the CLI prints results: rich tables for people, JSON for programs.

JSON output (`--json`) is the records the client returned, as maps, with one
rule for task data, which is bytes: when the bytes are valid UTF-8 they are
printed as that text with `"data_encoding": "utf-8"`; otherwise as base64
with `"data_encoding": "base64"`. Times are epoch seconds (floats), durations
seconds, rates per second.

Tables show data the same way (base64 marked with a `base64:` prefix),
shortened to fit, and times relative to now ("in 29.8s", "3.1s ago").
"""

from __future__ import annotations

import json
import time
from typing import Any, Iterable, Sequence

import click

from kittiwake.json_records import data_text, to_json_value

DATA_CELL_CHARS = 48


def print_json(value: Any) -> None:
    click.echo(json.dumps(to_json_value(value), indent=2, ensure_ascii=False))


def data_cell(data: bytes, width: int = DATA_CELL_CHARS) -> str:
    text, encoding = data_text(data)
    text = text if encoding == "utf-8" else f"base64:{text}"
    text = text.replace("\n", "\\n")
    return text if len(text) <= width else text[: width - 1] + "…"


def relative_time(epoch_secs: float | None, now: float | None = None) -> str:
    """'in 4.2s' for the future, '4.2s ago' for the past, '-' for none."""
    if epoch_secs is None:
        return "-"
    delta = epoch_secs - (time.time() if now is None else now)
    return f"in {format_secs(delta)}" if delta >= 0 else f"{format_secs(-delta)} ago"


def format_secs(secs: float | None) -> str:
    if secs is None:
        return "-"
    if secs < 120:
        return f"{secs:.1f}s"
    if secs < 7200:
        return f"{secs / 60:.1f}m"
    return f"{secs / 3600:.1f}h"


def format_rate(*per_sec: float) -> str:
    """Rates per second, e.g. over 1 and 5 minutes: '0.05/s / 0.01/s'."""
    return " / ".join(f"{rate:.2f}/s" for rate in per_sec)


def print_table(title: str | None, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    """A rich table on stdout; ids and pids are never shortened so they can be copied."""
    from rich.console import Console  # rich is slow to import: only when a table is printed
    from rich.table import Table

    table = Table(title=title, title_justify="left", show_edge=False, pad_edge=False)
    for column in columns:
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(*("-" if cell is None else str(cell) for cell in row))
    Console(soft_wrap=False).print(table)


def print_fields(title: str, fields: Sequence[tuple[str, Any]]) -> None:
    """A two-column table of one record's fields."""
    print_table(title, ("field", "value"), fields)


def say(message: str) -> None:
    """One line for people (not printed in --json mode by the callers)."""
    click.echo(message)
