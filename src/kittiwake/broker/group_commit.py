"""Group commit: run a batch of requests against the engine, commit once, then reply.

Theory of operation. Connections hand decoded requests to `submit`, which
appends them to the pending list and schedules one pass with `call_soon`. A
pass takes everything pending (up to `MAX_PASS_REQUESTS`) and, with one
`now`, calls the engine for each request and encodes the reply at once (the
engine returns live objects that a later request in the same pass may
change). Then it retries parked long-polls on the queues that gained tasks,
answers long-polls past their deadline, and calls `store.commit()` once. Only
after the commit are the replies written, one `transport.write` per
connection. So nothing answers ok before its change is durable, and the batch
grows on its own with load: requests pile up while a commit runs and all ride
the next one (TaskMaster §5.3).

The engine work of a pass is an *attempt* that only collects what it would
do (replies, long-polls to park, requests to defer); the broker's own state
changes when the attempt has finished. That is what lets a pass start over.

Failures, and what each reply then says:

* a `KittiwakeError` from the engine: that request gets its error code; the
  engine checks a request whole before changing anything, so the rest of the
  pass is unaffected;
* any other exception from the engine is a bug. It is logged with its
  traceback; the store is rolled back (the bug may have left an atomic update
  half written), the engine is rebuilt from what is on disk, and the attempt
  starts over without that request, which gets `INTERNAL` and had no effect.
  One client's poison request costs the others a replay, not their requests.
  After `MAX_BUGS_PER_PASS` bugs the pass gives up as below;
* the commit, or a store read inside an engine call, fails (disk full,
  read-only, I/O error: the store raises `errors.StorageFailure`, naming the
  fault): the store is rolled back, the engine rebuilt, and
  every request of the pass answered `UNAVAILABLE` (long-polls just served
  stay parked instead). The reply names the fault (`kittiwake.store.faults`)
  and says whether the change was not applied, or, when the commit itself
  failed with an I/O error, that its outcome is unknown: the fsync may have
  failed after the whole transaction reached the file. The engine is rebuilt
  only after a successful rollback. The broker keeps serving and tries again,
  so service resumes by itself when the fault clears; while failures go on,
  it tries writing about once a second and serves only reads in between
  (`store_health`).

The server's ticks ask for passes too: `request_sweep` (expired leases go back
to their queues, which wakes long-polls) and `request_maintenance`
(`Engine.maintain`, then reaping rows of dropped queues).
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from kittiwake import errors
from kittiwake.broker import dispatch
from kittiwake.broker.connection import WRITE_BUFFER_HIGH, Connection, error_frame
from kittiwake.broker.store_health import StoreHealth
from kittiwake.broker.waiters import Waiter, WaiterBook
from kittiwake.engine import Engine, TaskStore
from kittiwake.model import LeaseRequest
from kittiwake.protocol import encode_frame, encode_ok
from kittiwake.protocol import messages as m
from kittiwake.errors import StorageFault
from kittiwake.store.faults import outcome_known

log = logging.getLogger("kittiwake.broker")

# A pass holds every reply until its commit; these bound that memory and the
# time one pass keeps the event loop. The rest waits for the next pass.
MAX_PASS_REQUESTS = 20_000
MAX_PASS_REPLY_BYTES = 64 * 1024 * 1024
MAX_BUGS_PER_PASS = 3
REAP_ROWS_PER_TICK = 1000

# How an UNAVAILABLE reply ends: the broker knows the change was not applied,
# or a commit failed in a way that leaves its outcome unknown.
NOT_APPLIED = "it was not applied"
OUTCOME_UNKNOWN = "it may or may not have been applied, as when a connection is lost"

Item = m.Request | bytes  # a decoded request, or an error reply encoded at decode time


class ReplyKind(enum.Enum):
    """What a held reply becomes if the pass's commit fails."""

    FIXED = "fixed"  # depends on no write (a decode error, a bug, an expired long-poll): sent as is
    REQUEST = "request"  # answers a request of this pass: replaced by UNAVAILABLE
    WAITER = "waiter"  # a parked long-poll served in this pass: stays parked instead


