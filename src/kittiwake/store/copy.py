"""Copying a broker's data from one store to another (`kittiwake copy`), table by table.

What a store holds, in both SQL stores (`statements`, `postgres_statements`):

* `generations`: each dropped queue's current generation;
* `tasks`: one row per task, every field (data, headers, attempts, leases,
  parents still waited on, progress, note); only rows of each queue's current
  generation are copied (older ones are dropped queues waiting to be reaped);
* `edges`: which task waits on which (DAG edges);
* `queue_sizes`: each live queue's size and pid high-water marks (a pid
  high-water mark may lie above every pid still there: it is copied, never
  recomputed, so FIFO pids never repeat);
* `counters`: broker-wide high-water marks (lease ids …).

The schema itself is created (or upgraded) by opening each store as a broker
would. Rows are read in pages in key order, of at most `PAGE_ROWS` rows and
about `PAGE_BYTES` bytes of task data, headers and notes (a task may hold
megabytes: the sizes of a page's rows are read first, then as many rows as
fit, one row at least), so memory stays bounded whatever the store holds;
they are written in the same pages, one transaction per page, by direct SQL
on the stores' tables (COPY on PostgreSQL, executemany on SQLite), committed
durably (synchronous commits whatever the server or file says). The target
must hold no data at all: a copy never merges.

A copy stopped half-way (killed, a disk or a server failing) must not leave a
target a broker would serve as if whole (`copy_marker`): before writing any
row the copy commits the mark `copy_unfinished` in the target, and it drops it
in a transaction of its own once every page is committed and the counts per
queue are checked. A store holding the mark is refused by every opener
(`errors.CopyUnfinished`) but a copy into it, which empties it and starts
over (in the transaction that writes its own mark), so running the same copy
again is the way out.

The source must not be served by a running broker while it is copied (its
writes would be missed or half-copied), nor the target. The copy holds each
side as a broker would, so a side some broker serves is refused, and no broker
can start on either side until the copy is done: on PostgreSQL the serving
lock of a lone broker (`postgres_presence`), on SQLite the directory's lock
(`directory_lock`, in the name of "kittiwake copy").
"""

from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterator

from kittiwake.store import copy_marker
from kittiwake.store import postgres_statements as pg_sql
from kittiwake.store import statements as sqlite_sql
from kittiwake.store.directory_lock import BROKER, DirectoryInUse
from kittiwake.store.location import StoreLocation, open_store
from kittiwake.store.postgres_presence import BrokerConflict

HOLDER = "kittiwake copy"  # how the copy names itself in the directories it locks

PAGE_ROWS = 1000
PAGE_BYTES = 32 * 1024 * 1024  # task data, headers and notes read per page (one task at least, however large)
ROW_BYTES = 256  # what a task row costs besides them, counted towards PAGE_BYTES
TABLES = ("generations", "tasks", "edges", "queue_sizes", "counters")
_TASK_NAMES = [name.strip() for name in sqlite_sql.TASK_COLUMNS.split(",")]
assert _TASK_NAMES == [name.strip() for name in pg_sql.TASK_COLUMNS.split(",")]

# keyed reads of each table, in key order, one page at a time (the key is the first columns)
_KEYS = {
    "generations": ("queue",),
    "tasks": ("queue", "gen", "pid"),
    "edges": ("queue", "pid", "child_queue", "child_pid"),
    "queue_sizes": ("queue", "gen"),
    "counters": ("name",),
}
_COLUMNS = {
    "generations": ("queue", "gen"),
    "tasks": ("queue", "gen", *[n for n in _TASK_NAMES if n != "queue"]),
    "edges": ("queue", "pid", "child_queue", "child_pid"),
    "queue_sizes": ("queue", "gen", "size", "max_pid", "max_fifo_pid"),
    "counters": ("name", "value"),
}
_NOTE_AT = _COLUMNS["tasks"].index("note")

Progress = Callable[[int, int], None]  # (tasks copied so far, tasks in all)


class CopyError(ValueError):
    """The copy cannot start or did not copy what it should have; the message says why."""


@dataclass
class CopyReport:
    """What was copied: rows per table, and tasks per queue in the source and the target."""

    rows: dict[str, int] = field(default_factory=dict)
    source_queues: dict[str, int] = field(default_factory=dict)
    target_queues: dict[str, int] = field(default_factory=dict)

    @property
    def matches(self) -> bool:
        return self.source_queues == self.target_queues


