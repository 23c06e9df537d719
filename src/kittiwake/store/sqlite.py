"""The embedded store: SQLite in WAL mode with group commit.

Durability. The broker applies every mutation of a batch of requests inside
one open transaction and calls `commit()` once for the batch before any reply
goes out (group commit: one fsync for many requests, and the batch grows on
its own with load because requests pile up while a commit runs).

* `durability="fsync"` (default): `synchronous=FULL`; WAL fsynced at every
  commit. An ok reply means the change survives a power loss.
* `durability="os"`: `synchronous=NORMAL`; the commit reaches the OS but is
  fsynced only at checkpoints. Survives a process crash (SIGKILL), not a power
  loss.

Writes are buffered in Python and flushed with `executemany` in runs of the
same statement, at the commit or before a read that needs them, so reads see
all writes (the `TaskStore` contract): a scan flushes first; `load_task` only
when something pending touches that row (or drops its queue), and
`load_available` only when something pending touches a pid above the one it
reads from. So a pass whose enqueues check their pids, or whose joins look up
tokens of earlier passes, row by row, flushes once, at its commit, not once
per lookup. Memory: SQLite's page cache is bounded by `cache_mb`; the engine's
own head cache is bounded separately, so neither grows with the number of
tasks.

Commit log (`commit_log=True`, the broker's `--commit-log on`; TaskMaster §5.3).
The pass's commit is one record of its mutations, with the next ticket,
appended to `commit.log` in the directory and synced (`log_file`; format in
`commit_log`): an ok reply means the change is on disk, in the log. The
mutations stay pending in memory and are flushed into the open SQLite
transaction only when a read needs them (`load_task` of a row nothing pending
touches needs none). A checkpoint (after `checkpoint_mutations` logged
mutations, 64 MiB of log, or `checkpoint_secs`) flushes what is logged,
coalesced (`coalesce`: a task put and deleted since the last flush never
reaches the B-tree), writes the last ticket in the same transaction
(`commit_log_state`: the replay-safe ticket) and commits with the store's
durability; only then does the log begin a new round. Opening the directory,
with the log or without, replays the records a log there holds past the
stored ticket and checkpoints them, so recovery is the database plus at most
one checkpoint's worth of log, and a tool that opens the directory sees every
acknowledged change. `rollback()` drops the open transaction and queues the
logged mutations again; a failed append is cut from the log (its outcome
then known: not applied); a failed checkpoint fails no pass (the log holds
it) and is tried again a second later; past `MAX_UNCHECKPOINTED` logged
mutations a pass waits for a checkpoint or is refused. `durability="fsync"`
syncs each record (and the checkpoint's commit); `"os"` only writes them.

Generations: `delete_queue` writes one row (queue → gen + 1); reads filter on
the current generation; `reap()` deletes old-generation rows in chunks from
the broker's housekeeping tick (TaskMaster §5.2).

Failures. Every error of SQLite or the file system, at open, read, commit,
rollback or reap, leaves as `errors.StorageFailure` naming its fault
(`store.faults`); a failed commit says whether its outcome is known. Nothing
above the stores sees `sqlite3`.

One opener. A store opened with a `holder` (as `location.open_store` opens
it for a broker, a copy or a migrate) locks its directory until `close()`
(`directory_lock`): a second such opener is refused with `DirectoryInUse`.

Schema. `PRAGMA user_version` holds the version. Opening a store at an older
version upgrades it in one transaction; a newer version (written by a newer
Kittiwake) is refused with `errors.SchemaTooNew`, and nothing is changed.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import time
from pathlib import Path
from typing import Callable, Sequence

from kittiwake.engine.mutations import (
    DeleteEdges,
    DeleteTask,
    DropQueue,
    Mutation,
    PutEdge,
    PutTask,
    SetCounter,
    SetLease,
    SetWaiting,
)
from kittiwake.engine.storage import QueueSummary, Recovery
from kittiwake.model import Task
from kittiwake.store import commit_log, copy_marker, log_file
from kittiwake.store import statements as sql
from kittiwake.store.coalesce import coalesce
from kittiwake.store.directory_lock import DirectoryLock, lock_directory
from kittiwake.store.durable_directory import make_durable_directory
from kittiwake import errors
from kittiwake.errors import StorageFailure
from kittiwake.store.faults import storage_failure
from kittiwake.store.rows import encode_headers as _encode_headers
from kittiwake.store.rows import is_fifo as _is_fifo
from kittiwake.store.rows import snapshot as _snapshot
from kittiwake.store.rows import task_from_row as _row_to_task

_STATEMENTS = {
    PutTask: sql.INSERT_TASK,
    SetLease: sql.SET_LEASE,
    SetWaiting: sql.SET_WAITING,
    SetCounter: sql.SET_COUNTER,
    PutEdge: sql.PUT_EDGE,
    DeleteEdges: sql.DELETE_EDGES,
    DeleteTask: sql.DELETE_TASK,
}

DURABILITY_LEVELS = ("fsync", "os")
CHECKPOINT_MUTATIONS = 50_000  # logged mutations that start a checkpoint
CHECKPOINT_LOG_BYTES = 64 * 1024 * 1024  # or log bytes
CHECKPOINT_SECS = 1.0  # or seconds since the last one (TaskMaster §5.3 writes its minimum ticket every 500 ms)
MAX_UNCHECKPOINTED = 8 * CHECKPOINT_MUTATIONS  # checkpoints failing: past this, a pass waits for one
CHECKPOINT_RETRY_SECS = 1.0  # after a failed checkpoint

log = logging.getLogger("kittiwake.store")
_DISK_ERRORS = (sqlite3.Error, OSError)  # what a failing disk raises; wrapped as StorageFailure


def _statements(script: str) -> list[str]:
    """Split a script of CREATE statements (triggers included) into single statements."""
    statements: list[str] = []
    current = ""
    for line in script.splitlines(keepends=True):
        current += line
        if sqlite3.complete_statement(current):
            statements.append(current.strip())
            current = ""
    return [statement for statement in statements if statement]


DATABASE_FILE = "kittiwake.db"
"""The database's file in a store's directory."""

class SqliteStore:
    def __init__(
        self, directory: str | os.PathLike[str], *, durability: str = "fsync", cache_mb: int = 64,
        holder: str | None = None, commit_log: bool = False, log_fault: log_file.FaultHook | None = None,
        checkpoint_mutations: int = CHECKPOINT_MUTATIONS, checkpoint_secs: float = CHECKPOINT_SECS,
        monotonic_clock: Callable[[], float] = time.monotonic, log_preallocate: int = log_file.PREALLOCATE_BYTES,
        allow_unfinished_copy: bool = False,
    ) -> None:
        """Open (creating or upgrading) the store in `directory`. With `holder` ("broker", "kittiwake
        copy" ...) the directory is locked in its name while the store is open (`directory_lock`), and a
        directory another opener holds raises `DirectoryInUse`; without, nothing is locked (tests, and
        tools that read a stopped broker's file). A store a copy into did not finish raises
        `errors.CopyUnfinished` (`copy_marker`), unchanged, unless `allow_unfinished_copy` (the copy)."""
        if durability not in DURABILITY_LEVELS:
            raise ValueError(f"durability must be one of {DURABILITY_LEVELS}")
        self.directory = Path(directory)
        self.path = self.directory / DATABASE_FILE
        self.durability = durability
        self._lock: DirectoryLock | None = None
        self._log: log_file.LogFile | None = None
        db: sqlite3.Connection | None = None
        try:
            make_durable_directory(self.directory)  # acknowledged tasks must not vanish with their directory's name
            if holder is not None:
                self._lock = lock_directory(self.directory, holder)  # before SQLite touches a served file
            db = self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=" + ("FULL" if durability == "fsync" else "NORMAL"))
            db.execute(f"PRAGMA cache_size=-{int(cache_mb) * 1024}")
            db.execute("PRAGMA temp_store=MEMORY")
            db.execute("PRAGMA wal_autocheckpoint=4000")
            if not allow_unfinished_copy:
                copy_marker.refuse_unfinished(db, copy_marker.SQLITE_EXISTS, str(self.directory),
                                              "delete the directory, or copy into a new one")
            self._migrate()
            self._gens: dict[str, int] = dict(db.execute(sql.LOAD_GENERATIONS).fetchall())
            self._pending: list[Mutation] = []
            self._in_transaction = False
            self.commits = 0
            self._touched: set[tuple[str, str]] = set()  # (queue, pid) with mutations not yet flushed
            self._touched_top: dict[str, str] = {}  # queue -> the highest pid among them
            self._dropping: set[str] = set()  # queues with a drop not yet flushed
            # the commit log (`commit_log`, `log_file`): `_log` is None unless this store writes through one
            self._pass: list[Mutation] = []  # written since the last commit: the next record
            self._logged: list[Mutation] = []  # in the log, not yet in the database (checkpoint)
            self.checkpoint_mutations = checkpoint_mutations
            self.checkpoint_secs = checkpoint_secs
            self._clock = monotonic_clock
            self._last_checkpoint = monotonic_clock()
            self._checkpoint_retry_at = 0.0
            self.checkpoints = 0
            self.replayed = 0  # records applied from a log found at open
            self._open_log(commit_log, log_fault, log_preallocate)
        except BaseException as exc:
            if self._log is not None:
                self._log.close()
            if db is not None:
                db.close()
            if self._lock is not None:
                self._lock.release()
            if isinstance(exc, _DISK_ERRORS):
                raise storage_failure(exc) from exc
            raise

    def _migrate(self) -> None:
        """Create or upgrade the schema to `SCHEMA_VERSION` in one transaction."""
        db = self._db
        version = db.execute("PRAGMA user_version").fetchone()[0]
        if version > sql.SCHEMA_VERSION:
            raise errors.SchemaTooNew(
                f"{self.path} has schema version {version}; this Kittiwake knows up to {sql.SCHEMA_VERSION}: "
                "upgrade Kittiwake"
            )
        if version == sql.SCHEMA_VERSION:
            return
        db.execute("BEGIN IMMEDIATE")
        try:
            for statement in _statements(sql.SCHEMA + sql.SCHEMA_V1):
                db.execute(statement)
            if version == 0:
                db.execute(sql.BACKFILL_QUEUE_SIZES)
                db.execute(sql.BACKFILL_LEASE_COUNTER)
            db.execute(f"PRAGMA user_version={sql.SCHEMA_VERSION}")
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise

    # -------------------------------------------------------------- writes

    def write(self, mutations: Sequence[Mutation]) -> None:
        # a PutTask holds the caller's Task, which it may change before the flush:
        # keep the row as it was written (the memory store copies it too)
        written = [PutTask(_snapshot(m.task)) if type(m) is PutTask else m for m in mutations]
        self._pending.extend(written)
        if self._log is not None:
            self._pass.extend(written)
        self._track(written)

    def _track(self, mutations: Sequence[Mutation]) -> None:
        """Note the rows and queues unflushed mutations change: `load_task` of any other row, and
        `load_available` above the highest pid they touch in its queue, need no flush."""
        touched, top = self._touched, self._touched_top
        for m in mutations:
            if isinstance(m, (SetLease, DeleteTask, SetWaiting)):
                queue, pid = m.queue, m.pid
            elif isinstance(m, PutTask):
                queue, pid = m.task.queue, m.task.pid
            else:
                if isinstance(m, DropQueue):
                    self._dropping.add(m.queue)
                continue
            touched.add((queue, pid))
            if pid > top.get(queue, ""):
                top[queue] = pid

    def _begin(self) -> None:
        if not self._in_transaction:
            self._db.execute("BEGIN")
            self._in_transaction = True

    def _flush(self) -> None:
        pending = self._pending
        if not pending:
            return
        self._pending = []
        if self._log is not None:
            pending = coalesce(pending)  # what cancelled out since the last flush never reaches the B-tree
        self._touched.clear()
        self._touched_top.clear()
        self._dropping.clear()
        self._begin()
        db = self._db
        gens = self._gens
        run_kind: type | None = None
        run: list[tuple] = []

        sizes: dict[tuple[str, int], list] = {}  # (queue, gen) → [tasks added, max pid, max FIFO pid]

        def flush_run() -> None:
            if not run:
                return
            assert run_kind is not None  # set by the mutation that started the run
            if run_kind is DeleteTask:
                # count only rows that were there: one executemany per queue, read its rowcount
                by_queue: dict[tuple[str, int], list[tuple]] = {}
                for row in run:
                    by_queue.setdefault((row[0], row[1]), []).append(row)
                for key, rows in by_queue.items():
                    deleted = db.executemany(sql.DELETE_TASK, rows).rowcount
                    if deleted:
                        size = sizes.get(key)
                        if size is None:
                            size = sizes[key] = [0, "", None]
                        size[0] -= deleted
            else:
                db.executemany(_STATEMENTS[run_kind], run)
            run.clear()

        for mutation in pending:
            kind = type(mutation)
            if kind is not run_kind:
                flush_run()
                run_kind = kind
            if isinstance(mutation, PutTask):
                t = mutation.task
                gen = gens.get(t.queue, 0)
                size = sizes.get((t.queue, gen))
                if size is None:
                    size = sizes[(t.queue, gen)] = [0, t.pid, None]
                size[0] += 1
                if t.pid > size[1]:
                    size[1] = t.pid
                if _is_fifo(t.pid) and (size[2] is None or t.pid > size[2]):
                    size[2] = t.pid
                run.append((
                    gens.get(t.queue, 0), t.queue, t.pid, t.data, t.enqueued_at, t.sender, t.receiver,
                    _encode_headers(t.headers) if t.headers else None, t.max_attempts, t.attempts,
                    t.deliveries, t.lease_id, t.lease_owner, t.lease_peer, t.leased_at, t.lease_expires_at,
                    t.waiting_on, t.children, t.progress, t.note,
                ))
            elif isinstance(mutation, SetLease):
                m = mutation
                run.append((
                    m.attempts, m.deliveries, m.lease_id, m.lease_owner, m.lease_peer, m.leased_at,
                    m.lease_expires_at, m.progress, m.note, m.queue, gens.get(m.queue, 0), m.pid,
                ))
            elif isinstance(mutation, DeleteTask):
                run.append((mutation.queue, gens.get(mutation.queue, 0), mutation.pid))
            elif isinstance(mutation, SetWaiting):
                run.append((mutation.waiting_on, mutation.children, mutation.queue, gens.get(mutation.queue, 0), mutation.pid))
            elif isinstance(mutation, SetCounter):
                run.append((mutation.name, mutation.value))
            elif isinstance(mutation, PutEdge):
                run.append((mutation.queue, mutation.pid, mutation.child_queue, mutation.child_pid))
            elif isinstance(mutation, DeleteEdges):
                run.append((mutation.queue, mutation.pid))
            else:
                assert isinstance(mutation, DropQueue)
                gen = gens.get(mutation.queue, 0) + 1
                gens[mutation.queue] = gen
                db.execute(sql.SET_GENERATION, (mutation.queue, gen))
                db.execute(sql.DROP_QUEUE_SIZES, (mutation.queue, gen))
                for key in [key for key in sizes if key[0] == mutation.queue and key[1] < gen]:
                    del sizes[key]  # counted for a generation that is gone
                run_kind = None
        flush_run()
        self._write_sizes(sizes)

    def _write_sizes(self, sizes: dict[tuple[str, int], list]) -> None:
        """One upsert per queue of what this flush added to and took from it."""
        if not sizes:
            return
        db = self._db
        db.executemany(sql.ADD_QUEUE_SIZE, [(queue, gen, *change) for (queue, gen), change in sizes.items()])
        shrunk = [key for key, change in sizes.items() if change[0] < 0]
        if shrunk:
            db.executemany(sql.FORGET_EMPTY_QUEUE_SIZE, shrunk)

    def commit(self) -> None:
        if self._log is not None:
            self._commit_to_log(self._log)
            return
        try:
            self._flush()
            if self._in_transaction:
                self._db.execute("COMMIT")
                self.commits += 1
        except _DISK_ERRORS as exc:
            raise storage_failure(exc, committing=True) from exc
        finally:
            self._in_transaction = self._db.in_transaction

    def rollback(self) -> None:
        if self._log is not None:
            try:
                self._rewind()
            except _DISK_ERRORS as exc:
                raise storage_failure(exc) from exc
            return
        self._pending = []
        self._touched.clear()
        self._touched_top.clear()
        self._dropping.clear()
        try:
            if self._db.in_transaction:
                self._db.execute("ROLLBACK")
            self._in_transaction = False
            self._gens = dict(self._db.execute(sql.LOAD_GENERATIONS).fetchall())
        except _DISK_ERRORS as exc:
            raise storage_failure(exc) from exc

    # --------------------------------------------------------------- reads

    def load_available(self, queue: str, after_pid: str, limit: int, now: float) -> list[Task]:
        try:
            if queue in self._dropping or self._touched_top.get(queue, "") > after_pid:
                self._flush()  # else nothing unflushed changes a row it reads (a refill above leased heads)
            rows = self._db.execute(sql.LOAD_AVAILABLE, (queue, self._gens.get(queue, 0), after_pid, now, limit))
            return [_row_to_task(row) for row in rows]
        except _DISK_ERRORS as exc:
            raise storage_failure(exc) from exc

    def children_of(self, queue: str, pid: str) -> list[tuple[str, str]]:
        try:
            self._flush()
            return [(row[0], row[1]) for row in self._db.execute(sql.CHILDREN_OF, (queue, pid))]
        except _DISK_ERRORS as exc:
            raise storage_failure(exc) from exc

    def parents_in(self, queue: str) -> list[str]:
        try:
            self._flush()
            return [row[0] for row in self._db.execute(sql.PARENTS_IN, (queue,))]
        except _DISK_ERRORS as exc:
            raise storage_failure(exc) from exc

    def load_task(self, queue: str, pid: str) -> Task | None:
        try:
            if (queue, pid) in self._touched or queue in self._dropping:
                self._flush()  # else nothing unflushed changes this row: one flush per pass, not per read
            row = self._db.execute(sql.LOAD_TASK, (queue, self._gens.get(queue, 0), pid)).fetchone()
        except _DISK_ERRORS as exc:
            raise storage_failure(exc) from exc
        return _row_to_task(row) if row is not None else None

    def scan(self, queue: str, from_pid: str | None, limit: int) -> list[Task]:
        try:
            self._flush()
            rows = self._db.execute(sql.SCAN_FROM, (queue, self._gens.get(queue, 0), from_pid or "", limit))
            return [_row_to_task(row) for row in rows]
        except _DISK_ERRORS as exc:
            raise storage_failure(exc) from exc

    def find_by_sender(
        self, sender: str, queue: str | None, limit: int, after: tuple[str, str] | None = None
    ) -> list[Task]:
        if queue is not None and after is not None:
            raise ValueError("find_by_sender: `after` walks every queue; it goes without `queue`")
        try:
            return self._find_by_sender(sender, queue, limit, after)
        except _DISK_ERRORS as exc:
            raise storage_failure(exc) from exc

    def _find_by_sender(self, sender: str, queue: str | None, limit: int, after: tuple[str, str] | None) -> list[Task]:
        self._flush()
        gens = self._gens
        if queue is not None:
            rows = self._db.execute(sql.FIND_BY_SENDER_IN_QUEUE, (sender, queue, gens.get(queue, 0), limit))
            return [_row_to_task(row[1:]) for row in rows]
        found: list[Task] = []
        if after is None:
            cursor = self._db.execute(sql.FIND_BY_SENDER, (sender,))
        else:
            cursor = self._db.execute(sql.FIND_BY_SENDER_AFTER, (sender, *after))
        for row in cursor:
            if row[0] == gens.get(row[1], 0):
                found.append(_row_to_task(row[1:]))
                if len(found) >= limit:
                    break
        return found

    def queues_for_receiver(self, receiver: str) -> list[str]:
        try:
            self._flush()
            gens = self._gens
            rows = self._db.execute(sql.QUEUES_FOR_RECEIVER, (receiver,))
            return sorted({queue for queue, gen in rows if gen == gens.get(queue, 0)})
        except _DISK_ERRORS as exc:
            raise storage_failure(exc) from exc

    def recover(self, now: float) -> Recovery:
        try:
            return self._recover(now)
        except _DISK_ERRORS as exc:
            raise storage_failure(exc) from exc

    def _recover(self, now: float) -> Recovery:
        self._flush()
        gens = self._gens
        recovery = Recovery()
        db = self._db
        blocked = {(queue, gen): count for queue, gen, count in db.execute(sql.BLOCKED_COUNTS)}
        for queue, gen, size, max_pid, max_fifo_pid in db.execute(sql.QUEUE_SUMMARIES):
            if gen == gens.get(queue, 0) and size > 0:
                recovery.queues.append(QueueSummary(queue, size, max_pid, max_fifo_pid, blocked.get((queue, gen), 0)))
        recovery.queues.sort(key=lambda summary: summary.queue)
        for row in db.execute(sql.HELD_LEASES):
            if row[0] == gens.get(row[1], 0):
                task = _row_to_task(row[1:])
                assert task.lease_expires_at is not None
                (recovery.leased if task.lease_expires_at > now else recovery.expired).append(task)
        recovery.counters = dict(db.execute(sql.LOAD_COUNTERS).fetchall())
        return recovery

    # ---------------------------------------------------------- upkeep

    def reap(self, limit: int = 1000) -> int:
        """Delete up to `limit` rows of dropped generations; part of the current transaction.
        When no old rows are left, forget the generation of queues that hold no row at all:
        they start again at 0 with nothing to confuse, and a flood of queues created and
        deleted under new names does not grow the table (and `_gens`) for ever."""
        try:
            return self._reap(limit)
        except _DISK_ERRORS as exc:
            raise storage_failure(exc) from exc

    def _reap(self, limit: int) -> int:
        self._flush()
        rowids = self._db.execute(sql.STALE_ROWS, (limit,)).fetchall()
        if rowids:
            self._begin()
            self._db.executemany(sql.DELETE_ROWIDS, rowids)
        if len(rowids) < limit:
            empty = self._db.execute(sql.EMPTY_GENERATIONS, (limit,)).fetchall()
            if empty:
                self._begin()
                self._db.executemany(sql.DELETE_GENERATION, empty)
                for (queue,) in empty:
                    self._gens.pop(queue, None)
        return len(rowids)

    def close(self) -> None:
        """Close the database, then let its directory go. Writes since the last commit are discarded,
        as in a crash: only commit() makes a write durable, whether or not a read has already
        flushed it into the open transaction."""
        try:
            if self._log is not None:
                self._rewind()  # what is logged goes into the database now, or at the next open
                if self._logged:
                    self._checkpoint_quietly()
            else:
                self._pending = []
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
        except _DISK_ERRORS as exc:
            raise storage_failure(exc) from exc
        finally:
            self._in_transaction = False
            try:
                if self._log is not None:
                    self._log.close()
                self._db.close()
            finally:
                if self._lock is not None:
                    self._lock.release()  # after the database: the next opener finds it closed

    # ------------------------------------------------------------ commit log

    def _open_log(self, enabled: bool, fault: log_file.FaultHook | None, preallocate: int) -> None:
        """Bring the database up to date from a log left in the directory (a crash, or a broker that wrote
        through one), whether or not this store writes through one; then start a fresh log, or remove it."""
        sync = self.durability == "fsync"
        found = log_file.read(self.directory)
        applied = self._applied_ticket()
        next_ticket = applied + 1
        if found is not None:
            if found.damaged is not None and found.damaged + 1 > applied:
                message = found.damage_message(self.directory / log_file.LOG_NAME)
                if self.durability == "fsync":
                    raise commit_log.LogFormatError(message)
                # durability os: a power cut may keep a later page and lose an earlier one, so this is
                # what such a cut leaves too, and an ok never meant more than the process survived
                log.warning("%s (--durability os: opened without them, as a torn tail)", message)
            if found.first_ticket > next_ticket:
                log.warning("the commit log starts at ticket %d but the store has applied up to %d only",
                            found.first_ticket, applied)
            if found.torn_bytes:
                log.info("read %d records of the commit log; past byte %d the rest is preallocated space, "
                         "records of earlier rounds, or an append never acknowledged, and is not applied",
                         len(found.records), found.end)
            for ticket, payload in found.records:
                if ticket > applied:  # the replay-safe ticket: what the database holds is not applied twice
                    self.write(commit_log.decode_mutations(payload))
                    self.replayed += 1
            next_ticket = max(next_ticket, found.next_ticket)
            self._store_ticket(next_ticket - 1)
            if self.replayed:
                log.info("replayed %d commit log records", self.replayed)
        if enabled:
            self._log = log_file.LogFile(self.directory, sync=sync, fault=fault, preallocate=preallocate)
            self._log.create(next_ticket)
        elif found is not None:
            log_file.remove(self.directory, sync=sync)

    def _applied_ticket(self) -> int:
        if self._db.execute(sql.HAS_LOG_STATE).fetchone() is None:
            return 0
        row = self._db.execute(sql.LOAD_LOG_TICKET).fetchone()
        return int(row[0]) if row is not None else 0

    def _store_ticket(self, ticket: int) -> None:
        """Everything pending into the database with `ticket`, the last record it holds, in one transaction."""
        db = self._db
        try:
            self._flush()
            self._begin()
            db.execute(sql.CREATE_LOG_STATE)
            db.execute(sql.SET_LOG_TICKET, (ticket,))
            db.execute("COMMIT")
        finally:
            self._in_transaction = db.in_transaction

    def _commit_to_log(self, log_: log_file.LogFile) -> None:
        """The pass's mutations as one record, synced: that is the commit. The database follows at checkpoints."""
        if self._pass:
            if len(self._logged) >= MAX_UNCHECKPOINTED:
                self._checkpoint_before_pass()
            payload = commit_log.encode_mutations(self._pass)
            if not commit_log.fits(payload):
                self._commit_through(log_)
                return
            try:
                log_.append(payload)
            except OSError as exc:
                # cut back: the record can never be replayed, so it was not applied; damaged: it may be
                raise storage_failure(exc, committing=log_.damaged) from exc
            self._logged.extend(self._pass)
            self._pass = []
            self.commits += 1
        if self._logged and self._checkpoint_due(log_):
            self._checkpoint_quietly()

    def _commit_through(self, log_: log_file.LogFile) -> None:
        """A pass too large for one record: the database takes it, with everything logged before it, in
        the checkpoint's one transaction (synchronous=FULL: durable at its COMMIT); the log starts afresh."""
        written = self._pass
        self._rewind()  # the logged mutations, pending again
        self._pending.extend(written)
        self._track(written)
        try:
            self._checkpoint(log_)  # on failure it rewinds: the pass is gone, the logged ones pending again
        except _DISK_ERRORS as exc:
            raise storage_failure(exc, committing=True) from exc
        self.commits += 1

    def _checkpoint_due(self, log_: log_file.LogFile) -> bool:
        now = self._clock()
        if now < self._checkpoint_retry_at:
            return False
        return (
            len(self._logged) >= self.checkpoint_mutations
            or log_.end >= CHECKPOINT_LOG_BYTES
            or now - self._last_checkpoint >= self.checkpoint_secs
        )

    def checkpoint(self) -> None:
        """Apply everything logged to the database and empty the log; raises StorageFailure. Only between
        passes (nothing written since the last commit), as the store does itself after a commit."""
        if self._log is None or self._pass:
            return
        try:
            self._checkpoint(self._log)
        except (*_DISK_ERRORS, commit_log.LogFormatError) as exc:
            raise storage_failure(exc) from exc

    def _checkpoint(self, log_: log_file.LogFile) -> None:
        """The database takes every logged mutation (coalesced) and the last ticket, in one transaction; then
        the log starts afresh. Everything pending and in the open transaction must be logged."""
        ticket = log_.next_ticket - 1
        try:
            log_.fault("checkpoint")
            self._store_ticket(ticket)
        except BaseException:
            self._rewind()
            raise
        self._logged = []
        self.checkpoints += 1
        self._last_checkpoint = self._clock()
        # a crash before the next record is synced may leave the old header: every record under it is
        # at or below the ticket just stored, and skipped
        log_.start(ticket + 1)

    def _checkpoint_quietly(self) -> None:
        """A checkpoint after a commit: its failure fails nothing (the log holds it all); tried again later."""
        assert self._log is not None
        try:
            self._checkpoint(self._log)
        except (*_DISK_ERRORS, StorageFailure) as exc:
            self._checkpoint_retry_at = self._clock() + CHECKPOINT_RETRY_SECS
            log.warning("checkpoint of the commit log into the database failed (tried again later): %s", exc)

    def _checkpoint_before_pass(self) -> None:
        """Too much logged and not yet in the database: checkpoint it now, without the pass being committed
        (set aside meanwhile), or refuse the pass."""
        assert self._log is not None
        written = self._pass
        try:
            self._rewind()
            self._checkpoint(self._log)
        except _DISK_ERRORS as exc:
            raise storage_failure(exc) from exc  # known: the pass was logged nowhere
        finally:
            self._pass = written
            self._pending.extend(written)
            self._track(written)

    def _rewind(self) -> None:
        """Back to what the log holds: forget the pass, drop the open transaction, queue the logged
        mutations to flush again."""
        self._pass = []
        self._pending = list(self._logged)
        self._touched.clear()
        self._touched_top.clear()
        self._dropping.clear()
        self._track(self._pending)
        db = self._db
        try:
            if db.in_transaction:
                db.execute("ROLLBACK")
        finally:
            self._in_transaction = db.in_transaction
        self._gens = dict(db.execute(sql.LOAD_GENERATIONS).fetchall())
