"""The store a benchmark's broker runs on when `--store URL` names one (instead of a throwaway SQLite directory).

`bench_store(url)` checks the URL, makes sure the store holds no task (a
benchmark measures a fresh broker, and must not touch anyone's data),
creates it through the store itself when it does not exist yet, and when
the benchmark ends removes what it created — the PostgreSQL schema (DROP
SCHEMA … CASCADE) or the SQLite directory — and nothing it did not create.
"""

from __future__ import annotations

import shutil
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator
from urllib.parse import urlencode

from kittiwake.store.location import StoreLocation, open_store, parse_store_url


class BenchStoreError(ValueError):
    """The store cannot take a benchmark: it holds tasks, or its server cannot be reached."""


def store_url(location: StoreLocation, schema: str, brokers: str) -> str:
    """The URL of a PostgreSQL store at `location`'s server with this schema and brokers mode."""
    separator = "&" if "?" in location.target else "?"
    return f"{location.target}{separator}{urlencode({'schema': schema, 'brokers': brokers})}"


def _exists(location: StoreLocation) -> bool:
    if location.kind == "sqlite":
        return Path(location.target).exists()
    try:
        import psycopg
    except ImportError:
        raise BenchStoreError("the PostgreSQL store needs psycopg: pip install 'kittiwake[postgres]'") from None
    try:
        with psycopg.connect(location.target, autocommit=True, connect_timeout=10) as db:
            row = db.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (location.schema,)).fetchone()
    except psycopg.Error as exc:
        raise BenchStoreError(f"{location.describe()}: {' '.join(str(exc).split())}") from None
    return row is not None


def _drop(location: StoreLocation) -> None:
    if location.kind == "sqlite":
        shutil.rmtree(location.target, ignore_errors=True)
        return
    import psycopg
    from psycopg import sql

    with psycopg.connect(location.target, autocommit=True, connect_timeout=10) as db:
        db.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(location.schema)))


@contextmanager
def bench_store(url: str) -> Iterator[StoreLocation]:
    """The store at `url`, empty and ready for a broker; removed afterwards if this created it.
    ValueError for a bad URL, BenchStoreError for a store holding tasks or a server out of reach,
    `errors.StorageFailure` when the store cannot be opened."""
    location = parse_store_url(url)
    created = not _exists(location)
    try:
        store = open_store(location)  # creates the schema (or directory), or upgrades it
        try:
            held = store.recover(time.time()).queues
        finally:
            store.close()
        if held:
            raise BenchStoreError(f"{location.describe()} holds tasks ({len(held)} queue(s), first {held[0].queue!r}): "
                             "benchmark on an empty store")
        yield location
    finally:
        if created:
            _drop(location)
