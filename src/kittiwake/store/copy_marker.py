"""The mark an unfinished `kittiwake copy` leaves in its target, and the check every opener makes.

A copy (`store.copy`) writes its target table by table, one transaction per page: tasks first,
then queue sizes and counters. Stopped half-way, the target would hold tasks without the rows a
broker recovers from (queue sizes, the lease-id high-water mark, generations), and a broker on it
would start without complaint and go wrong: queues missing from stats, leases not found, an
enqueue of an existing pid overwriting the task, lease ids repeated. So, before it writes any row,
the copy commits a table `copy_unfinished` in the target holding one row (the source, the start
time), and drops it only once every row is committed and the counts per queue checked.

Opening a store that holds it — a broker, `kittiwake migrate`, a copy from it — raises
`errors.CopyUnfinished`, unless the opener is a copy into it (`allow_unfinished_copy`), which
empties the store and starts over. The check reads one catalogue row, on either store.
"""

from __future__ import annotations

import time
from typing import Any

from kittiwake import errors

TABLE = "copy_unfinished"

SQLITE_CREATE = f"CREATE TABLE IF NOT EXISTS {TABLE} (source TEXT NOT NULL, started_at REAL NOT NULL)"
SQLITE_EXISTS = f"SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = '{TABLE}'"
POSTGRES_CREATE = f"CREATE TABLE IF NOT EXISTS {TABLE} (source text NOT NULL, started_at float8 NOT NULL)"
POSTGRES_EXISTS = f"SELECT to_regclass('{TABLE}')"  # in the search path: the store's schema
LOAD = f"SELECT source, started_at FROM {TABLE} ORDER BY started_at DESC LIMIT 1"
CLEAR = f"DELETE FROM {TABLE}"
DROP = f"DROP TABLE {TABLE}"


def refusal(store: str, source: str, started_at: float, emptied: str) -> errors.CopyUnfinished:
    """The error for the store named `store` holding the mark of a copy from `source`; `emptied`
    says how such a store is emptied."""
    when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(started_at))
    return errors.CopyUnfinished(
        f"{store}: a kittiwake copy into it from {source} started at {when} and did not finish (it was "
        "stopped or failed half-way, or is still running), so it holds only part of the data: run the copy "
        f"again (a copy into it empties it and starts over), or empty it ({emptied}) and copy again"
    )


def found(db: Any, exists: str) -> tuple[str, float] | None:
    """(source, started_at) of the mark in the store `db` (a DB-API connection), or None; `exists`
    is SQLITE_EXISTS or POSTGRES_EXISTS."""
    row = db.execute(exists).fetchone()
    if row is None or row[0] is None:
        return None
    mark = db.execute(LOAD).fetchone()
    return ("an unknown source", 0.0) if mark is None else (str(mark[0]), float(mark[1]))


def refuse_unfinished(db: Any, exists: str, store: str, emptied: str) -> None:
    """Raise `errors.CopyUnfinished` when the store `db` holds the mark of an unfinished copy."""
    mark = found(db, exists)
    if mark is not None:
        raise refusal(store, *mark, emptied)