class _Side:
    """One store's tables over a plain connection (placeholders, note encoding and the catalogue differ)."""

    kind: str
    mark = "?"  # the driver's placeholder
    length = "length"  # bytes of a blob
    marker_exists = copy_marker.SQLITE_EXISTS
    db: Any

    def __init__(self, location: StoreLocation) -> None:
        self.location = location

    def page(self, table: str, after: tuple | None, limit: int) -> list[tuple]:
        return [tuple(row) for row in self._after(table, ", ".join(_COLUMNS[table]), after, limit)]

    def task_sizes(self, after: tuple | None, limit: int) -> list[int]:
        """The bytes of the next `limit` task rows after the key `after` (data, headers, note and
        ROW_BYTES), read without the rows themselves (a blob's length is in its header)."""
        size = " + ".join(f"coalesce({self.length}({column}), 0)" for column in ("data", "headers", "note"))
        return [int(row[0]) + ROW_BYTES for row in self._after("tasks", size, after, limit)]

    def _after(self, table: str, select: str, after: tuple | None, limit: int) -> Any:
        """`select` of the next `limit` rows of `table` after the key `after`, in key order."""
        key = _KEYS[table]
        where = ""
        params: list[Any] = []
        if after is not None:
            where = f" WHERE ({', '.join(key)}) > ({', '.join([self.mark] * len(key))})"
            params.extend(after)
        params.append(limit)
        return self.execute(f"SELECT {select} FROM {table}{where} ORDER BY {', '.join(key)} LIMIT {self.mark}", params)

    def rows(self, table: str, page_rows: int, page_bytes: int = PAGE_BYTES) -> Iterator[list[tuple]]:
        """Every row of `table`, in key order, in pages of at most `page_rows` rows; a page of tasks
        also of at most `page_bytes` bytes (`task_sizes`), or of one task when one is larger."""
        width = len(_KEYS[table])
        after: tuple | None = None
        while True:
            limit = page_rows
            last = False  # no rows after this page
            if table == "tasks":
                sizes = self.task_sizes(after, page_rows)
                total = 0
                fit = 0
                for size in sizes:
                    total += size
                    if fit and total > page_bytes:
                        break
                    fit += 1
                limit, last = fit, fit == len(sizes) and len(sizes) < page_rows
            page = self.page(table, after, limit) if limit else []
            if not page:
                return
            yield page
            if last or len(page) < limit:
                return
            after = page[-1][:width]

    def count(self, table: str) -> int:
        return self.execute(f"SELECT count(*) FROM {table}", [])[0][0]

    def queue_counts(self) -> dict[str, int]:
        """Tasks of each queue's current generation."""
        rows = self.execute(
            "SELECT t.queue, count(*) FROM tasks t LEFT JOIN generations g ON g.queue = t.queue "
            "WHERE t.gen = coalesce(g.gen, 0) GROUP BY t.queue ORDER BY t.queue", [])
        return {queue: count for queue, count in rows}

    def execute(self, query: str, params: list[Any]) -> list[tuple]:
        raise NotImplementedError

    def insert(self, table: str, rows: list[tuple]) -> None:
        """Write one page of rows of `table`, in a transaction of its own."""
        raise NotImplementedError

    def unfinished(self) -> bool:
        """Whether the store holds the mark of a copy into it that did not finish (`copy_marker`)."""
        return copy_marker.found(self.db, self.marker_exists) is not None

    def begin_copy(self, source: str) -> None:
        """In one durable transaction, before the copy writes any row: mark the store as holding an
        unfinished copy from `source`, and empty it of what an earlier unfinished copy wrote."""
        raise NotImplementedError

    def end_copy(self) -> None:
        """Drop the mark, in a transaction of its own: every page is committed and checked."""
        raise NotImplementedError

    def encode_note(self, note: Any) -> Any:
        raise NotImplementedError

    def decode_note(self, note: Any) -> str | None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


