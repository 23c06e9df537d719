"""`Producer`: the batching producer of the blocking client (CMQ: producers batch and flush by size or age).

A sequential `Client.enqueue` loop pays one durable round trip per task. A
producer instead takes tasks at once (`enqueue` returns a `Sending`), gathers
them into batches and sends each batch as one `enqueue` request on a
connection of its own; `Sending.sent()` waits until the broker has made the
task durable and returns its `EnqueueOutcome`.

When a batch goes out — theory of operation:

* **idle**: nothing is in flight, so the first task goes out at once, alone:
  on an idle broker a producer adds no waiting to an enqueue;
* **size**: it holds `max_batch_tasks` tasks or `max_batch_bytes` bytes;
* **linger**: one batch is in flight and this one's oldest task has waited
  `linger_ms`;
* **reply**: a reply arrived, freeing a place in flight — so under load the
  batch gathers exactly while the one before it is being committed, and
  batches grow with the broker's commit time (adaptive batching);
* **flush**: `flush()` or `close()` asked for it.

At most **two** batches are in flight, pipelined on one connection. Two,
because with one the broker idles between a reply and the next request (a
round trip plus this side's work) and a full batch would wait for a whole
commit; the second one arrives while the first commits and joins the next
group commit. More would add nothing — the broker commits one group at a
time, a third batch would only join the same commit as the second — and
would widen what a broken connection leaves unknown. One connection keeps
the order: batches are applied in the order they were made, so tasks without
a pid get FIFO pids in the order they were enqueued, and a task enqueued
after its parent (`after=`) finds it.

Outcomes: a batch the broker refuses fails every task in it with the
broker's error (each `sent()` raises it); a connection that breaks fails
the batches in flight with `ConnectionLost` (the outcome is unknown: a
producer never reports durable what it has not heard is). Batches not yet
sent are sent on a new connection. Every task is checked here against the
published limits before it is taken, so one bad task cannot fail a batch.

Memory is bounded: at most `max_buffer_tasks` tasks are held (gathering,
sent, or waiting for a reply); then `enqueue` blocks, or with `block=False`
raises `ProducerFull`. Nothing is written to disk on this side: a process
that dies loses what it held — only what `sent()` (or `flush()`) confirmed
is durable.

Cost: `enqueue` is on the hot path of a loop that should run at tens of
thousands per second, so it builds one `NewTask` and one `Sending` per task
and nothing else; a batch carries one event for all its tasks, and its reply
is decoded only when a `sent()` asks for an outcome. One thread (started
with the producer) reads replies, keeps the linger deadline, and reconnects;
the enqueueing thread sends itself when a batch is due, so the idle case
costs no hand-over between threads on the way out.
"""

from __future__ import annotations

import itertools
import select
import socket
import threading
import time
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kittiwake import errors
from kittiwake.client import calls
from kittiwake.client.blocking_connection import BlockingConnection
from kittiwake.client.pool import MAX_UNSENT_RETRIES, ConnectionPool
from kittiwake.client.producer_settings import ProducerSettings
from kittiwake.client.producer_tasks import TaskMaker
from kittiwake.client.wire import NotSent
from kittiwake.model import NewTask
from kittiwake.protocol import encode_frame
from kittiwake.protocol import messages as m
from kittiwake.protocol.replies import EnqueueOutcome, ReplyEnvelope, error_of, result_decoder

MAX_IN_FLIGHT = 2
_decode_enqueued = result_decoder("enqueue")

# why a batch went out (the keys of `ProducerStats.sends`)
IDLE, SIZE, LINGER, REPLY, FLUSH = "idle", "size", "linger", "reply", "flush"


@dataclass
class ProducerStats:
    """What a producer did so far; `sends` counts batches by why they went out (idle, size, linger,
    reply, flush)."""

    batches_sent: int = 0
    tasks_sent: int = 0
    batches_failed: int = 0
    tasks_failed: int = 0
    largest_batch_tasks: int = 0
    connections: int = 0
    sends: dict[str, int] | None = None

    def __post_init__(self) -> None:
        if self.sends is None:
            self.sends = {IDLE: 0, SIZE: 0, LINGER: 0, REPLY: 0, FLUSH: 0}


class _Batch:
    """Tasks that travel in one request, and what came back for them."""

    __slots__ = ("owner", "tasks", "bytes", "started", "closed_by", "done", "raw", "outcomes", "error", "attempts")

    def __init__(self, owner: Producer, started: float) -> None:
        self.owner = owner
        self.tasks: list[NewTask] = []
        self.bytes = 0
        self.started = started  # when its oldest task came (monotonic)
        self.closed_by: str | None = None  # SIZE or FLUSH once it takes no more tasks
        self.done = threading.Event()
        self.raw: Any = None  # the reply's result, decoded on first demand
        self.outcomes: list[EnqueueOutcome] | None = None
        self.error: errors.KittiwakeError | None = None
        self.attempts = 0  # sends that did not leave whole

    def outcome(self, index: int) -> EnqueueOutcome:
        outcomes = self.outcomes
        if outcomes is None:
            # two threads may decode at once: both get equal lists, either one stays
            outcomes = self.outcomes = _decode_enqueued(self.raw)
        return outcomes[index]


