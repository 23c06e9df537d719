"""`kittiwake migrate --store URL`: create or upgrade a store's schema, then print its version.

A broker upgrades its store when it starts; this command does it ahead of
time (say, before several brokers start on one database), and refuses a schema
written by a newer Kittiwake. Prints `STORE: schema version N (was M)` — M is
0 for a store created just now — or, with --json, {"store", "version", "was"}.
Errors are one line on stderr and exit status 1; so is a data directory
another process has open (a broker serving it: `store.directory_lock`), and a
schema written by a newer Kittiwake (`error SCHEMA_TOO_NEW: …`, nothing changed),
and a store a `kittiwake copy` into did not finish (`error COPY_UNFINISHED: …`).
"""

from __future__ import annotations

import json
import sys

import click

from kittiwake import errors
from kittiwake.cli.context import CliContext


@click.command("migrate")
@click.option("--store", "store_url", required=True, metavar="URL",
              help="sqlite://DIR or postgresql://[USER@]HOST[:PORT]/DB[?schema=NAME] (default schema kittiwake).")
@click.pass_obj
def migrate(obj: CliContext | None, store_url: str) -> None:
    """Create or upgrade the schema of a store and print its version."""
    from kittiwake.store.location import open_store, parse_store_url

    try:
        location = parse_store_url(store_url)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--store") from None
    try:
        was = _sqlite_version(location.target) if location.kind == "sqlite" else None
        store = open_store(location, holder="kittiwake migrate")
    except (OSError, errors.StorageFailure, ValueError) as exc:
        what = exc.message if isinstance(exc, errors.KittiwakeError) else exc
        click.echo(f"kittiwake migrate: {location.describe()}: {what}", err=True)
        sys.exit(1)
    try:
        if location.kind == "sqlite":
            from kittiwake.store.statements import SCHEMA_VERSION

            version = SCHEMA_VERSION
        else:
            version, was = store.schema_version, store.version_found
    finally:
        store.close()
    if obj is not None and obj.json:
        click.echo(json.dumps({"store": location.describe(), "version": version, "was": was}))
    else:
        click.echo(f"{location.describe()}: schema version {version} (was {was})")


def _sqlite_version(directory: str) -> int:
    """The schema version of the SQLite store in `directory` before it is opened (0: none yet)."""
    import sqlite3
    from pathlib import Path

    path = Path(directory) / "kittiwake.db"
    if not path.exists():
        return 0
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return db.execute("PRAGMA user_version").fetchone()[0]
    except sqlite3.Error:
        return 0
    finally:
        db.close()