class _SqliteSide(_Side):
    kind = "sqlite"

    def __init__(self, location: StoreLocation) -> None:
        super().__init__(location)
        self.db = sqlite3.connect(Path(location.target) / "kittiwake.db", isolation_level=None)
        self.db.execute("PRAGMA synchronous=FULL")  # each commit synced: the mark is durable before any row

    def execute(self, query: str, params: list[Any]) -> list[tuple]:
        return self.db.execute(query, params).fetchall()

    def insert(self, table: str, rows: list[tuple]) -> None:
        columns = _COLUMNS[table]
        statement = f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})"
        self.db.execute("BEGIN IMMEDIATE")
        try:
            self.db.executemany(statement, rows)
            self.db.execute("COMMIT")
        except BaseException:
            self.db.execute("ROLLBACK")
            raise

    def begin_copy(self, source: str) -> None:
        self.db.execute("BEGIN IMMEDIATE")
        try:
            self.db.execute(copy_marker.SQLITE_CREATE)
            self.db.execute(copy_marker.CLEAR)
            self.db.execute(f"INSERT INTO {copy_marker.TABLE} (source, started_at) VALUES (?, ?)",
                            (source, time.time()))
            for table in TABLES:
                self.db.execute(f"DELETE FROM {table}")
            self.db.execute("COMMIT")
        except BaseException:
            self.db.execute("ROLLBACK")
            raise

    def end_copy(self) -> None:
        self.db.execute("BEGIN IMMEDIATE")
        try:
            self.db.execute(copy_marker.DROP)
            self.db.execute("COMMIT")
        except BaseException:
            self.db.execute("ROLLBACK")
            raise

    def encode_note(self, note: str | None) -> Any:
        return note

    def decode_note(self, note: Any) -> str | None:
        return note

    def close(self) -> None:
        self.db.close()


class _PostgresSide(_Side):
    kind = "postgresql"
    mark = "%s"
    length = "octet_length"  # of a TOASTed value: read from its header, not detoasted
    marker_exists = copy_marker.POSTGRES_EXISTS

    def __init__(self, location: StoreLocation) -> None:
        import psycopg

        super().__init__(location)
        self.db = psycopg.connect(location.target, autocommit=True, application_name="kittiwake-copy")
        self.db.execute(psycopg.sql.SQL("SET search_path = {}").format(psycopg.sql.Identifier(location.schema)))
        self.db.execute("SET synchronous_commit = on")  # each commit durable: the mark before any row

    def execute(self, query: str, params: list[Any]) -> list[tuple]:
        return self.db.execute(query, params).fetchall()

    def insert(self, table: str, rows: list[tuple]) -> None:
        """One COPY per page, in a transaction of its own."""
        from psycopg import sql

        statement = sql.SQL("COPY {} ({}) FROM STDIN").format(
            sql.Identifier(table), sql.SQL(", ").join(map(sql.Identifier, _COLUMNS[table])))
        with self.db.transaction(), self.db.cursor() as cursor, cursor.copy(statement) as copy:
            for row in rows:
                copy.write_row(row)

    def begin_copy(self, source: str) -> None:
        with self.db.transaction():
            self.db.execute(copy_marker.POSTGRES_CREATE)
            self.db.execute(copy_marker.CLEAR)
            self.db.execute(f"INSERT INTO {copy_marker.TABLE} (source, started_at) VALUES (%s, %s)",
                            (source, time.time()))
            self.db.execute(f"TRUNCATE {', '.join(TABLES)}")

    def end_copy(self) -> None:
        with self.db.transaction():
            self.db.execute(copy_marker.DROP)

    def encode_note(self, note: str | None) -> Any:
        return note.encode() if note is not None else None

    def decode_note(self, note: Any) -> str | None:
        return bytes(note).decode() if note is not None else None

    def close(self) -> None:
        self.db.close()


def _exists(location: StoreLocation) -> bool:
    """Whether a Kittiwake store is already at `location` (without creating one)."""
    if location.kind == "sqlite":
        return (Path(location.target) / "kittiwake.db").is_file()
    import psycopg

    with psycopg.connect(location.target, autocommit=True, connect_timeout=10) as db:
        row = db.execute("SELECT to_regclass(%s)", (f'"{location.schema}".schema_version',)).fetchone()
    assert row is not None  # a SELECT without FROM answers one row
    return row[0] is not None


def _side(location: StoreLocation) -> _Side:
    return _SqliteSide(location) if location.kind == "sqlite" else _PostgresSide(location)


def _same_place(a: StoreLocation, b: StoreLocation) -> bool:
    if a.kind != b.kind:
        return False
    if a.kind == "sqlite":
        return Path(a.target).resolve() == Path(b.target).resolve()
    return (a.target, a.schema) == (b.target, b.schema)


