"""The PostgreSQL store: the SQLite store's tables and contract in a schema of a PostgreSQL database.

`PostgresStore(dsn, schema="kittiwake")` keeps what `SqliteStore` keeps, with
the same columns, indexes and generations (`postgres_statements`), in a
schema of its own, over one connection (psycopg 3).

Group commit. Writes are buffered in Python as in the SQLite store. A flush
turns the mutations of each kind into ONE statement over arrays (`unnest`),
reordered across kinds only where no row's own writes change order (`_flush`),
and sends them, the read that caused the flush, or the `COMMIT`, in one
pipeline: a batch of requests costs one round trip to commit, however many
mutations it holds. Between commits the connection holds one open transaction
(opened by the first flushed write); reads with nothing buffered run on their
own, outside any transaction. A read of rows no buffered write touches (an
enqueue asking whether its pid exists) does not flush the buffer.

Durability and isolation. A commit returns once PostgreSQL reports it:

* `durability="fsync"` (default): the session keeps the server's
  `synchronous_commit` (raised to `on` when the server says `off`): the WAL
  record is flushed before COMMIT returns, as `fsync=on` and the server's
  disk allow. An ok reply survives a crash of the broker and of the server.
* `durability="os"`: `synchronous_commit=off`: the commit may still be in
  the server's WAL buffers for a fraction of a second (3 x wal_writer_delay):
  an ok reply survives a crash of the broker, not of the server.

Transactions run at READ COMMITTED, PostgreSQL's default.

No commit log in front (`store.commit_log` is SQLite's, `--commit-log on` is
refused here). A pass's commit is already one pipelined round trip, and the
server's own WAL is the log: it syncs one compact record per commit and
brings its tables up to date behind it. A broker-local log in front of a
remote database would change what an ok reply means: the change would be on
the broker's disk, not in the database, so a broker host lost for good would
take acknowledged tasks with it while the database looks whole, other brokers
of a `brokers=many` schema would not see a change another one acknowledged
until its checkpoint, and `kittiwake copy` or a tool reading the schema would
see a past state. What the log saves SQLite (B-tree writes of tasks that
are gone by the checkpoint) PostgreSQL pays on the server, not on the
broker's event loop.

Brokers. `brokers=None` is a tool (copy, migrate, tests): no presence.
`brokers="one"` is a broker that serves the schema alone, as the SQLite
store's broker does: its engine's memory is the truth. `brokers="many"` is
one of several brokers on the schema (`postgres_presence` keeps each one's
session, slot and announcements; `engine.coherence` says what the engine does
with claims). Then:

* `claim(names)` locks each queue for the open transaction with an advisory
  lock (all of one call in key order), then reads each queue's version and
  generation; a queue whose version is not the one this broker last saw was
  changed by another broker, and comes back as a `QueueReload` (its summary,
  blocked count and leases, read under the lock). The generation read there
  replaces the cached one, so another broker's drop is never written past.
* a commit writes, for every queue it changed, a new version unique to this
  commit (the broker's incarnation, from a sequence, and its commit count),
  and announces the queues with NOTIFY, in the same pipeline as the COMMIT;
  a write to a queue not claimed is refused (a bug: it would go unseen).
* sessions set `lock_timeout` (a broker waits at most LOCK_TIMEOUT_SECS for
  another's locks) and `idle_in_transaction_session_timeout` (a broker frozen
  mid-transaction loses its session, and its locks, after IDLE_TIMEOUT_SECS).
  A deadlock or a lock timeout is a `StorageFailure` with fault CONFLICT,
  which the broker answers by running the batch again.
* queue sizes are kept by the server in the statements that put and delete
  rows, and counters are raised with `greatest`: both are shared as they are.

Schema. `schema_version` holds the version. Opening a store at an older
version upgrades it in one transaction under an advisory lock (so two
brokers starting at once do not both migrate); a newer version is refused
with `errors.SchemaTooNew`.

Failures. Every error of psycopg or the server leaves as
`errors.StorageFailure` naming its fault (`classify`); a failed commit's
outcome is known when the server answered it with an error (the transaction
is then rolled back), unknown when the connection broke. After a failure the
broker rolls back: `rollback()` reconnects a broken connection, so a
restarted server is picked up again. Nothing above the stores sees psycopg.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Sequence

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
from kittiwake.engine.storage import QueueReload, QueueSummary, Recovery
from kittiwake import errors
from kittiwake.errors import StorageFailure, StorageFault
from kittiwake.model import Task
from kittiwake.store import postgres_statements as sql
from kittiwake.store import copy_marker
from kittiwake.store.postgres_presence import MAX_BROKERS, Presence, channel_of, lock_space, one_value
from kittiwake.store.rows import encode_headers, snapshot, task_from_row

if TYPE_CHECKING:
    from kittiwake.store.postgres_presence import PgConnection

try:
    import psycopg
except ImportError:  # the `postgres` extra is not installed
    psycopg = None  # type: ignore[assignment]

log = logging.getLogger("kittiwake.store")

DURABILITY_LEVELS = ("fsync", "os")
BROKER_MODES = ("one", "many")
LOCK_TIMEOUT_SECS = 10
IDLE_TIMEOUT_SECS = 60
NOTIFY_PAYLOAD_BYTES = 7900  # PostgreSQL's limit is 8000; past it the announcement says "*"
_UNKNOWN = object()  # a queue's version not seen yet
CONNECT_TIMEOUT_SECS = 10
_MIGRATION_LOCK = "kittiwake-migrate:"  # + schema name: hashed into the advisory lock key

# SQLSTATEs (PostgreSQL appendix A) that name a fault of the server's disk
_BY_SQLSTATE = {
    "53100": StorageFault.FULL,  # disk_full
    "58030": StorageFault.IO_ERROR,  # io_error
    "25006": StorageFault.READ_ONLY,  # read_only_sql_transaction (a hot standby)
    "XX001": StorageFault.CORRUPT,  # data_corrupted
    "XX002": StorageFault.CORRUPT,  # index_corrupted
    "40P01": StorageFault.CONFLICT,  # deadlock_detected: between brokers sharing the schema
    "55P03": StorageFault.CONFLICT,  # lock_not_available: lock_timeout passed
}


def classify(error: BaseException) -> StorageFault:
    """The kind of storage failure a psycopg error is."""
    return _BY_SQLSTATE.get(getattr(error, "sqlstate", None) or "", StorageFault.OTHER)


def _outcome_known(error: BaseException) -> bool:
    """Whether a COMMIT that raised `error` certainly did not commit: the server answered with an
    error (it then rolled back). A broken connection or a server shutting down leaves it unknown."""
    sqlstate: str | None = getattr(error, "sqlstate", None)
    if not sqlstate:
        return False
    return not sqlstate.startswith(("08", "57P"))


def _failure(error: BaseException, *, committing: bool = False) -> StorageFailure:
    fault = classify(error)
    message = " ".join(str(error).split()) or type(error).__name__  # libpq's messages span lines
    return StorageFailure(f"PostgreSQL: {message}", fault=fault, outcome_known=not committing or _outcome_known(error))


def _note(note: str | None) -> bytes | None:
    return note.encode() if note is not None else None


def _task(row: tuple) -> Task:
    note = row[-1]
    return task_from_row((*row[:-1], bytes(note).decode() if note is not None else None))


def _below_nul(bound: str) -> str:
    """A pid bound cut at its first NUL. PostgreSQL text cannot hold NUL, and the engine asks for
    pid + NUL, the smallest string after a pid; pids hold no NUL, so `pid >= bound` and
    `pid > bound` both mean `pid > bound cut at its NUL`."""
    return bound[: bound.index("\x00")]


def _last_per_key(rows: list[tuple], key_width: int) -> list[tuple]:
    """One row per key (its first `key_width` columns), the last written: a statement over arrays
    may touch each row only once, and the last write of a run is the one that stands."""
    by_key = {row[:key_width]: row for row in rows}
    return list(by_key.values()) if len(by_key) < len(rows) else rows


# the order a flush sends each kind of write in, within a segment (see `_flush`)
_KIND_ORDER = (PutTask, SetLease, SetWaiting, DeleteTask, PutEdge, DeleteEdges, SetCounter)
_KIND_RANK = {kind: rank for rank, kind in enumerate(_KIND_ORDER)}


def _columns(rows: list[tuple]) -> list[list[Any]]:
    """Rows as one list per column: the arrays `unnest` takes."""
    return [list(column) for column in zip(*rows)]


class PostgresStore:
    def __init__(
        self,
        dsn: str,
        *,
        schema: str = sql.DEFAULT_SCHEMA,
        durability: str = "fsync",
        connect_timeout_secs: float = CONNECT_TIMEOUT_SECS,
        brokers: str | None = None,
        allow_unfinished_copy: bool = False,
    ) -> None:
        """Open (creating or upgrading) the store in `schema`; `brokers` ("one", "many"): for a broker to
        serve, taking its presence; None for a tool. A schema a copy into did not finish raises
        `errors.CopyUnfinished` (`copy_marker`), unless `allow_unfinished_copy` (the copy)."""
        if psycopg is None:
            raise ValueError("the PostgreSQL store needs psycopg: pip install 'kittiwake[postgres]'")
        if not isinstance(dsn, str) or not dsn:
            raise ValueError("dsn must be a non-empty PostgreSQL connection string")
        if not isinstance(schema, str) or not sql.SCHEMA_NAME.fullmatch(schema):
            raise ValueError(f"schema must be a lower-case SQL name ([a-z_][a-z0-9_]*, at most 63), got {schema!r}")
        if durability not in DURABILITY_LEVELS:
            raise ValueError(f"durability must be one of {DURABILITY_LEVELS}")
        if not isinstance(connect_timeout_secs, (int, float)) or connect_timeout_secs <= 0:
            raise ValueError("connect_timeout_secs must be a number above 0")
        if brokers is not None and brokers not in BROKER_MODES:
            raise ValueError(f"brokers must be one of {BROKER_MODES}")
        try:
            psycopg.conninfo.conninfo_to_dict(dsn)
        except psycopg.Error as exc:
            raise ValueError(f"not a PostgreSQL connection string: {exc}") from None
        self.dsn = dsn
        self.schema = schema
        self.durability = durability
        self.connect_timeout_secs = connect_timeout_secs
        self._pending: list[Mutation] = []
        # what the buffered writes touch, so that a read of other rows need not flush them
        self._pending_rows: set[tuple[str, str]] = set()  # (queue, pid) of task rows written
        self._pending_queues: set[str] = set()  # queues with a task row written or dropped
        self._pending_drops: set[str] = set()  # queues dropped
        self._in_transaction = False
        self.commits = 0
        self.brokers = brokers
        self.shared = brokers == "many"
        self.claimed: set[str] = set()  # queues locked in the open transaction
        self._versions: dict[str, Any] = {}  # queue → version this broker last saw or wrote
        self._written: set[str] = set()  # queues changed in the open transaction
        self._incarnation = 0
        self._lock_space = lock_space(schema, "queue")
        self._db: PgConnection | None = None  # None only until it opens below; rollback replaces a broken one
        self.presence: Presence | None = None
        self._epoch = 0
        try:
            db = self._db = self._connect()
            self.version_found = self._migrate()
            if brokers is not None:
                self.presence = Presence(self._connect, schema, brokers)
                self._epoch = self.presence.epoch
            if not allow_unfinished_copy:  # after the presence: a copy still running is a broker serving it
                copy_marker.refuse_unfinished(db, copy_marker.POSTGRES_EXISTS, f"schema {schema!r}",
                                              f"DROP SCHEMA {schema} CASCADE")
            if self.shared:
                self._incarnation = one_value(db, sql.NEXT_INCARNATION)
            # queue → generation, cached as the SQLite store caches it. Several brokers on one schema
            # will need to read it from the table (or be told of drops): another broker's drop would
            # go unseen here, and writes would land in the dropped generation.
            self._gens: dict[str, int] = dict(db.execute(sql.LOAD_GENERATIONS).fetchall())
        except psycopg.Error as exc:
            self._close_quietly(presence=True)
            raise _failure(exc) from exc
        except BaseException:
            self._close_quietly(presence=True)
            raise

    @property
    def schema_version(self) -> int:
        return sql.SCHEMA_VERSION

    @property
    def incarnation(self) -> int:
        """This broker's number among every start of a broker on the schema (brokers=many; else 0)."""
        return self._incarnation

    @property
    def id_slot(self) -> int:
        return self.presence.slot if self.presence is not None and self.shared else 0

    @property
    def id_stride(self) -> int:
        return MAX_BROKERS if self.shared else 1

    @property
    def _session(self) -> PgConnection:
        """The connection, open since the store opened (`rollback` replaces a broken one)."""
        db = self._db
        assert db is not None
        return db

    def _connect(self) -> PgConnection:
        db = psycopg.connect(
            self.dsn, autocommit=True, connect_timeout=max(1, round(self.connect_timeout_secs)),
            application_name=f"kittiwake {self.schema}"[:63],  # which schema's broker, in pg_stat_activity
        )
        try:
            if self.durability == "os":
                db.execute("SET synchronous_commit = off")
            else:
                if one_value(db, "SHOW synchronous_commit") == "off":
                    db.execute("SET synchronous_commit = on")
                if one_value(db, "SHOW fsync") == "off":
                    log.warning("the PostgreSQL server runs with fsync=off: a commit may be lost in a crash "
                                "of the server or of its machine, whatever --durability says")
            db.execute(psycopg.sql.SQL("SET search_path = {}").format(psycopg.sql.Identifier(self.schema)))
            if self.brokers == "many":
                db.execute(f"SET lock_timeout = '{LOCK_TIMEOUT_SECS}s'")
                db.execute(f"SET idle_in_transaction_session_timeout = '{IDLE_TIMEOUT_SECS}s'")
        except BaseException:
            db.close()
            raise
        return db

    def _migrate(self) -> int:
        """Create or upgrade the schema to `SCHEMA_VERSION` in one transaction; the version found."""
        db = self._session
        with db.transaction():
            db.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (_MIGRATION_LOCK + self.schema,))
            db.execute(psycopg.sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(psycopg.sql.Identifier(self.schema)))
            db.execute(sql.VERSION_TABLE)
            row = db.execute(sql.LOAD_VERSION).fetchone()
            version = row[0] if row is not None else 0
            if version > sql.SCHEMA_VERSION:
                raise errors.SchemaTooNew(
                    f"schema {self.schema!r} has version {version}; this Kittiwake knows up to "
                    f"{sql.SCHEMA_VERSION}: upgrade Kittiwake"
                )
            for step in range(version + 1, sql.SCHEMA_VERSION + 1):
                for statement in sql.MIGRATIONS[step]:
                    db.execute(statement)
            if version < sql.SCHEMA_VERSION:
                db.execute(sql.SET_VERSION, (sql.SCHEMA_VERSION,))
        return version

    # -------------------------------------------------------------- writes

    def write(self, mutations: Sequence[Mutation]) -> None:
        pending, rows, queues = self._pending, self._pending_rows, self._pending_queues
        for mutation in mutations:
            if isinstance(mutation, PutTask):
                # a PutTask holds the caller's Task, which it may change before the flush: keep it as written
                task = snapshot(mutation.task)
                pending.append(PutTask(task))
                rows.add((task.queue, task.pid))
                queues.add(task.queue)
                continue
            pending.append(mutation)
            if isinstance(mutation, (SetLease, DeleteTask, SetWaiting)):
                rows.add((mutation.queue, mutation.pid))
                queues.add(mutation.queue)
            elif isinstance(mutation, DropQueue):
                queues.add(mutation.queue)
                self._pending_drops.add(mutation.queue)

    def _forget_pending(self) -> None:
        self._pending = []
        self._pending_rows = set()
        self._pending_queues = set()
        self._pending_drops = set()

    def _flush(self) -> None:
        """Send every buffered write, inside the open transaction; call within a pipeline."""
        pending = self._pending
        if not pending:
            return
        self._forget_pending()
        db = self._session
        if not self._in_transaction:
            db.execute("BEGIN")
            self._in_transaction = True
        gens = self._gens
        if self.shared:
            self._note_written(pending)
        # One statement per kind for a whole segment of writes, not per run: a pass interleaves
        # kinds (a lease's SetLease, the next request's DeleteTask), and each statement costs the
        # server a plan and an execution. Writes to different rows commute, so a segment takes
        # a write unless its row already holds a write of a kind sent later (`_KIND_ORDER`): the
        # writes to each row then run in the order they were made. A DropQueue ends a segment.
        segment: dict[type, list[tuple]] = {}
        touched: dict[tuple, int] = {}  # row key -> latest kind rank in the segment
        shrunk: set[tuple[str, int]] = set()

        def send() -> None:
            for kind in _KIND_ORDER:
                rows = segment.get(kind)
                if not rows:
                    continue
                if kind is PutTask:
                    db.execute(sql.PUT_TASKS, _columns(_last_per_key(rows, 3)))
                elif kind is SetLease:
                    db.execute(sql.SET_LEASES, _columns(_last_per_key(rows, 3)))
                elif kind is SetWaiting:
                    db.execute(sql.SET_WAITING, _columns(_last_per_key(rows, 3)))
                elif kind is DeleteTask:
                    db.execute(sql.DELETE_TASKS, _columns(rows))
                    shrunk.update(row[:2] for row in rows)
                elif kind is PutEdge:
                    db.execute(sql.PUT_EDGES, _columns(rows))
                elif kind is DeleteEdges:
                    db.execute(sql.DELETE_EDGES, _columns(rows))
                else:
                    db.execute(sql.SET_COUNTERS, _columns(rows))
            segment.clear()
            touched.clear()

        for mutation in pending:
            kind = type(mutation)
            if isinstance(mutation, PutTask):
                t = mutation.task
                row: tuple = (
                    t.queue, gens.get(t.queue, 0), t.pid, t.data, t.enqueued_at, t.sender, t.receiver,
                    encode_headers(t.headers) if t.headers else None, t.max_attempts, t.attempts,
                    t.deliveries, t.lease_id, t.lease_owner, t.lease_peer, t.leased_at, t.lease_expires_at,
                    t.waiting_on, t.children, t.progress, _note(t.note),
                )
                key: tuple | None = row[:3]
            elif isinstance(mutation, SetLease):
                m = mutation
                row = (
                    m.queue, gens.get(m.queue, 0), m.pid, m.attempts, m.deliveries, m.lease_id, m.lease_owner,
                    m.lease_peer, m.leased_at, m.lease_expires_at, m.progress, _note(m.note),
                )
                key = row[:3]
            elif isinstance(mutation, DeleteTask):
                row = (mutation.queue, gens.get(mutation.queue, 0), mutation.pid)
                key = row
            elif isinstance(mutation, SetWaiting):
                row = (mutation.queue, gens.get(mutation.queue, 0), mutation.pid, mutation.waiting_on, mutation.children)
                key = row[:3]
            elif isinstance(mutation, SetCounter):
                row, key = (mutation.name, mutation.value), None  # counters only grow: any order
            elif isinstance(mutation, PutEdge):
                row = (mutation.queue, mutation.pid, mutation.child_queue, mutation.child_pid)
                key = ("edges", mutation.queue, mutation.pid)
            elif isinstance(mutation, DeleteEdges):
                row = (mutation.queue, mutation.pid)
                key = ("edges", mutation.queue, mutation.pid)
            else:
                assert isinstance(mutation, DropQueue)
                send()
                gen = gens.get(mutation.queue, 0) + 1
                gens[mutation.queue] = gen
                db.execute(sql.SET_GENERATION, (mutation.queue, gen))
                db.execute(sql.DROP_QUEUE_SIZES, (mutation.queue, gen))
                continue
            if key is not None:
                rank = _KIND_RANK[kind]
                if touched.get(key, rank) > rank:
                    send()
                touched[key] = rank
            segment.setdefault(kind, []).append(row)
        send()
        if shrunk:
            db.execute(sql.FORGET_EMPTY_QUEUE_SIZES, _columns(sorted(shrunk)))

    def _note_written(self, mutations: list[Mutation]) -> None:
        """Shared schema: remember the queues these writes change, each of which must be claimed."""
        written = self._written
        for mutation in mutations:
            if isinstance(mutation, PutTask):
                queue = mutation.task.queue
            elif isinstance(mutation, SetCounter):
                continue
            else:
                queue = mutation.queue
            if queue not in self.claimed:
                raise RuntimeError(f"a write to queue {queue!r}, which this broker has not claimed")
            written.add(queue)

    def _flush_in_transaction(self) -> None:
        """`_flush`, and open the transaction even when nothing was buffered; within a pipeline."""
        self._flush()
        if not self._in_transaction:
            self._session.execute("BEGIN")
            self._in_transaction = True

    def commit(self) -> None:
        written: set[str] = set()
        try:
            self._check_presence()
            if self._pending or self._in_transaction:
                version = (self._incarnation << 32) | ((self.commits + 1) & 0xFFFFFFFF)  # no other commit's
                with self._session.pipeline():
                    self._flush()
                    written = self._written
                    if written:
                        self._announce(written, version)
                    self._session.execute("COMMIT")
                self._in_transaction = False
                self.commits += 1
                for queue in written:
                    self._versions[queue] = version
        except psycopg.Error as exc:
            self._in_transaction = self._transaction_open()
            raise _failure(exc, committing=True) from exc
        finally:
            self._end_transaction(written)

    def _announce(self, written: set[str], version: int) -> None:
        """Within the commit's pipeline: the new versions of the queues written, and a NOTIFY naming them."""
        queues = sorted(written)
        self._session.execute(sql.SET_QUEUE_VERSIONS, (version, queues))
        payload = "\n".join([str(self._incarnation), *queues])
        if len(payload.encode()) > NOTIFY_PAYLOAD_BYTES:
            payload = f"{self._incarnation}\n*"
        self._session.execute(sql.NOTIFY, (channel_of(self.schema), payload))

    def _end_transaction(self, committed: set[str]) -> None:
        """Locks are gone with the transaction; a queue written but not known committed is unknown."""
        self.claimed = set()
        if self._written:
            for queue in self._written - committed:
                self._versions.pop(queue, None)
            self._written = set()

    def _check_presence(self) -> None:
        """A broker whose own session broke may have lost its slot: refuse until it is back, then
        once more so that the engine is rebuilt (with the slot it has now)."""
        presence = self.presence
        if presence is None:
            return
        if not presence.ok:
            raise StorageFailure("PostgreSQL: the broker's own session is down; waiting for it to come back")
        if presence.epoch != self._epoch:
            self._epoch = presence.epoch
            raise StorageFailure("PostgreSQL: the broker's own session was replaced; starting over from the database")

    def _transaction_open(self) -> bool:
        db = self._db
        if db is None or db.closed or db.broken:
            return False
        return db.info.transaction_status != psycopg.pq.TransactionStatus.IDLE

    def rollback(self) -> None:
        """Forget writes since the last commit; a broken connection is replaced by a new one."""
        self._forget_pending()
        self._in_transaction = False
        self._end_transaction(set())
        self._versions.clear()  # the broker rebuilds its engine from reads made without locks
        try:
            try:
                db = self._db
                if db is None or db.closed or db.broken or db.pgconn.pipeline_status != psycopg.pq.PipelineStatus.OFF:
                    raise psycopg.OperationalError("the connection is not usable")
                if db.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                    db.execute("ROLLBACK")
            except psycopg.Error:
                # broken, or left in pipeline mode by a connection cut mid-commit (where no statement
                # gets through any more, and psycopg does not call it broken): a new connection
                self._close_quietly()
                self._db = self._connect()
            self._gens = dict(self._session.execute(sql.LOAD_GENERATIONS).fetchall())
        except psycopg.Error as exc:
            raise _failure(exc) from exc

    # --------------------------------------------------------------- reads

    def _read(self, statement: str, params: tuple | dict[str, Any], flush: bool = True) -> list[tuple]:
        """Flush buffered writes (unless `flush` is false: they touch no row the query reads) and
        run one query, in one round trip. Named `params` with a "queue" get its current generation
        as "gen", known once the writes are flushed (they may drop the queue)."""
        try:
            if self._pending and flush:
                with self._session.pipeline():
                    self._flush()
                    cursor = self._session.execute(statement, self._with_gen(params))
                return cursor.fetchall()
            return self._session.execute(statement, self._with_gen(params)).fetchall()
        except psycopg.Error as exc:
            raise _failure(exc) from exc

    def _with_gen(self, params: tuple | dict[str, Any]) -> tuple | dict[str, Any]:
        if isinstance(params, dict):
            params["gen"] = self._gens.get(params["queue"], 0)
        return params

    def load_available(self, queue: str, after_pid: str, limit: int, now: float) -> list[Task]:
        if "\x00" in after_pid:
            after_pid = _below_nul(after_pid)
        rows = self._read(sql.LOAD_AVAILABLE, {"queue": queue, "after": after_pid, "now": now, "limit": limit},
                          flush=queue in self._pending_queues)
        return [_task(row) for row in rows]

    def children_of(self, queue: str, pid: str) -> list[tuple[str, str]]:
        if "\x00" in pid:
            return []  # no pid holds NUL
        return [(row[0], row[1]) for row in self._read(sql.CHILDREN_OF, (queue, pid))]

    def parents_in(self, queue: str) -> list[str]:
        return [row[0] for row in self._read(sql.PARENTS_IN, (queue,))]

    def load_task(self, queue: str, pid: str) -> Task | None:
        if "\x00" in pid:
            return None  # no pid holds NUL
        # an enqueue with a pid asks whether it exists: most often a row no buffered write touches
        touched = (queue, pid) in self._pending_rows or queue in self._pending_drops
        rows = self._read(sql.LOAD_TASK, {"queue": queue, "pid": pid}, flush=touched)
        return _task(rows[0]) if rows else None

    def scan(self, queue: str, from_pid: str | None, limit: int) -> list[Task]:
        if from_pid is not None and "\x00" in from_pid:
            rows = self._read(sql.SCAN_AFTER, {"queue": queue, "after": _below_nul(from_pid), "limit": limit},
                              flush=queue in self._pending_queues)
        else:
            rows = self._read(sql.SCAN_FROM, {"queue": queue, "from": from_pid or "", "limit": limit},
                              flush=queue in self._pending_queues)
        return [_task(row) for row in rows]

    def find_by_sender(
        self, sender: str, queue: str | None, limit: int, after: tuple[str, str] | None = None
    ) -> list[Task]:
        if queue is not None and after is not None:
            raise ValueError("find_by_sender: `after` walks every queue; it goes without `queue`")
        if queue is not None:
            rows = self._read(sql.FIND_BY_SENDER_IN_QUEUE, {"sender": sender, "queue": queue, "limit": limit})
        elif after is not None:
            rows = self._read(sql.FIND_BY_SENDER_AFTER, (sender, *after, limit))
        else:
            rows = self._read(sql.FIND_BY_SENDER, (sender, limit))
        return [_task(row) for row in rows]

    def queues_for_receiver(self, receiver: str) -> list[str]:
        return [row[0] for row in self._read(sql.QUEUES_FOR_RECEIVER, (receiver,))]

    # ----------------------------------------------------- several brokers

    def claim(self, names: Sequence[str]) -> dict[str, QueueReload]:
        """Lock these queues until the transaction ends; a reload of each another broker changed
        since this one last saw it (see the module docstring)."""
        new = [name for name in dict.fromkeys(names) if name not in self.claimed]
        if not new:
            return {}
        try:
            self._check_presence()
            db = self._session
            with db.pipeline():
                self._flush_in_transaction()
                db.execute(sql.LOCK_QUEUES, (self._lock_space, new))
                cursor = db.execute(sql.QUEUE_VERSIONS, (new,))
            rows = cursor.fetchall()
            self.claimed.update(new)
            stale: list[str] = []
            versions, gens = self._versions, self._gens
            for queue, version, gen in rows:
                gens[queue] = gen
                if versions.get(queue, _UNKNOWN) != version:
                    versions[queue] = version
                    stale.append(queue)
            return self._reload(stale) if stale else {}
        except psycopg.Error as exc:
            raise _failure(exc) from exc

    def _reload(self, queues: list[str]) -> dict[str, QueueReload]:
        """What `recover` reads, for these queues only (locked by the caller)."""
        db = self._session
        with db.pipeline():
            summaries = db.execute(sql.QUEUE_SUMMARIES_OF, (queues,))
            blocked_counts = db.execute(sql.BLOCKED_COUNTS_OF, (queues,))
            held = db.execute(sql.HELD_LEASES_OF, (queues,))
        blocked: dict[str, int] = dict(blocked_counts.fetchall())
        reloads = {queue: QueueReload(None) for queue in queues}
        for queue, size, max_pid, max_fifo_pid in summaries.fetchall():
            reloads[queue].summary = QueueSummary(queue, size, max_pid, max_fifo_pid, blocked.get(queue, 0))
        for row in held.fetchall():
            task = _task(row)
            reloads[task.queue].leased.append(task)
        return reloads

    def expired_lease_queues(self, now: float, limit: int) -> list[str]:
        """Queues holding a lease that ran out by `now`, whichever broker granted it."""
        return [row[0] for row in self._read(sql.EXPIRED_LEASE_QUEUES, (now, limit))]

    def recover(self, now: float) -> Recovery:
        recovery = Recovery()
        blocked = dict(self._read(sql.BLOCKED_COUNTS, ()))
        for queue, size, max_pid, max_fifo_pid in self._read(sql.QUEUE_SUMMARIES, ()):
            recovery.queues.append(QueueSummary(queue, size, max_pid, max_fifo_pid, blocked.get(queue, 0)))
        for row in self._read(sql.HELD_LEASES, ()):
            task = _task(row)
            assert task.lease_expires_at is not None
            (recovery.leased if task.lease_expires_at > now else recovery.expired).append(task)
        recovery.counters = dict(self._read(sql.LOAD_COUNTERS, ()))
        return recovery

    # ---------------------------------------------------------- upkeep

    def reap(self, limit: int = 1000) -> int:
        """Delete up to `limit` rows of dropped generations, in the open transaction (opened if need
        be); when none are left, forget the generations of queues that hold no row at all."""
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ValueError("limit must be an integer >= 1")
        try:
            db = self._session
            with db.pipeline():
                self._flush_in_transaction()
                reaped = db.execute(sql.REAP_STALE_ROWS, (limit,))
            count = reaped.rowcount
            if count < limit:  # forget empty queues' generations: candidates, their locks, then a re-check
                candidates = [queue for (queue,) in db.execute(sql.EMPTY_GENERATION_CANDIDATES, (limit,))]
                if candidates:
                    locked = [queue for (queue,) in db.execute(sql.TRY_LOCK_QUEUES, (candidates, self._lock_space))]
                    if locked:
                        for (queue,) in db.execute(sql.FORGET_EMPTY_GENERATIONS, (locked,)).fetchall():
                            self._gens.pop(queue, None)
            return count
        except psycopg.Error as exc:
            raise _failure(exc) from exc

    def close(self) -> None:
        """Close the connections. Writes since the last commit are discarded, as in a crash."""
        self._forget_pending()
        try:
            if self._transaction_open():
                self._session.execute("ROLLBACK")
        except psycopg.Error as exc:
            raise _failure(exc) from exc
        finally:
            self._in_transaction = False
            self._close_quietly(presence=True)

    def _close_quietly(self, presence: bool = False) -> None:
        if presence and self.presence is not None:
            self.presence.close()
        if self._db is not None:
            try:
                self._db.close()
            except Exception:
                pass