@dataclass(slots=True)
class HeldReply:
    connection: Connection
    request_id: int
    frame: bytes
    kind: ReplyKind
    waiter: Waiter | None = None


@dataclass(slots=True)
class Park:
    """A long-poll lease of this pass that found nothing."""

    connection: Connection
    request_id: int
    lease: LeaseRequest
    deadline: float  # time.monotonic()
    index: int  # of its request in the batch


@dataclass(slots=True)
class Attempt:
    """What one run of a pass's engine work would do; applied only once it finishes."""

    held: list[HeldReply] = field(default_factory=list)
    park: list[Park] = field(default_factory=list)
    defer: list[tuple[Connection, Item]] = field(default_factory=list)
    cancelled: list[Waiter] = field(default_factory=list)  # long-polls withdrawn by cancel_wait
    taken: int = 0  # batch items dealt with; the rest goes back to pending
    writes: bool = False  # a request that may write ran (its commit proves the disk takes writes)


class StorageFailure(Exception):
    """The pass's writes cannot be made durable; the pass is answered UNAVAILABLE."""

    def __init__(self, message: str, fault: StorageFault | None = None) -> None:
        super().__init__(message)
        self.fault = fault


class EngineBug(Exception):
    """An engine call raised something that is not a KittiwakeError; `key` names what to skip."""

    def __init__(self, key: tuple[Any, ...]) -> None:
        super().__init__(repr(key))
        self.key = key