def copy_store(source: StoreLocation, target: StoreLocation, *, progress: Progress | None = None,
               page_rows: int = PAGE_ROWS, page_bytes: int = PAGE_BYTES) -> CopyReport:
    """Copy every table of the store at `source` into the empty store at `target` (created if need be),
    or into a store an earlier copy did not finish (emptied first).

    Raises CopyError when the source holds no store, the target holds data, both are the same
    store, or the counts per queue differ afterwards; `errors.CopyUnfinished` when the source is
    itself the target of a copy that did not finish; `errors.StorageFailure` or the database's own
    errors when a store fails. Whatever stops it after it began writing, the target is left marked
    unfinished (`copy_marker`)."""
    if not isinstance(source, StoreLocation) or not isinstance(target, StoreLocation):
        raise ValueError("source and target must be StoreLocation (kittiwake.store.location.parse_store_url)")
    for name, value in (("page_rows", page_rows), ("page_bytes", page_bytes)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be an integer >= 1")
    if _same_place(source, target):
        raise CopyError("the source and the target are the same store")
    if not _exists(source):
        raise CopyError(f"no Kittiwake store at {source.describe()}")
    guards = []  # each side opened as a broker would: schemas created or upgraded, directories and schemas held
    try:
        guards.append(_guard(source, target=False))  # a source an unfinished copy wrote is refused
        guards.append(_guard(target, target=True))
        return _copy(source, target, page_rows, page_bytes, progress)
    except BrokerConflict as exc:
        raise CopyError(f"a broker serves {exc.schema!r}: stop it first (the copy would miss its writes)") from None
    except DirectoryInUse as exc:
        if exc.holder != BROKER:
            raise CopyError(exc.message) from None
        raise CopyError(f"a broker serves {exc.directory} ({exc.pid_text}): stop it first "
                        "(the copy would miss its writes, or write under it)") from None
    finally:
        for guard in guards:  # whatever happened: the directories and schemas are let go
            guard.close()


def _guard(location: StoreLocation, *, target: bool) -> Any:
    if location.kind == "postgresql":
        return open_store(replace(location, brokers="one"), broker=True, allow_unfinished_copy=target)
    return open_store(location, holder=HOLDER, allow_unfinished_copy=target)


def _copy(
    source: StoreLocation, target: StoreLocation, page_rows: int, page_bytes: int,
    progress: Callable[[int, int], None] | None,
) -> CopyReport:
    reader, writer = _side(source), _side(target)
    try:
        if not writer.unfinished():  # an unfinished copy's rows are emptied by begin_copy
            held = {table: writer.count(table) for table in TABLES}
            if any(held.values()):
                what = ", ".join(f"{count} {table}" for table, count in held.items() if count)
                raise CopyError(f"the target {target.describe()} is not empty ({what} rows): copy into an empty store")
        report = CopyReport(source_queues=reader.queue_counts())
        writer.begin_copy(source.describe())  # durable before any row is written
        total = sum(report.source_queues.values())
        done = 0
        if progress is not None:
            progress(0, total)
        current: dict[str, int] = {}
        for table in TABLES:
            copied = 0
            for page in reader.rows(table, page_rows, page_bytes):
                if table == "generations":
                    current.update(page)  # one row per dropped queue, as the stores themselves cache it
                elif table in ("tasks", "queue_sizes"):  # rows of dropped generations are left behind
                    page = [row for row in page if row[1] == current.get(row[0], 0)]
                if table == "tasks":
                    page = [(*row[:_NOTE_AT], writer.encode_note(reader.decode_note(row[_NOTE_AT])),
                             *row[_NOTE_AT + 1:]) for row in page]
                if page:
                    writer.insert(table, page)
                copied += len(page)
                if table == "tasks":
                    done += len(page)
                    if progress is not None:
                        progress(done, total)
            report.rows[table] = copied
        report.target_queues = writer.queue_counts()
        if report.matches:
            writer.end_copy()  # every page committed and checked: the target is whole
    finally:
        reader.close()
        writer.close()
    if not report.matches:
        differ = sorted(q for q in set(report.source_queues) | set(report.target_queues)
                        if report.source_queues.get(q) != report.target_queues.get(q))
        raise CopyError(f"tasks per queue differ after the copy in {len(differ)} queue(s), first {differ[0]!r}: "
                        f"{report.source_queues.get(differ[0], 0)} in the source, "
                        f"{report.target_queues.get(differ[0], 0)} in the target")
    return report
