"""`Producer`: the batching producer of the blocking client (CMQ: producers batch and flush by size or age).

A sequential `Client.enqueue` loop pays one durable round trip per task. A
producer instead takes tasks at once (`enqueue` returns a `Sending`), gathers
them into batches and sends each batch as one `enqueue` request on a
connection of its own; `Sending.sent()` waits until the broker has made the
task durable and returns its `EnqueueOutcome`.

When a batch goes out, how many are in flight (two, pipelined on the one
connection, so batches apply in the order they were made and FIFO pids follow
the order of `enqueue`), what an answer does and how memory is bounded is the
rule of `batching.Batcher`, which this class wraps with the time of
`time.monotonic`; `AsyncProducer` wraps the same rule. What is this module's
own is the I/O around it:

* one thread (started with the producer) connects, reads replies, and wakes
  at the linger deadline the batcher names; the enqueueing thread writes a
  batch itself when one is due, so the idle case costs no hand-over between
  threads on the way out;
* a batch whose frame did not leave whole is sent again on a new connection
  (up to `MAX_UNSENT_RETRIES` tries); a connection that breaks fails the
  batches in flight with `ConnectionLost` (the outcome is unknown: a producer
  never reports durable what it has not heard is); a broker that cannot be
  reached fails the batches not yet sent with its error;
* `enqueue` blocks while the buffer is full (`max_buffer_tasks`), or with
  `block=False` raises `ProducerFull`. Nothing is written to disk on this
  side: a process that dies loses what it held — only what `sent()` (or
  `flush()`) confirmed is durable.

Every task is checked against the published limits before it is taken
(`producer_tasks`); a task only the broker can refuse (FORBIDDEN, BAD_REQUEST:
the request is refused whole, nothing of it applied) makes the batcher send its
batch again in parts until that task fails alone (`batching`, "Refused
batches"), so one bad task cannot fail a batch.

Cost: `enqueue` is on the hot path of a loop that should run at tens of
thousands per second, so it builds one `NewTask` and one `Sending` per task
and reads the clock once; a batch carries one event for all its tasks, and
its reply is decoded only when a `sent()` asks for an outcome.
"""

from __future__ import annotations

import itertools
import select
import socket
import threading
import time
from collections.abc import Iterable, Mapping
from typing import Any

from kittiwake import errors
from kittiwake.client import calls
from kittiwake.client.batching import Batch, Batcher, ProducerStats, Send
from kittiwake.client.blocking_connection import BlockingConnection
from kittiwake.client.pool import MAX_UNSENT_RETRIES, ConnectionPool
from kittiwake.client.producer_settings import ProducerSettings
from kittiwake.client.producer_tasks import TaskMaker
from kittiwake.client.wire import NotSent
from kittiwake.model import EnqueueOutcome, NewTask
from kittiwake.protocol import encode_frame
from kittiwake.protocol import messages as m
from kittiwake.protocol.replies import ReplyEnvelope, error_of

__all__ = ["Producer", "ProducerStats", "Sending"]


class Sending:
    """A task handed to a producer; `sent()` waits until the broker made it durable."""

    __slots__ = ("_producer", "_batch", "_index")

    def __init__(self, producer: Producer, batch: Batch[threading.Event], index: int) -> None:
        self._producer = producer
        self._batch = batch
        self._index = index

    def __repr__(self) -> str:
        state = "pending" if not self._batch.signal.is_set() else ("failed" if self._batch.error else "sent")
        return f"<Sending {state}>"

    @property
    def producer(self) -> Producer:
        """The producer that took the task."""
        return self._producer

    def done(self) -> bool:
        """Whether the broker has answered for this task (durable, or failed)."""
        return self._batch.signal.is_set()

    def sent(self, timeout: float | None = None) -> EnqueueOutcome:
        """The task's `EnqueueOutcome` once it is durable; raises the broker's error for its batch,
        `ConnectionLost` (outcome unknown), or `RequestTimeout` after `timeout` seconds (still pending)."""
        batch = self._batch
        if not batch.signal.is_set() and not batch.signal.wait(timeout):
            raise errors.RequestTimeout(f"the task was not answered within {timeout} s; it is still pending")
        return batch.outcome(self._index)