class GroupCommit:
    """The pending requests, the parked long-polls and the engine of one broker."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        store: TaskStore,
        make_engine: Callable[[], Engine],
        max_frame: int,
    ) -> None:
        self.loop = loop
        self.store = store
        self.make_engine = make_engine
        self.max_frame = max_frame
        self.waiters = WaiterBook()
        self.engine: Engine | None = None
        self.passes = 0
        self.failed_passes = 0
        self.bugs = 0
        self.health = StoreHealth()
        self._pending: list[tuple[Connection, Item]] = []
        self._scheduled: asyncio.Handle | None = None
        self._sweep_due = False
        self._maintenance_due = False
        self._retry_every_waiter = False

    # -------------------------------------------------------------- inputs

    def start(self, now: float) -> None:
        """Build the first engine from the store; raises if the store cannot be read."""
        engine = self.make_engine()
        engine.recover(now)
        self.engine = engine

    def submit(self, connection: Connection, item: Item) -> None:
        self._pending.append((connection, item))
        self._schedule()

    def resubmit(self, connection: Connection, items: list[Item]) -> None:
        # in front: whatever of this connection is still pending arrived after them
        self._pending[:0] = [(connection, item) for item in items]
        self._schedule()

    def request_sweep(self) -> None:
        self._sweep_due = True
        self._schedule()

    def request_maintenance(self) -> None:
        self._maintenance_due = True
        self._schedule()

    def drop_connection(self, connection: Connection) -> None:
        self.waiters.drop_connection(connection)

    def end_waits(self, connection: Connection) -> None:
        """Answer a half-closed connection's parked long-polls with an empty list."""
        mine = self.waiters.of_connection(connection)
        for waiter in mine:
            self.waiters.remove(waiter)
        if mine:
            connection.deliver([encode_frame(encode_ok(waiter.request_id, [])) for waiter in mine])

    def _schedule(self) -> None:
        if self._scheduled is None:
            self._scheduled = self.loop.call_soon(self.run_pass)

    # ---------------------------------------------------------------- pass

    def run_pass(self) -> None:
        """One group-commit pass; never raises."""
        self._scheduled = None
        self.passes += 1
        batch = self._pending
        self._pending = batch[MAX_PASS_REQUESTS:]
        del batch[MAX_PASS_REQUESTS:]
        if self._pending:
            self._schedule()
        now = time.time()
        paused = self.health.writes_paused()
        if paused:
            housekeeping = (False, False)  # due still: the first pass that may write does it
        else:
            housekeeping = (self._sweep_due, self._maintenance_due)
            self._sweep_due = self._maintenance_due = False
        poisoned: set[tuple[Any, ...]] = set()
        attempt: Attempt | None = None
        committing = tried = False
        try:
            while attempt is None:
                if self.engine is None:
                    self._rebuild(now)
                    if self.engine is None:
                        raise StorageFailure("no engine: the store failed", self.health.fault)
                tried = True
                try:
                    attempt = self._attempt(batch, housekeeping, poisoned, paused, now)
                except EngineBug as bug:
                    self.bugs += 1
                    poisoned.add(bug.key)
                    self._rollback()
                    self._rebuild(now)
                    if len(poisoned) >= MAX_BUGS_PER_PASS:
                        raise StorageFailure(f"{len(poisoned)} bugs in one pass") from None
            self._apply(batch, attempt, paused)
            committing = True
            self.store.commit()
        except Exception as exc:  # StorageFailure, or the commit itself failed
            self.failed_passes += 1
            fault = exc.fault if isinstance(exc, (StorageFailure, errors.StorageFailure)) else None
            self.health.pass_failed(exc, fault, len(batch), tried)
            held = self._fail(batch, attempt, poisoned, now, unavailable_error(fault, committing))
        else:
            self.health.pass_committed(attempt.writes)
            held = attempt.held
            for reply in held:
                if reply.waiter is not None:
                    self.waiters.remove(reply.waiter)
        held.extend(self._expired_long_polls())
        self._send(held)

    def _attempt(
        self,
        batch: list[tuple[Connection, Item]],
        housekeeping: tuple[bool, bool],
        poisoned: set[tuple[Any, ...]],
        paused: bool,
        now: float,
    ) -> Attempt:
        """The engine work of a pass; raises EngineBug or StorageFailure, changes no broker state.

        While writes are `paused`, only read-only requests run; the others are
        answered UNAVAILABLE and parked long-polls are not retried."""
        attempt = Attempt()
        if ("housekeeping",) not in poisoned:
            self._housekeeping(housekeeping, now)
        self._serve(batch, attempt, poisoned, paused, now)
        if not paused:
            self._retry_long_polls(attempt, poisoned, now)
        return attempt

    def _housekeeping(self, housekeeping: tuple[bool, bool], now: float) -> None:
        sweep, maintain = housekeeping
        with EngineCall(("housekeeping",)):
            engine = self._engine()
            if sweep:
                engine.sweep(now)
            if maintain:
                engine.maintain(now)
                self.store.reap(REAP_ROWS_PER_TICK)

    def _serve(
        self,
        batch: list[tuple[Connection, Item]],
        attempt: Attempt,
        poisoned: set[tuple[Any, ...]],
        paused: bool,
        now: float,
    ) -> None:
        reply_bytes = 0
        held_by_connection: dict[Connection, int] = {}
        deferring: set[Connection] = set()
        for index, (connection, item) in enumerate(batch):
            if reply_bytes >= MAX_PASS_REPLY_BYTES:
                return
            attempt.taken = index + 1
            # A closed connection's requests still run (a client may send and
            # go, fire-and-forget); only its leases are skipped, in `_lease`.
            if not connection.closed and (
                connection in deferring
                or connection.deferred
                or connection.write_paused
                or held_by_connection.get(connection, 0) >= WRITE_BUFFER_HIGH
            ):
                # its output is full: answering now would only grow the buffer
                deferring.add(connection)
                attempt.defer.append((connection, item))
                continue
            if isinstance(item, bytes):
                frame: bytes | None = item
                attempt.held.append(HeldReply(connection, 0, item, ReplyKind.FIXED))
            elif ("request", index) in poisoned:
                frame = error_frame(item.id, errors.InternalError("the broker hit a bug; the request had no effect"))
                attempt.held.append(HeldReply(connection, item.id, frame, ReplyKind.FIXED))
            elif type(item) is m.CancelWait:
                frame = self._cancel_wait(connection, item, attempt)
            elif paused and type(item) not in dispatch.READ_ONLY_REQUESTS:
                fault = self.health.fault
                what = f" ({fault.value})" if fault is not None else ""
                frame = error_frame(item.id, errors.Unavailable(
                    f"the broker is not writing for a moment after a storage failure{what}; {NOT_APPLIED}"
                ))
                attempt.held.append(HeldReply(connection, item.id, frame, ReplyKind.FIXED))
            elif type(item) is m.Lease:
                attempt.writes = True
                frame = self._lease(connection, item, index, attempt, now)
            else:
                attempt.writes = attempt.writes or type(item) not in dispatch.READ_ONLY_REQUESTS
                with EngineCall(("request", index), item, connection):
                    frame = self._reply(item.id, lambda: dispatch.execute(self._engine(), item, connection.peer, now))
                attempt.held.append(HeldReply(connection, item.id, frame, ReplyKind.REQUEST))
            if frame is not None:
                reply_bytes += len(frame)
                held_by_connection[connection] = held_by_connection.get(connection, 0) + len(frame)

    def _lease(self, connection: Connection, request: m.Lease, index: int, attempt: Attempt, now: float) -> bytes | None:
        """A lease; None when it is to be parked as a long-poll or its connection is gone."""
        if connection.closed:
            return None  # nobody would learn the lease ids: keep the tasks in circulation
        try:
            wait_secs = dispatch.validate_wait(request, self._engine().limits)
        except errors.KittiwakeError as exc:
            frame = error_frame(request.id, exc)
        else:
            lease = dispatch.lease_request(request, connection.peer)
            with EngineCall(("request", index), request, connection):
                try:
                    tasks = self._engine().lease(lease, now)
                except errors.StorageFailure:
                    raise
                except errors.KittiwakeError as exc:
                    frame = error_frame(request.id, exc)
                else:
                    if not tasks and wait_secs > 0 and not connection.ended:
                        attempt.park.append(Park(connection, request.id, lease, time.monotonic() + wait_secs, index))
                        return None
                    frame = self._reply(request.id, lambda: tasks)
        attempt.held.append(HeldReply(connection, request.id, frame, ReplyKind.REQUEST))
        return frame

    def _cancel_wait(self, connection: Connection, request: m.CancelWait, attempt: Attempt) -> bytes:
        """Answer a parked long-poll of this connection with nothing, then the cancel itself.

        Like all of an attempt's effects, taking the waiter out of the book waits
        for `_apply`; until then `attempt.cancelled` keeps retries off it."""
        request_id = request.request_id
        found = False
        for waiter in self.waiters.of_connection(connection):
            if waiter.request_id == request_id and waiter not in attempt.cancelled:
                attempt.cancelled.append(waiter)
                found = True
                break
        else:
            for park in attempt.park:  # parked earlier in this same pass
                if park.connection is connection and park.request_id == request_id:
                    attempt.park.remove(park)
                    found = True
                    break
        if found:
            empty = encode_frame(encode_ok(request_id, []))
            attempt.held.append(HeldReply(connection, request_id, empty, ReplyKind.FIXED))
        frame = encode_frame(encode_ok(request.id, {"cancelled": found}))
        attempt.held.append(HeldReply(connection, request.id, frame, ReplyKind.FIXED))
        return frame

    def _retry_long_polls(self, attempt: Attempt, poisoned: set[tuple[Any, ...]], now: float) -> None:
        """Retry parked long-polls on queues that gained tasks, oldest first, then this pass's own."""
        engine = self._engine()
        ready = engine.take_ready()
        if self._retry_every_waiter:
            candidates = self.waiters.everyone()
        elif ready and len(self.waiters):
            candidates = self.waiters.on_queues(ready)
        else:
            candidates = []
        drained: set[str] = set()  # queues an unrestricted lease found empty in this pass
        for waiter in candidates:
            connection = waiter.connection
            assert isinstance(connection, Connection)
            if connection.closed or waiter in attempt.cancelled:
                continue  # dropped from the book when the connection went
            if ("waiter", waiter.seq) in poisoned:
                frame = error_frame(waiter.request_id, errors.InternalError("the broker hit a bug; the request had no effect"))
                attempt.held.append(HeldReply(connection, waiter.request_id, frame, ReplyKind.FIXED, waiter))
                continue
            with EngineCall(("waiter", waiter.seq)):
                frame = self._retry(waiter.lease, waiter.queues, drained, waiter.request_id, now)
            if frame is not None:
                attempt.held.append(HeldReply(connection, waiter.request_id, frame, ReplyKind.WAITER, waiter))
        if ready or self._retry_every_waiter:
            for park in list(attempt.park):
                if ready.isdisjoint(park.lease.queues) and not self._retry_every_waiter:
                    continue
                queues = tuple(dict.fromkeys(park.lease.queues))
                with EngineCall(("request", park.index)):
                    frame = self._retry(park.lease, queues, drained, park.request_id, now)
                if frame is not None:
                    attempt.park.remove(park)
                    attempt.held.append(HeldReply(park.connection, park.request_id, frame, ReplyKind.REQUEST))

    def _retry(self, lease: LeaseRequest, queues: tuple[str, ...], drained: set[str], request_id: int, now: float) -> bytes | None:
        """One more try of a long-poll; its reply, or None to keep waiting."""
        unrestricted = lease.receiver is None and lease.max_pid is None
        if unrestricted and drained.issuperset(queues):
            return None  # an earlier try in this pass found these queues empty
        try:
            tasks = self._engine().lease(lease, now)
        except errors.StorageFailure:
            raise
        except errors.KittiwakeError as exc:
            return error_frame(request_id, exc)
        if unrestricted and len(tasks) < lease.max_tasks:
            drained.update(queues)
        return self._reply(request_id, lambda: tasks) if tasks else None

    def _apply(self, batch: list[tuple[Connection, Item]], attempt: Attempt, paused: bool) -> None:
        """The attempt finished: park its long-polls, defer what it deferred, requeue what it left."""
        if not paused:  # a paused attempt retried no long-poll
            self._retry_every_waiter = False
        for waiter in attempt.cancelled:
            self.waiters.remove(waiter)
        for park in attempt.park:
            self.waiters.park(park.connection, park.request_id, park.lease, park.deadline)
        for connection, item in attempt.defer:
            connection.defer(item)
        if attempt.taken < len(batch):
            # over the pass's reply budget: first in line for the next pass
            self._pending[:0] = batch[attempt.taken :]
            self._schedule()

    def _expired_long_polls(self) -> list[HeldReply]:
        if not len(self.waiters):
            return []
        held = []
        for waiter in self.waiters.expired(time.monotonic()):
            connection = waiter.connection
            assert isinstance(connection, Connection)
            held.append(HeldReply(connection, waiter.request_id, encode_frame(encode_ok(waiter.request_id, [])), ReplyKind.FIXED))
        return held

    # ------------------------------------------------------------ helpers

    def _engine(self) -> Engine:
        engine = self.engine
        if engine is None:
            raise StorageFailure("no engine: the store could not be read")
        return engine

    def _reply(self, request_id: int, result: Callable[[], Any]) -> bytes:
        """The reply frame of an engine result, or of the KittiwakeError it raised."""
        try:
            body = encode_ok(request_id, result())
        except errors.StorageFailure:
            raise
        except errors.KittiwakeError as exc:
            return error_frame(request_id, exc)
        if len(body) > self.max_frame:
            # the client could not read it; better an error it can read
            return error_frame(
                request_id,
                errors.FrameTooLarge(f"the reply is {len(body)} bytes, over the max frame; ask for fewer items"),
            )
        return encode_frame(body)

    # ------------------------------------------------------------ failures

    def _rollback(self) -> None:
        """Close the failed pass's transaction now; `_rebuild` rolls back again and reports a failure."""
        try:
            self.store.rollback()
        except Exception as exc:
            log.debug("rolling back the store failed: %r", exc)

    def _rebuild(self, now: float) -> None:
        """A fresh engine from what is durable, or None while the store fails (see `store_health`).

        The rollback comes first and must succeed: a transaction left open
        would hand the failed pass's writes to the new engine, and the next
        commit would make durable what was answered UNAVAILABLE."""
        self.engine = None
        if not self.health.may_rebuild():
            return
        try:
            self.store.rollback()
            engine = self.make_engine()
            engine.recover(now)
        except Exception as exc:
            self.health.rebuild_failed(exc, exc.fault if isinstance(exc, errors.StorageFailure) else None)
            return
        self.health.rebuilt()
        self.engine = engine
        # the new engine knows nothing of which queues gained tasks: let every
        # parked long-poll look once
        self._retry_every_waiter = True

    def _fail(
        self,
        batch: list[tuple[Connection, Item]],
        attempt: Attempt | None,
        poisoned: set[tuple[Any, ...]],
        now: float,
        unavailable: errors.Unavailable,
    ) -> list[HeldReply]:
        """Nothing of the pass is durable: roll back, rebuild, and answer every request UNAVAILABLE."""
        self._rollback()
        self._rebuild(now)
        internal = errors.InternalError("the broker hit a bug; the request had no effect")
        if attempt is not None:
            # parked and deferred items were already applied; they keep waiting
            held = []
            for reply in attempt.held:
                if reply.kind is ReplyKind.REQUEST:
                    reply.frame = error_frame(reply.request_id, unavailable)
                elif reply.kind is ReplyKind.WAITER:
                    continue  # stays parked
                elif reply.waiter is not None:
                    self.waiters.remove(reply.waiter)  # a long-poll answered INTERNAL
                held.append(reply)
            return held
        held = []
        for index, (connection, item) in enumerate(batch):
            if isinstance(item, bytes):
                held.append(HeldReply(connection, 0, item, ReplyKind.FIXED))
            else:
                error = internal if ("request", index) in poisoned else unavailable
                held.append(HeldReply(connection, item.id, error_frame(item.id, error), ReplyKind.FIXED))
        return held

    # ------------------------------------------------------------- replies

    def _send(self, held: list[HeldReply]) -> None:
        by_connection: dict[Connection, list[bytes]] = {}
        for reply in held:
            frames = by_connection.get(reply.connection)
            if frames is None:
                by_connection[reply.connection] = [reply.frame]
            else:
                frames.append(reply.frame)
        for connection, frames in by_connection.items():
            connection.deliver(frames)

    # ------------------------------------------------------------ shutdown

    def finish(self) -> None:
        """Shutdown: serve everything pending, answer every long-poll with nothing, close the store."""
        while self._pending:
            if self._scheduled is not None:
                self._scheduled.cancel()
                self._scheduled = None
            self.run_pass()
        if self._scheduled is not None:
            self._scheduled.cancel()
            self._scheduled = None
        held: list[HeldReply] = []
        for waiter in self.waiters.everyone():
            self.waiters.remove(waiter)
            connection = waiter.connection
            assert isinstance(connection, Connection)
            held.append(HeldReply(connection, waiter.request_id, encode_frame(encode_ok(waiter.request_id, [])), ReplyKind.FIXED))
        self._send(held)
        self.store.close()


