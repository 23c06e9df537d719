"""`kittiwake copy --from URL --to URL`: move a broker's data to another store (`kittiwake.store.copy`).

Shows a progress bar of tasks copied, then the tasks of each queue in the
source and in the target (they must match), or with --json
{"from", "to", "rows": {table: n}, "queues": {queue: n}}. A bad URL is a
usage error (exit status 2); a store that cannot be opened or that a broker
serves, a store whose schema a newer Kittiwake wrote (`error SCHEMA_TOO_NEW: …`),
a missing source, a non-empty target or counts that differ are one line on
stderr and exit status 1; so is a source a copy into did not finish
(`error COPY_UNFINISHED: …`). A copy stopped half-way leaves its target marked
unfinished (`store.copy_marker`), refused by brokers and tools until a copy
into it runs again and completes.
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING

import click

from kittiwake import errors
from kittiwake.cli.context import CliContext

if TYPE_CHECKING:
    from kittiwake.store.copy import CopyReport
    from kittiwake.store.location import StoreLocation

_URL_HELP = "sqlite://DIR or postgresql://[USER@]HOST[:PORT]/DB[?schema=NAME] (default schema kittiwake)."


@click.command("copy")
@click.option("--from", "source_url", required=True, metavar="URL", help="The store to copy: " + _URL_HELP)
@click.option("--to", "target_url", required=True, metavar="URL",
              help="The store to fill, created if missing; it must hold no data, or only what an "
                   "unfinished copy left (emptied first): " + _URL_HELP)
@click.pass_obj
def copy(obj: CliContext | None, source_url: str, target_url: str) -> None:
    """Copy every task, lease, DAG edge, queue size and counter of a store into an empty store.

    Stop the broker serving the source first: a copy of a store in use would
    miss or half-copy its latest writes, so a store a broker serves (a
    PostgreSQL schema, an SQLite directory) is refused, and no broker starts
    on either store while the copy runs. The target is created (schema included) when missing and
    must hold no data: copy never merges. Counts per queue are checked after the copy.

    A copy that is stopped or fails half-way leaves its target marked unfinished:
    a broker, migrate or a copy from it refuses it (COPY_UNFINISHED) until you
    run the copy into it again, which empties it and starts over (or empty it
    yourself: a fresh directory, or DROP SCHEMA … CASCADE).
    """
    from kittiwake.store.copy import CopyError
    from kittiwake.store.location import parse_store_url

    locations = []
    for option, url in (("--from", source_url), ("--to", target_url)):
        try:
            locations.append(parse_store_url(url))
        except ValueError as exc:
            raise click.BadParameter(f"{option} {url!r}: {exc}", param_hint=option) from None
    source, target = locations
    as_json = obj is not None and obj.json
    try:
        report = _run(source, target, quiet=as_json)
    except (OSError, errors.StorageFailure, CopyError, ValueError) as exc:
        what = exc.message if isinstance(exc, errors.KittiwakeError) else exc
        click.echo(f"kittiwake copy: {what}", err=True)
        sys.exit(1)
    except Exception as exc:  # the database's own errors (sqlite3, psycopg): one line, not a traceback
        if type(exc).__module__.split(".")[0] not in ("sqlite3", "psycopg"):
            raise
        message = " ".join(str(exc).split()) or type(exc).__name__
        click.echo(f"kittiwake copy: {message}", err=True)
        sys.exit(1)
    if as_json:
        click.echo(json.dumps({"from": source.describe(), "to": target.describe(), "rows": report.rows,
                               "queues": report.target_queues}))
        return
    _show(source.describe(), target.describe(), report)


def _run(source: StoreLocation, target: StoreLocation, *, quiet: bool) -> CopyReport:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    from kittiwake.store.copy import copy_store

    if quiet:
        return copy_store(source, target)
    bar = Progress(TextColumn("copying tasks"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
    task = bar.add_task("tasks", total=None)

    def progress(done: int, total: int) -> None:
        if not bar.live.is_started:  # shown once both stores are open and checked
            bar.start()
        bar.update(task, completed=done, total=total)

    try:
        return copy_store(source, target, progress=progress)
    finally:
        if bar.live.is_started:
            bar.stop()


def _show(source: str, target: str, report: CopyReport) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{source} → {target}")
    table.add_column("queue")
    table.add_column("tasks in source", justify="right")
    table.add_column("tasks in target", justify="right")
    for queue, count in report.source_queues.items():
        table.add_row(queue, f"{count:,}", f"{report.target_queues.get(queue, 0):,}")
    console = Console()
    if not console.is_terminal:  # a log file or a pipe: room for the whole table
        console = Console(width=max(console.width, 160))
    console.print(table)
    rows = ", ".join(f"{count:,} {name}" for name, count in report.rows.items())
    console.print(f"copied {rows}; tasks per queue match")