class Sending:
    """A task handed to a producer; `sent()` waits until the broker made it durable."""

    __slots__ = ("_batch", "_index")

    def __init__(self, batch: _Batch, index: int) -> None:
        self._batch = batch
        self._index = index

    def __repr__(self) -> str:
        state = "pending" if not self._batch.done.is_set() else ("failed" if self._batch.error else "sent")
        return f"<Sending {state}>"

    @property
    def producer(self) -> Producer:
        """The producer that took the task."""
        return self._batch.owner

    def done(self) -> bool:
        """Whether the broker has answered for this task (durable, or failed)."""
        return self._batch.done.is_set()

    def sent(self, timeout: float | None = None) -> EnqueueOutcome:
        """The task's `EnqueueOutcome` once it is durable; raises the broker's error for its batch,
        `ConnectionLost` (outcome unknown), or `RequestTimeout` after `timeout` seconds (still pending)."""
        batch = self._batch
        if not batch.done.is_set() and not batch.done.wait(timeout):
            raise errors.RequestTimeout(f"the task was not answered within {timeout} s; it is still pending")
        error = batch.error
        if error is not None:
            raise errors.error_for_code(error.code, error.message)
        return batch.outcome(self._index)


class Producer:
    """Batches enqueues to one broker; thread-safe. Made by `Client.producer(...)`; see the module docstring."""

    def __init__(self, pool: ConnectionPool, settings: ProducerSettings) -> None:
        self.settings = settings
        self.stats = ProducerStats()
        self._pool = pool
        self._linger_secs = settings.linger_ms / 1000.0
        self._max_tasks = settings.max_batch_tasks
        self._max_bytes = settings.max_batch_bytes
        self._max_held = settings.max_buffer_tasks
        self._block = settings.block
        self._tasks = TaskMaker()
        self._lock = threading.Lock()
        self._room = threading.Condition(self._lock)  # enqueuers waiting for buffer room, flushers
        self._waiting_for_room = 0
        self._filling: _Batch | None = None
        self._ready: deque[_Batch] = deque()  # closed, not yet sent, in order
        self._in_flight: dict[int, _Batch] = {}  # request id -> batch, in the order sent
        self._held = 0  # tasks taken and not yet answered
        self._ids = itertools.count(1)
        self._connection: BlockingConnection | None = None
        self._connect_failure: errors.KittiwakeError | None = None
        self._closing = False  # no new tasks
        self._stopped = False  # the thread must end
        self._failed_tasks = 0  # since the last flush
        self._first_failure: errors.KittiwakeError | None = None
        self._wake_read, self._wake_write = socket.socketpair()
        self._wake_read.setblocking(False)
        self._wake_write.setblocking(False)
        self._thread = threading.Thread(target=self._run, name="kittiwake-producer", daemon=True)
        self._thread.start()

    def __repr__(self) -> str:
        return f"<Producer {self._pool.address} held={self._held}>"

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc_info: object) -> None:
        try:
            if exc_type is None:
                self.flush()
        finally:
            self.close()

    # ------------------------------------------------------------ producing

    def enqueue(
        self,
        queue: str,
        data: bytes | str,
        *,
        pid: str | None = None,
        sender: str | None = None,
        receiver: str | None = None,
        headers: Mapping[str, str] | None = None,
        max_attempts: int | None = None,
        after: Iterable[Any] | None = None,
        unless: Iterable[Any] | None = None,
    ) -> Sending:
        """Take one task (the arguments of `Client.enqueue`) and return at once; `.sent()` on the
        result waits until it is durable. Raises BAD_REQUEST for a task the broker would refuse,
        PRODUCER_FULL (with `block=False`) or PRODUCER_CLOSED."""
        if (
            pid is None and sender is None and receiver is None and headers is None
            and max_attempts is None and after is None and unless is None
        ):
            return self._take(*self._tasks.plain(queue, data))
        fields = calls.task_fields(
            queue, data, pid=pid, sender=sender, receiver=receiver, headers=headers,
            max_attempts=max_attempts, after=after, unless=unless,
        )
        return self._take(*self._tasks.of_fields(fields))

    def enqueue_task(self, task: NewTask | Mapping[str, Any]) -> Sending:
        """`enqueue` for a task given as a `NewTask` or a map (as `Client.enqueue_many` takes them)."""
        return self._take(*self._tasks.of_fields(calls.task_fields_of(task)))

    def _take(self, task: NewTask, size: int) -> Sending:
        with self._lock:
            if self._held >= self._max_held:
                self._wait_for_room()
            if self._closing:
                raise errors.ProducerClosed("the producer is closed")
            batch = self._filling
            started = batch is None
            if batch is None:
                batch = self._filling = _Batch(self, time.monotonic())
            tasks = batch.tasks
            index = len(tasks)
            tasks.append(task)
            batch.bytes += size
            self._held += 1
            if index + 1 >= self._max_tasks or batch.bytes >= self._max_bytes:
                self._filling = None
                batch.closed_by = SIZE
                self._ready.append(batch)
            in_flight = len(self._in_flight)
            if in_flight < MAX_IN_FLIGHT and self._connection is not None and (in_flight == 0 or self._ready):
                self._send_due()
            elif started:
                self._wake()  # a new linger deadline (or a connection to make)
        return Sending(batch, index)

    def _wait_for_room(self) -> None:
        if not self._block:
            raise errors.ProducerFull(
                f"the producer holds {self._held} tasks not yet answered (max_buffer_tasks = {self._max_held})"
            )
        self._waiting_for_room += 1
        try:
            while self._held >= self._max_held and not self._closing:
                if self._filling is not None and not self._in_flight:
                    self._close_filling(FLUSH)  # never wait on a batch that nothing will send
                    self._wake()
                self._room.wait()
        finally:
            self._waiting_for_room -= 1

    # ------------------------------------------------------------- flushing

    def flush(self, timeout: float | None = None) -> None:
        """Wait until every task enqueued so far is answered (sending what gathers at once).

        Raises, after waiting, if any task failed since the last flush: the first failure's error
        class and code, its message saying how many tasks failed (each `sent()` tells its own)."""
        self._settle_all(timeout)
        with self._lock:
            failed, first = self._failed_tasks, self._first_failure
            self._failed_tasks, self._first_failure = 0, None
        if first is not None:
            raise errors.error_for_code(first.code, f"{failed} task(s) were not enqueued; the first: {first.message}")

    def _settle_all(self, timeout: float | None) -> None:
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            if self._filling is not None:
                self._close_filling(FLUSH)
            batches = [*self._in_flight.values(), *self._ready]
            if self._connection is not None:
                self._send_due()
            self._wake()
        for batch in batches:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not batch.done.wait(remaining):
                raise errors.RequestTimeout(f"the producer's tasks were not all answered within {timeout} s")

    def close(self, timeout: float | None = None) -> None:
        """Send what is held and wait for the answers (up to `timeout` s), then stop; later enqueues
        raise PRODUCER_CLOSED. Tasks still unsent at the timeout fail with PRODUCER_CLOSED (not
        enqueued), those in flight with CONNECTION_LOST (outcome unknown). Does not raise for failed tasks."""
        with self._lock:
            if self._stopped:
                return
            self._closing = True
            self._room.notify_all()
        try:
            self._settle_all(timeout)
        except errors.RequestTimeout:
            pass
        finally:
            with self._lock:
                self._stopped = True
                unsent = [*self._ready, *([self._filling] if self._filling is not None else [])]
                self._ready.clear()
                self._filling = None
                for batch in unsent:
                    self._settle(batch, error=errors.ProducerClosed("the producer was closed before the task was sent"))
                self._lose_connection(errors.ConnectionLost("the producer was closed before the reply; outcome unknown"))
                self._wake()
            if threading.current_thread() is not self._thread:
                self._thread.join()
            self._wake_read.close()
            self._wake_write.close()

    @property
    def held(self) -> int:
        """Tasks taken and not yet answered."""
        return self._held

    # -------------------------------------------------- sending (lock held)

    def _close_filling(self, why: str) -> None:
        batch = self._filling
        assert batch is not None
        self._filling = None
        batch.closed_by = why
        self._ready.append(batch)

    def _send_due(self, reply: bool = False) -> None:
        """Send every batch that is due while there is room in flight (module docstring)."""
        connection = self._connection
        while connection is not None and len(self._in_flight) < MAX_IN_FLIGHT:
            idle = not self._in_flight
            if self._ready:
                batch = self._ready.popleft()
                why = batch.closed_by
            elif self._filling is not None:
                batch = self._filling
                if reply:
                    why = REPLY
                elif idle:
                    why = IDLE
                elif time.monotonic() - batch.started >= self._linger_secs:
                    why = LINGER
                else:
                    return
                self._filling = None
            else:
                return
            assert why is not None
            if not self._transmit(connection, batch, why):
                return
            connection = self._connection

    def _transmit(self, connection: BlockingConnection, batch: _Batch, why: str) -> bool:
        request_id = next(self._ids)
        frame = encode_frame(m.encode(m.Enqueue(id=request_id, op="enqueue", tasks=batch.tasks)))
        try:
            connection.send_frame(frame)
        except (NotSent, errors.RequestTimeout) as exc:
            # the frame did not leave whole: the broker cannot have acted on it, so it may go again
            batch.attempts += 1
            if batch.attempts >= MAX_UNSENT_RETRIES:
                self._settle(batch, error=errors.BrokerUnreachable(f"the batch could not be sent: {exc}"))
            else:
                batch.closed_by = batch.closed_by or FLUSH
                self._ready.appendleft(batch)
            self._lose_connection(errors.ConnectionLost(f"the connection broke: {exc}; outcome unknown"))
            self._wake()
            return False
        self._in_flight[request_id] = batch
        stats = self.stats
        count = len(batch.tasks)
        stats.batches_sent += 1
        stats.tasks_sent += count
        stats.sends[why] += 1  # type: ignore[index]
        if count > stats.largest_batch_tasks:
            stats.largest_batch_tasks = count
        return True

    def _settle(self, batch: _Batch, raw: Any = None, error: errors.KittiwakeError | None = None) -> None:
        count = len(batch.tasks)
        if error is not None:
            batch.error = error
            self.stats.batches_failed += 1
            self.stats.tasks_failed += count
            self._failed_tasks += count
            if self._first_failure is None:
                self._first_failure = error
        else:
            batch.raw = raw
        self._held -= count
        batch.tasks = []  # handles keep their batch: let its data go
        batch.done.set()
        if self._waiting_for_room:
            self._room.notify_all()

    def _lose_connection(self, error: errors.KittiwakeError) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            connection.close()
        in_flight = list(self._in_flight.values())
        self._in_flight.clear()
        for batch in in_flight:
            self._settle(batch, error=errors.error_for_code(error.code, error.message))

    def _wake(self) -> None:
        try:
            self._wake_write.send(b"\0")
        except (BlockingIOError, OSError):
            pass  # already awake, or closed

    # ------------------------------------------------------------- the thread

    def _run(self) -> None:
        """Read replies, send on reply and on linger, make connections."""
        first = True
        while True:
            with self._lock:
                if self._stopped:
                    return
                connection = self._connection
                work = bool(self._ready or self._filling)
                timeout: float | None = None
                if connection is not None:
                    self._send_due()
                    connection = self._connection
                    filling = self._filling
                    if filling is not None and len(self._in_flight) == 1:
                        timeout = max(0.0, filling.started + self._linger_secs - time.monotonic())
            if connection is None:
                if first or work:
                    self._connect()
                    first = False
                    continue
                self._wait(None, None)
                continue
            self._wait(connection, timeout)

    def _wait(self, connection: BlockingConnection | None, timeout: float | None) -> None:
        watched: list[Any] = [self._wake_read] if connection is None else [self._wake_read, connection]
        try:
            readable, _, _ = select.select(watched, [], [], timeout)
        except (OSError, ValueError):
            return  # a socket closed under us: look again
        if self._wake_read in readable:
            try:
                while self._wake_read.recv(4096):
                    pass
            except (BlockingIOError, OSError):
                pass
        if connection is not None and connection in readable:
            self._read(connection)

    def _read(self, connection: BlockingConnection) -> None:
        try:
            replies = connection.read_replies()
        except errors.KittiwakeError as exc:
            with self._lock:
                if self._connection is connection:
                    self._lose_connection(errors.ConnectionLost(f"{exc.message}"))
            return
        with self._lock:
            if self._connection is not connection:
                return
            for reply in replies:
                self._answer(reply)
            if self._connection is not None:
                self._send_due(reply=True)

    def _answer(self, reply: ReplyEnvelope[Any]) -> None:
        batch = self._in_flight.pop(reply.id, None)
        if batch is None:
            if reply.id == 0 and not reply.ok:
                # the broker could not read a frame of ours: the stream is out of step
                self._lose_connection(errors.ConnectionLost(f"the broker refused the stream: {error_of(reply)}"))
            return
        if reply.ok:
            self._settle(batch, raw=reply.result)
        else:
            self._settle(batch, error=error_of(reply))

    def _connect(self) -> None:
        try:
            connection = self._pool.open_connection()
        except errors.KittiwakeError as exc:
            with self._lock:
                # nothing of these was sent: they fail as not enqueued, with the reason
                unsent = [*self._ready, *([self._filling] if self._filling is not None else [])]
                self._ready.clear()
                self._filling = None
                for batch in unsent:
                    self._settle(batch, error=errors.error_for_code(exc.code, exc.message))
            return
        with self._lock:
            if self._stopped:
                connection.close()
                return
            self._connection = connection
            self.stats.connections += 1