class Producer:
    """Batches enqueues to one broker; thread-safe. Made by `Client.producer(...)`; see the module docstring."""

    def __init__(self, pool: ConnectionPool, settings: ProducerSettings) -> None:
        self.settings = settings
        self._pool = pool
        self.stats = ProducerStats()
        self._batcher: Batcher[threading.Event] = Batcher(settings, threading.Event, self.stats)
        self._tasks = TaskMaker()
        self._lock = threading.Lock()  # held around every call of the batcher
        self._room = threading.Condition(self._lock)  # enqueuers waiting for buffer room
        self._waiting_for_room = 0
        self._in_flight: dict[int, Batch[threading.Event]] = {}  # request id -> batch, on this connection
        self._ids = itertools.count(1)
        self._connection: BlockingConnection | None = None
        self._stopped = False  # the thread must end
        self._wake_read, self._wake_write = socket.socketpair()
        self._wake_read.setblocking(False)
        self._wake_write.setblocking(False)
        self._thread = threading.Thread(target=self._run, name="kittiwake-producer", daemon=True)
        self._thread.start()

    def __repr__(self) -> str:
        return f"<Producer {self._pool.address} held={self.held}>"

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
        batcher = self._batcher
        with self._lock:
            batch = batcher.take(task, size, time.monotonic())
            if batch is None:
                batch = self._wait_for_room(task, size)
            index = len(batch.tasks) - 1
            # only a task that opened a batch (maybe idle) or closed one can make a send due; the
            # rest of a batch's tasks cost no more than this test
            if index == 0 or batch.reason is not None:
                if self._connection is not None and batcher.sendable():
                    self._send_due()
                elif index == 0:
                    self._wake()  # a new linger deadline (or a connection to make)
        return Sending(self, batch, index)

    def _wait_for_room(self, task: NewTask, size: int) -> Batch[threading.Event]:
        self._waiting_for_room += 1
        try:
            while True:
                if not self._batcher.in_flight:
                    self._wake()  # the batcher closed what was gathering: the thread must send it
                self._room.wait()
                batch = self._batcher.take(task, size, time.monotonic())
                if batch is not None:
                    return batch
        finally:
            self._waiting_for_room -= 1

    # ------------------------------------------------------------- flushing

    def flush(self, timeout: float | None = None) -> None:
        """Wait until every task enqueued so far is answered (sending what gathers at once).

        Raises, after waiting, if any task failed since the last flush: the first failure's error
        class and code, its message saying how many tasks failed (each `sent()` tells its own)."""
        self._settle_all(timeout)
        with self._lock:
            failure = self._batcher.failure_report()
        if failure is not None:
            raise failure

    def _settle_all(self, timeout: float | None) -> None:
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            batches = self._batcher.flush()
            if self._connection is not None:
                self._send_due()
            self._wake()
        for batch in batches:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not batch.signal.wait(remaining):
                raise errors.RequestTimeout(f"the producer's tasks were not all answered within {timeout} s")

    def close(self, timeout: float | None = None) -> None:
        """Send what is held and wait for the answers (up to `timeout` s), then stop; later enqueues
        raise PRODUCER_CLOSED. Tasks still unsent at the timeout fail with PRODUCER_CLOSED (not
        enqueued), those in flight with CONNECTION_LOST (outcome unknown). Does not raise for failed tasks."""
        with self._lock:
            if self._stopped:
                return
            self._batcher.close()
            self._room.notify_all()
        try:
            self._settle_all(timeout)
        except errors.RequestTimeout:
            pass
        finally:
            with self._lock:
                self._stopped = True
                self._settled(self._batcher.fail_unsent(
                    errors.ProducerClosed("the producer was closed before the task was sent")))
                self._stop_sending()
            if threading.current_thread() is not self._thread:
                self._thread.join()
            self._release()

    def _stop_sending(self) -> None:
        """At close, lock held, unsent tasks failed: what is in flight fails too, the thread wakes to end."""
        self._lose_connection(errors.ConnectionLost("the producer was closed before the reply; outcome unknown"))
        self._wake()

    def _release(self) -> None:
        """At close, once the thread ended: what the producer holds of the system."""
        self._wake_read.close()
        self._wake_write.close()

    @property
    def held(self) -> int:
        """Tasks taken and not yet answered."""
        return self._batcher.held

    # -------------------------------------------------- sending (lock held)

    def _send_due(self) -> float | None:
        """Write every batch the batcher says is due; the seconds until the next linger deadline, if any."""
        batcher = self._batcher
        while (connection := self._connection) is not None:
            due = batcher.next_send(time.monotonic())
            if not isinstance(due, Send):
                return due
            self._transmit(connection, due)
        return None

    def _transmit(self, connection: BlockingConnection, send: Send[threading.Event]) -> None:
        request_id = next(self._ids)
        frame = encode_frame(m.encode(m.Enqueue(id=request_id, op="enqueue", tasks=send.batch.tasks)))
        try:
            connection.send_frame(frame)
        except (NotSent, errors.RequestTimeout) as exc:
            # the frame did not leave whole: the broker cannot have acted on it, so it may go again
            settled = self._batcher.not_sent(send, str(exc), MAX_UNSENT_RETRIES)
            if settled is not None:
                self._settled([settled])
            self._lose_connection(errors.ConnectionLost(f"the connection broke: {exc}; outcome unknown"))
            self._wake()
            return
        self._in_flight[request_id] = send.batch
        self._batcher.sent(send)

    def _settled(self, batches: Iterable[Batch[threading.Event]]) -> None:
        for batch in batches:
            batch.signal.set()
        if self._waiting_for_room:
            self._room.notify_all()

    def _lose_connection(self, error: errors.KittiwakeError) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            connection.close()
        self._in_flight.clear()
        self._settled(self._batcher.fail_in_flight(error))

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
                work = self._batcher.unsent
                timeout = self._send_due()
                connection = self._connection
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
            self._send_due()

    def _answer(self, reply: ReplyEnvelope[Any]) -> None:
        batch = self._in_flight.pop(reply.id, None)
        if batch is None:
            if reply.id == 0 and not reply.ok:
                # the broker could not read a frame of ours: the stream is out of step
                self._lose_connection(errors.ConnectionLost(f"the broker refused the stream: {error_of(reply)}"))
            return
        if reply.ok:
            self._settled(self._batcher.answer(batch, raw=reply.result))
        else:
            self._settled(self._batcher.answer(batch, error=error_of(reply)))

    def _connect(self) -> None:
        try:
            connection = self._pool.open_connection()
        except errors.KittiwakeError as exc:
            with self._lock:
                # nothing of these was sent: they fail as not enqueued, with the reason
                self._settled(self._batcher.fail_unsent(errors.error_for_code(exc.code, exc.message)))
            return
        with self._lock:
            if self._stopped:
                connection.close()
                return
            self._connection = connection
            self.stats.connections += 1
