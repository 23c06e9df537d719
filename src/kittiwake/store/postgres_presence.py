"""A broker's presence on a PostgreSQL schema: who serves it, in which slot, and what others changed.

Each broker on PostgreSQL keeps one session of its own beside the store's
working connection, and holds on it, for its whole life, session-level
advisory locks:

* the *serving* lock of the schema: exclusive for a broker that serves the
  schema alone (`brokers="one"`, the default), shared for each of several
  (`brokers="many"`). A broker started against the other kind is refused at
  start with a message saying what to change, so a second broker can never
  join one whose cache assumes it is alone.
* with `brokers="many"`, a *slot* in 0..MAX_BROKERS-1, the first one free:
  the residue class of its ids (`engine.ids`).

PostgreSQL releases session locks when the session ends, so a broker killed
with SIGKILL leaves its slot and the serving lock at once.

The same session LISTENs on the schema's channel: a committing broker
announces which queues it changed (`PostgresStore.commit`), and a thread here
hands each announcement to `on_notify` (the broker wakes long-polls on those
queues). Announcements are hints: correctness rests on the claims' locks and
versions, and brokers poll parked queues as well, so a lost one costs latency.

If the session breaks (a restarted server), the thread reconnects every second
and takes its locks again; until it has, `ok` is False and the store refuses
to commit, and `epoch` counts the sessions so the store knows to have the
engine rebuilt (its slot may have changed).
"""

from __future__ import annotations

import logging
import threading
import zlib
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

if TYPE_CHECKING:  # psycopg is the `postgres` extra; the stores import it where they connect
    from psycopg import Connection

    PgConnection = Connection[tuple[Any, ...]]  # psycopg's default rows: tuples

log = logging.getLogger("kittiwake.store")

MAX_BROKERS = 64  # slots; also the stride of ids
RECONNECT_SECS = 1.0
LISTEN_POLL_SECS = 1.0  # how often the thread looks at its stop flag


class BrokerConflict(ValueError):
    """Another broker serves the schema in a way this one cannot join."""

    def __init__(self, message: str, schema: str = "") -> None:
        super().__init__(message)
        self.schema = schema


def lock_space(schema: str, purpose: str) -> int:
    """A signed 32-bit advisory-lock key for (schema, purpose), stable across processes."""
    value = zlib.crc32(f"kittiwake:{purpose}:{schema}".encode())
    return value - (1 << 32) if value >= 1 << 31 else value


def channel_of(schema: str) -> str:
    return f"kittiwake_{schema}"[:63]


def one_value(db: PgConnection, query: str, params: Sequence[Any] | Mapping[str, Any] | None = None) -> Any:
    """The first column of the one row `query` answers (a SELECT of values or functions, a SHOW)."""
    row = db.execute(query, params).fetchone()
    assert row is not None  # such a query answers one row, or raises
    return row[0]


class Presence:
    """The broker's own session: serving lock, slot, LISTEN, and the thread that reads announcements."""

    def __init__(self, connect: Callable[[], PgConnection], schema: str, brokers: str) -> None:
        self._connect = connect
        self.schema = schema
        self.shared = brokers == "many"
        self.slot = 0
        self.epoch = 0
        self.ok = False
        self.on_notify: Callable[[str], None] | None = None
        self._db: PgConnection | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._take()  # raises BrokerConflict or a psycopg error: the broker does not start

    def start(self) -> None:
        """Start reading announcements (once the broker can take them)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="kittiwake-presence", daemon=True)
            self._thread.start()

    def _take(self) -> None:
        db = self._connect()
        try:
            serving = lock_space(self.schema, "serving")
            how = "pg_try_advisory_lock_shared" if self.shared else "pg_try_advisory_lock"
            if not one_value(db, f"SELECT {how}(%s)", (serving,)):
                raise BrokerConflict(
                    f"schema {self.schema!r} is served by "
                    + ("a broker that runs alone (brokers=one)" if self.shared else "another broker")
                    + ": start every broker of a schema with brokers=many in the store URL "
                    "(postgresql://…?brokers=many) to run several",
                    self.schema,
                )
            if self.shared:
                slots = lock_space(self.schema, "slot")
                for slot in range(MAX_BROKERS):
                    if one_value(db, "SELECT pg_try_advisory_lock(%s, %s)", (slots, slot)):
                        self.slot = slot
                        break
                else:
                    raise BrokerConflict(f"schema {self.schema!r} already has {MAX_BROKERS} brokers", self.schema)
                db.execute(f'LISTEN "{channel_of(self.schema)}"')
        except BaseException:
            db.close()
            raise
        self._db = db
        self.epoch += 1
        self.ok = True

    def _run(self) -> None:
        while not self._stop.is_set():
            db = self._db
            try:
                if db is None:
                    raise ConnectionError("no session")
                if not self.shared:
                    # nothing to read: look at the session now and then so a lost one is noticed
                    self._stop.wait(LISTEN_POLL_SECS)
                    db.execute("SELECT 1")
                    continue
                for notice in db.notifies(timeout=LISTEN_POLL_SECS):
                    callback = self.on_notify
                    if callback is not None:
                        callback(notice.payload)
            except Exception as exc:
                if self._stop.is_set():
                    return
                self._lost(exc)

    def _lost(self, exc: BaseException) -> None:
        self.ok = False
        log.warning("lost the broker's PostgreSQL session (%s); reconnecting", " ".join(str(exc).split()))
        self._close_db()
        while not self._stop.wait(RECONNECT_SECS):
            try:
                self._take()
            except Exception as again:
                log.warning("PostgreSQL session not back yet: %s", " ".join(str(again).split()))
                continue
            log.info("broker's PostgreSQL session back (slot %d)", self.slot)
            callback = self.on_notify
            if callback is not None:
                callback("*")  # announcements may have been missed meanwhile
            return

    def _close_db(self) -> None:
        db, self._db = self._db, None
        if db is not None:
            try:
                db.close()
            except Exception:
                pass

    def close(self) -> None:
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=LISTEN_POLL_SECS + 1.0)
        self._close_db()
        self.ok = False
