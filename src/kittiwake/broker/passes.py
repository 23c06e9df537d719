"""One group-commit pass: run a batch of requests against the engine, commit once, say what to reply.

Pure: no sockets, no event loop, no clock of its own (the wall and monotonic
clocks are passed in), no knowledge of which database the store is. The
asyncio shell (`group_commit`) submits requests, asks for a pass when there is
work, and writes what a pass returns; the seeded simulation
(`tests/broker/test_pass_simulation.py`) drives the same passes with no
sockets at all.

Theory of operation. A pass takes everything pending (up to `max_requests`,
and at most `MAX_WIDE_READS_PER_CONNECTION` reads of one connection that
walk every queue, `MAX_WIDE_READS_PER_PASS` in all: `_take_batch`) and, with
one `now`, runs each request through `dispatch.execute` — every op,
long-polls included — and encodes its reply at once (the engine returns live
objects that a later request in the same pass may change). A lease with
`wait_secs > 0` that comes back empty is parked instead of answered;
`cancel_wait` withdraws one (`long_polls`). Then the pass retries parked
long-polls on the queues that gained tasks and calls `store.commit()` once;
what it holds until then, and the words of its errors, are in
`pass_replies`. The replies are returned, one list per connection in the
order they were made, only after the commit: nothing answers ok before its
change is durable, and the batch grows on its own with load, as requests pile
up while a commit runs (TaskMaster §5.3). A connection's replies keep the
order of its requests (long-polls aside): once one of its requests is
deferred, because its output is full, the later ones wait behind it.

What a pass did for the metrics: the engine records each task move in its
tally (`engine.tally`), which the pass empties before each attempt and hands
over with its outcome only once the commit succeeded, with the commit's time
on the monotonic clock (when the pass wrote anything). A failed attempt's
tally goes with the engine it throws away (the rebuilt one starts empty), so
a move is counted once, and only when durable (a commit that reached the
disk and then raised is not: the broker cannot tell it happened).

The engine work of a pass is an *attempt* that only collects what it would do
(replies, long-polls to park, requests to defer); the pass's own state changes
when the attempt has finished. That is what lets a pass start over.

Failures, and what each reply then says:

* a `KittiwakeError` from the engine: that request gets its error code; the
  engine checks a request whole before changing anything, so the rest of the
  pass is unaffected;
* `errors.StorageFailure`, which every store raises for its own disk's errors,
  from a read inside an engine call or from the commit (disk full, read-only,
  I/O error): the store is rolled back, the engine rebuilt, and every request
  of the pass answered `UNAVAILABLE` (long-polls just served stay parked
  instead). The reply names the fault and says whether the change was not
  applied or, when the store says the commit's outcome is unknown (an fsync
  may have failed after the whole transaction reached the file), that it may
  have been. Anything else raised by the commit counts as a failure of unknown
  outcome. The engine is rebuilt only after a successful rollback. The pass
  after keeps serving and tries again, so service resumes by itself when the
  fault clears; while failures go on, writes are tried about once a second and
  only reads are served in between (`store_health`);
* any other exception from an engine call is a bug. It is logged with its
  traceback; the store is rolled back (the bug may have left an atomic update
  half written), the engine is rebuilt from what is on disk, and the attempt
  starts over without that request, which gets `INTERNAL` and had no effect.
  One client's poison request costs the others a replay, not their requests.
  After `MAX_BUGS_PER_PASS` bugs the pass gives up as above.

* a `StorageFailure` of fault CONFLICT while the engine works (brokers sharing
  a store waited on each other in a cycle, or too long): the store is rolled
  back, the engine rebuilt, and the attempt runs again, up to
  MAX_CONFLICT_RETRIES times, before the pass fails as above.

Request extensions (`extensions`, a cluster node): each one's `check` runs on
every request before its handler, in the pass, whichever face it came from; a
refusal is that request's error. Their ops join the handler table as read-only.

Brokers sharing a store (`engine.coherence`): before the engine work, a pass
claims every queue its requests name (`claims`), with those its sweep will
reach, in one call; `wake` marks queues other brokers announced as changed, so
that long-polls parked on them try again.

The server's ticks ask for passes too: `request_sweep` (expired leases go back
to their queues, which wakes long-polls) and `request_maintenance`
(`Engine.maintain`, then `store.reap`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from collections.abc import Sequence
from typing import Any, Callable, cast

from kittiwake import errors
from kittiwake.broker import claims, dispatch
from kittiwake.broker.extensions import RequestExtension, handlers_of
from kittiwake.broker.long_polls import LongPolls
from kittiwake.broker.pass_replies import (
    Attempt,
    Caller,
    HeldReply,
    Park,
    ReplyKind,
    by_connection,
    error_frame,
    internal_error,
    ok_frame,
    paused_error,
    unavailable_error,
)
from kittiwake.broker.store_health import StoreHealth
from kittiwake.engine import Engine, TaskStore
from kittiwake.engine.tally import Tally
from kittiwake.errors import StorageFault
from kittiwake.protocol import messages as m
from kittiwake.protocol.replies import CancelWaitResult

log = logging.getLogger("kittiwake.broker")

# A pass holds every reply until its commit; these bound that memory and the
# time one pass keeps the event loop. The rest waits for the next pass.
MAX_PASS_REQUESTS = 20_000
MAX_PASS_REPLY_BYTES = 64 * 1024 * 1024
# Reads whose work grows with every queue the broker holds (a listing, stats by pattern, reads across
# queues filtered by the caller's rights): a pass runs at most this many of one connection, and this
# many in all; the rest, with everything their connections sent after them, go in the next passes, in
# turn, so a client pipelining them delays itself, not the others.
MAX_WIDE_READS_PER_CONNECTION = 4
MAX_WIDE_READS_PER_PASS = 16
WIDE_READS = (m.ListQueues, m.Stats, m.FindBySender, m.QueuesForReceiver, m.ListJoins)  # and their scoped twins
MAX_BUGS_PER_PASS = 3
MAX_CONFLICT_RETRIES = 3
REAP_ROWS_PER_TICK = 1000

Item = m.Request | bytes  # a decoded request, or an error reply encoded at decode time
Pending = tuple["Caller", Item]
Clock = Callable[[], float]


@dataclass(frozen=True, slots=True)
class PassLimits:
    max_frame: int  # a reply above it is replaced by FRAME_TOO_LARGE
    max_held_bytes: int  # of one connection's replies in a pass; then its requests wait (its write buffer)
    max_requests: int = MAX_PASS_REQUESTS
    max_reply_bytes: int = MAX_PASS_REPLY_BYTES


@dataclass(slots=True)
class PassOutcome:
    """What the shell does after a pass: defer `deferred` on their connections, then write `replies`."""

    replies: dict[Caller, list[bytes]]  # per connection, in the order made; each frame answers one request
    deferred: list[tuple[Caller, Item]]  # not run: their connection's output is full
    committed: bool  # False: the pass failed and nothing of it is durable (or its outcome is unknown)
    tally: Tally | None = None  # the task moves the pass made durable; None unless it committed
    commit_secs: float | None = None  # how long its commit took, when it committed something it wrote


class PassFailed(Exception):
    """The pass cannot go on (no engine, too many bugs); it is answered UNAVAILABLE, not applied."""

    def __init__(self, message: str, fault: StorageFault | None = None) -> None:
        super().__init__(message)
        self.fault = fault


class EngineBug(Exception):
    """An engine call raised something that is not a KittiwakeError; `key` names what to skip."""

    def __init__(self, key: tuple[Any, ...]) -> None:
        super().__init__(repr(key))
        self.key = key


class Passes:
    """The pending requests, the parked long-polls and the engine of one broker."""

    def __init__(
        self,
        store: TaskStore,
        make_engine: Callable[[], Engine],
        limits: PassLimits,
        *,
        wall_clock: Clock,
        monotonic_clock: Clock,
        extensions: Sequence[RequestExtension] = (),
    ) -> None:
        self.store = store
        # request extensions (`extensions`): their checks run before every request, their ops
        # answer beside the broker's own, read-only
        self.checks = [extension.check for extension in extensions]
        self.handlers = dispatch.HANDLERS
        self.read_only = dispatch.READ_ONLY_REQUESTS
        if extensions:
            extra = handlers_of(extensions)
            self.handlers = {**dispatch.HANDLERS, **extra}
            self.read_only = dispatch.READ_ONLY_REQUESTS | frozenset(extra)
        self.make_engine = make_engine
        self.limits = limits
        self.wall_clock = wall_clock  # the engine's `now`: lease expiries, FIFO pids
        self.monotonic_clock = monotonic_clock  # long-poll deadlines and the outage's pace
        self.long_polls = LongPolls(limits.max_frame, limits.max_held_bytes)
        self.engine: Engine | None = None
        self.health = StoreHealth(monotonic_clock)
        self.passes = 0
        self.failed_passes = 0
        self.bugs = 0
        self.conflicts = 0
        self.pending: list[tuple[Caller, Item]] = []
        self._sweep_due = False
        self._maintenance_due = False

    # -------------------------------------------------------------- inputs

    def start(self, now: float) -> None:
        """Build the first engine from the store; raises if the store cannot be read."""
        engine = self.make_engine()
        engine.recover(now)
        self.engine = engine

    def submit(self, connection: Caller, item: Item) -> None:
        self.pending.append((connection, item))

    def resubmit(self, connection: Caller, items: list[Item]) -> None:
        # in front: whatever of this connection is still pending arrived after them
        self.pending[:0] = [(connection, item) for item in items]

    def request_sweep(self) -> None:
        self._sweep_due = True

    def request_maintenance(self) -> None:
        self._maintenance_due = True

    def wake(self, queues: list[str] | None) -> None:
        """Other brokers changed these queues (None: perhaps any): parked long-polls on them look again."""
        if queues is None:
            self.long_polls.retry_everyone = True
        elif self.engine is not None:
            self.engine.state.ready.update(queues)

    def wake_connection(self, connection: Caller) -> None:
        """`connection`'s output drained: its parked long-polls, skipped while it was full, look again."""
        queues = self.long_polls.queues_of(connection)
        if queues and self.engine is not None:
            self.engine.state.ready.update(queues)

    def drop_connection(self, connection: Caller) -> None:
        self.long_polls.drop(connection)

    def end_waits(self, connection: Caller) -> list[bytes]:
        """The replies to a half-closed connection's parked long-polls: each an empty list."""
        return self.long_polls.end(connection)

    def end_every_wait(self) -> dict[Caller, list[bytes]]:
        """Shutdown: answer every parked long-poll with an empty list."""
        return by_connection(self.long_polls.end_all())

    # ---------------------------------------------------------------- pass

    def run(self) -> PassOutcome:
        """One group-commit pass over what is pending; never raises."""
        self.passes += 1
        batch, self.pending = self._take_batch(self.pending)
        now = self.wall_clock()
        paused = self.health.writes_paused()
        if paused:
            housekeeping = (False, False)  # due still: the first pass that may write does it
        else:
            housekeeping = (self._sweep_due, self._maintenance_due)
            self._sweep_due = self._maintenance_due = False
        poisoned: set[tuple[Any, ...]] = set()
        attempt: Attempt | None = None
        deferred: list[tuple[Caller, Item]] = []
        committing = tried = False
        conflicts = 0
        try:
            while attempt is None:
                engine = self.engine
                if engine is None:
                    self._rebuild(now)
                    engine = self.engine
                    if engine is None:
                        raise PassFailed("no engine: the store failed", self.health.fault)
                tried = True
                engine.state.tally = Tally()  # this attempt's moves, and nothing else's
                try:
                    attempt = self._attempt(engine, batch, housekeeping, poisoned, paused, now)
                except EngineBug as bug:
                    self.bugs += 1
                    poisoned.add(bug.key)
                    self._rollback()
                    self._rebuild(now)
                    if len(poisoned) >= MAX_BUGS_PER_PASS:
                        raise PassFailed(f"{len(poisoned)} bugs in one pass") from None
                except errors.StorageFailure as failure:
                    if failure.fault is not StorageFault.CONFLICT or conflicts >= MAX_CONFLICT_RETRIES:
                        raise
                    conflicts += 1
                    self.conflicts += 1
                    log.info("another broker held the queues (%s); running the pass again", failure)
                    self._rollback()
                    self._rebuild(now)
            deferred = self._apply(batch, attempt, paused)
            committing = True
            started = self.monotonic_clock()
            self.store.commit()
            commit_secs = self.monotonic_clock() - started
        except Exception as exc:  # a StorageFailure or PassFailed, or the commit failed otherwise
            self.failed_passes += 1
            fault: StorageFault | None
            if isinstance(exc, errors.StorageFailure):
                fault, outcome_known = exc.fault, exc.outcome_known
            elif isinstance(exc, PassFailed):
                fault, outcome_known = exc.fault, True
            else:  # not a store's own failure: a commit that raised it may have happened
                fault, outcome_known = None, not committing
            self.health.pass_failed(exc, fault, len(batch), tried)
            held = self._fail(batch, attempt, poisoned, now, unavailable_error(fault, outcome_known), deferred)
            return self._outcome(held, deferred, False)
        assert attempt is not None and engine is not None  # the loop ends with both
        self.health.pass_committed(attempt.writes)
        self.long_polls.served(attempt.held)
        # the moves are durable now
        tally, engine.state.tally = engine.state.tally, Tally()
        outcome = self._outcome(attempt.held, deferred, True)
        outcome.tally = tally
        outcome.commit_secs = commit_secs if attempt.writes or tally else None
        return outcome

    def _take_batch(self, pending: list[Pending]) -> tuple[list[Pending], list[Pending]]:
        """This pass's requests and those left for the next: at most `max_requests`, and wide reads
        within their bounds (`MAX_WIDE_READS_*`). A connection whose request is left leaves all it
        sent after it too, so its replies keep the order of its requests."""
        limit = self.limits.max_requests
        if not any(isinstance(item, WIDE_READS) for _, item in pending):
            return pending[:limit], pending[limit:]
        batch: list[Pending] = []
        rest: list[Pending] = []
        left: set[Caller] = set()  # connections with a request left for the next pass
        wide_of: dict[Caller, int] = {}
        wide = 0
        for entry in pending:
            connection, item = entry
            if len(batch) >= limit or connection in left:
                rest.append(entry)
                left.add(connection)
                continue
            if isinstance(item, WIDE_READS):
                mine = wide_of.get(connection, 0)
                if mine >= MAX_WIDE_READS_PER_CONNECTION or wide >= MAX_WIDE_READS_PER_PASS:
                    rest.append(entry)
                    left.add(connection)
                    continue
                wide_of[connection] = mine + 1
                wide += 1
            batch.append(entry)
        return batch, rest

    def _outcome(self, held: list[HeldReply], deferred: list[tuple[Caller, Item]], committed: bool) -> PassOutcome:
        held.extend(self.long_polls.expired(self.monotonic_clock()))
        return PassOutcome(by_connection(held), deferred, committed)

    def _attempt(
        self,
        engine: Engine,
        batch: list[tuple[Caller, Item]],
        housekeeping: tuple[bool, bool],
        poisoned: set[tuple[Any, ...]],
        paused: bool,
        now: float,
    ) -> Attempt:
        """The engine work of a pass; raises EngineBug or StorageFailure, changes no state of the pass.

        While writes are `paused`, only read-only requests run; the others are
        answered UNAVAILABLE and parked long-polls are not retried."""
        attempt = Attempt()
        sweep, maintain = housekeeping
        if engine.shared:
            requests = (item for _, item in batch)
            self._guarded(("claims",), "claims", lambda: engine.claim(claims.queues_named(requests), now if sweep else None))
        if (sweep or maintain) and ("housekeeping",) not in poisoned:
            self._guarded(("housekeeping",), "housekeeping", lambda: self._housekeeping(engine, sweep, maintain, now))
        self._serve(engine, batch, attempt, poisoned, paused, now)
        if not paused:
            self.long_polls.retry(engine, attempt, poisoned, now, self._guarded)
        return attempt

    def _housekeeping(self, engine: Engine, sweep: bool, maintain: bool, now: float) -> None:
        if sweep:
            engine.sweep(now)
        if maintain:
            engine.maintain(now)
            self.store.reap(REAP_ROWS_PER_TICK)

    def _serve(
        self,
        engine: Engine,
        batch: list[tuple[Caller, Item]],
        attempt: Attempt,
        poisoned: set[tuple[Any, ...]],
        paused: bool,
        now: float,
    ) -> None:
        limits = self.limits
        read_only = self.read_only
        reply_bytes = 0
        held_by_connection: dict[Caller, int] = {}
        deferring: set[Caller] = set()
        for index, (connection, item) in enumerate(batch):
            if reply_bytes >= limits.max_reply_bytes:
                return
            attempt.taken = index + 1
            # A closed connection's requests still run (a client may send and
            # go, fire-and-forget); only its leases are skipped, in `_request`.
            if not connection.closed and (
                connection in deferring
                or connection.deferred
                or connection.write_paused
                or held_by_connection.get(connection, 0) >= limits.max_held_bytes
            ):
                # its output is full: answering now would only grow the buffer
                deferring.add(connection)
                attempt.defer.append((connection, item))
                continue
            frame: bytes | None
            if isinstance(item, bytes):
                frame = item
                attempt.held.append(HeldReply(connection, 0, item, ReplyKind.FIXED))
            elif ("request", index) in poisoned:
                frame = error_frame(item.id, internal_error())
                attempt.held.append(HeldReply(connection, item.id, frame, ReplyKind.FIXED))
            elif paused and type(item) not in read_only:
                frame = error_frame(item.id, paused_error(self.health.fault))
                attempt.held.append(HeldReply(connection, item.id, frame, ReplyKind.FIXED))
            else:
                attempt.writes = attempt.writes or type(item) not in read_only
                frame = self._request(engine, connection, item, index, attempt, now)
            if frame is not None:
                reply_bytes += len(frame)
                held_by_connection[connection] = held_by_connection.get(connection, 0) + len(frame)

    def _request(
        self, engine: Engine, connection: Caller, request: m.Request, index: int, attempt: Attempt, now: float
    ) -> bytes | None:
        """Run one request through the handler table; its reply, or None when it is parked or its
        connection is gone."""
        kind = type(request)
        if kind is m.Lease and connection.closed:
            return None  # nobody would learn the lease ids: keep the tasks in circulation
        reply_kind = ReplyKind.REQUEST
        try:
            for check in self.checks:
                check(request)
            result = dispatch.execute(engine, request, connection.peer, now, self.handlers)
            if kind is m.Lease:
                wait_secs = cast(m.Lease, request).wait_secs  # checked by the handler
                if (not result and wait_secs > 0 and not connection.ended
                        and self.long_polls.may_park(connection, len(cast(m.Lease, request).queues), attempt)):
                    lease = dispatch.lease_request(cast(m.Lease, request), connection.peer)
                    deadline = self.monotonic_clock() + wait_secs
                    attempt.park.append(Park(connection, request.id, lease, deadline, index))
                    return None
            elif type(result) is dispatch.WithdrawWait:
                result = CancelWaitResult(self.long_polls.withdraw(connection, result.request_id, attempt))
                reply_kind = ReplyKind.FIXED  # the withdrawal stands whether or not the commit succeeds
            frame = ok_frame(request.id, result, self.limits.max_frame)
        except errors.StorageFailure:
            raise
        except errors.KittiwakeError as exc:
            frame = error_frame(request.id, exc)
        except Exception as exc:
            raise self._bug(("request", index), f"{request.op} request {request.id} from {connection.peer or '-'}", exc) from exc
        attempt.held.append(HeldReply(connection, request.id, frame, reply_kind))
        return frame

    def _apply(self, batch: list[tuple[Caller, Item]], attempt: Attempt, paused: bool) -> list[tuple[Caller, Item]]:
        """The attempt finished: park its long-polls, requeue what it left; returns what it deferred."""
        self.long_polls.apply(attempt, paused)
        if attempt.taken < len(batch):
            # over the pass's reply budget: first in line for the next pass
            self.pending[:0] = batch[attempt.taken :]
        return attempt.defer

    # ------------------------------------------------------------ failures

    def _guarded(self, key: tuple[Any, ...], what: str, call: Callable[[], Any]) -> Any:
        """`call()`, with a bug (anything but a StorageFailure) turned into EngineBug(key)."""
        try:
            return call()
        except errors.StorageFailure:
            raise
        except Exception as exc:
            raise self._bug(key, what, exc) from exc

    def _bug(self, key: tuple[Any, ...], what: str, exc: Exception) -> EngineBug:
        log.error("bug serving %s; rolling back and starting the pass over without it", what, exc_info=exc)
        return EngineBug(key)

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
        self.long_polls.retry_everyone = True  # it knows nothing of which queues gained tasks

    def _fail(
        self,
        batch: list[tuple[Caller, Item]],
        attempt: Attempt | None,
        poisoned: set[tuple[Any, ...]],
        now: float,
        unavailable: errors.Unavailable,
        deferred: list[tuple[Caller, Item]],
    ) -> list[HeldReply]:
        """Nothing of the pass is durable: roll back, rebuild, and answer every request UNAVAILABLE
        (but those of a connection with requests deferred before them, which wait their turn)."""
        self._rollback()
        self._rebuild(now)
        if attempt is not None:
            # parked and deferred items were already applied; they keep waiting
            held = []
            for reply in attempt.held:
                if reply.kind is ReplyKind.REQUEST:
                    reply.frame = error_frame(reply.request_id, unavailable)
                elif reply.kind is ReplyKind.WAITER:
                    continue  # stays parked
                elif reply.waiter is not None:
                    self.long_polls.served([reply])  # a long-poll answered INTERNAL
                held.append(reply)
            return held
        held = []
        for index, (connection, item) in enumerate(batch):
            if connection.deferred and not connection.closed:
                # answering it now would overtake them: its replies must keep the order of its requests
                deferred.append((connection, item))
            elif isinstance(item, bytes):
                held.append(HeldReply(connection, 0, item, ReplyKind.FIXED))
            else:
                error = internal_error() if ("request", index) in poisoned else unavailable
                held.append(HeldReply(connection, item.id, error_frame(item.id, error), ReplyKind.FIXED))
        return held