def unavailable_error(fault: StorageFault | None, committing: bool) -> errors.Unavailable:
    """The UNAVAILABLE reply of a failed pass: what failed, and whether the change may have been applied."""
    what = f" ({fault.value})" if fault is not None else ""
    if committing and not outcome_known(fault):
        return errors.Unavailable(f"the change could not be confirmed durable{what}; {OUTCOME_UNKNOWN}")
    return errors.Unavailable(f"the change could not be made durable{what}; {NOT_APPLIED}")


class EngineCall:
    """Context of one engine call: passes store failures on as StorageFailure and turns bugs into EngineBug."""

    __slots__ = ("key", "request", "connection")

    def __init__(
        self, key: tuple[Any, ...], request: m.Request | None = None, connection: Connection | None = None
    ) -> None:
        self.key = key
        self.request = request
        self.connection = connection

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, traceback: Any) -> bool:
        if exc is None or isinstance(exc, (StorageFailure, EngineBug)):
            return False
        if isinstance(exc, errors.StorageFailure):
            raise StorageFailure(str(exc), exc.fault) from exc
        if isinstance(exc, Exception):
            what = f"{self.request.op} request {self.request.id}" if self.request is not None else self.key[0]
            peer = self.connection.peer if self.connection is not None else "-"
            log.error("bug serving %s from %s; rolling back and starting the pass over without it", what, peer, exc_info=exc)
            raise EngineBug(self.key) from exc
        return False
