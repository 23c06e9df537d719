"""`AsyncProducer`: the batching producer of `AsyncClient` (CMQ: producers batch and flush by size or age).

The same rules as the blocking `Producer` (see `producer` for the theory of operation): a batch
goes out at once when nothing is in flight (idle), when it is full (size), when its oldest task
waited `linger_ms` behind the one in flight (linger), or when a reply frees a place (reply); at
most two batches are in flight, and `max_buffer_tasks` bounds what is held.

What differs is only where the waiting happens. Batches travel on the client's own pipelined
connection, as `enqueue` requests of the client (so reconnects, and retries of requests that
never left, are the client's); requests are written in the order the batches were made, so
FIFO pids follow the order of `enqueue`. `enqueue` is a coroutine because a full buffer makes it
wait (or raise PRODUCER_FULL with `block=False`); it never waits otherwise. `sent()` of what it
returns is a coroutine too. Everything belongs to the event loop that made the producer.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Iterable, Mapping
from typing import Any

from kittiwake import errors
from kittiwake.client import calls
from kittiwake.client.calls import Call
from kittiwake.client.channel import AsyncChannel
from kittiwake.client.producer import FLUSH, IDLE, LINGER, MAX_IN_FLIGHT, REPLY, SIZE, ProducerStats
from kittiwake.client.producer_settings import ProducerSettings
from kittiwake.client.producer_tasks import TaskMaker
from kittiwake.model import NewTask
from kittiwake.protocol import messages as m
from kittiwake.protocol.replies import EnqueueOutcome, result_decoder

_decode_enqueued = result_decoder("enqueue")


def _raw(result: Any) -> Any:
    return result  # decoded on first demand, by the batch


class _AsyncBatch:
    __slots__ = ("tasks", "bytes", "started", "closed_by", "done", "raw", "outcomes", "error")

    def __init__(self, started: float, done: asyncio.Future[None]) -> None:
        self.tasks: list[NewTask] = []
        self.bytes = 0
        self.started = started
        self.closed_by: str | None = None
        self.done = done
        self.raw: Any = None
        self.outcomes: list[EnqueueOutcome] | None = None
        self.error: errors.KittiwakeError | None = None

    def outcome(self, index: int) -> EnqueueOutcome:
        if self.outcomes is None:
            self.outcomes = _decode_enqueued(self.raw)
        return self.outcomes[index]


class AsyncSending:
    """A task handed to an `AsyncProducer`; `await sent()` waits until the broker made it durable."""

    __slots__ = ("_batch", "_index")

    def __init__(self, batch: _AsyncBatch, index: int) -> None:
        self._batch = batch
        self._index = index

    def done(self) -> bool:
        return self._batch.done.done()

    async def sent(self, timeout: float | None = None) -> EnqueueOutcome:
        """As `Sending.sent`: the outcome once durable, else the batch's error or `RequestTimeout`."""
        batch = self._batch
        if not batch.done.done():
            try:
                await asyncio.wait_for(asyncio.shield(batch.done), timeout)
            except asyncio.TimeoutError:
                raise errors.RequestTimeout(f"the task was not answered within {timeout} s; it is still pending") from None
        if batch.error is not None:
            raise errors.error_for_code(batch.error.code, batch.error.message)
        return batch.outcome(self._index)


class AsyncProducer:
    """Batches enqueues over an `AsyncClient`'s channel; made by `AsyncClient.producer(...)`, which
    hands it that channel and the client's timeout (None: a batch waits for its reply)."""

    def __init__(self, channel: AsyncChannel, settings: ProducerSettings, timeout_secs: float | None = None) -> None:
        self.settings = settings
        self.stats = ProducerStats()
        self._channel = channel
        self._timeout_secs = timeout_secs
        self._loop = asyncio.get_running_loop()
        self._linger_secs = settings.linger_ms / 1000.0
        self._tasks = TaskMaker()
        self._filling: _AsyncBatch | None = None
        self._ready: deque[_AsyncBatch] = deque()
        self._in_flight: list[_AsyncBatch] = []
        self._held = 0
        self._room = asyncio.Event()
        self._linger: asyncio.TimerHandle | None = None
        self._closing = False
        self._failed_tasks = 0
        self._first_failure: errors.KittiwakeError | None = None
        self._sends: set[asyncio.Task[None]] = set()

    @property
    def held(self) -> int:
        return self._held

    async def __aenter__(self) -> AsyncProducer:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, *exc_info: object) -> None:
        try:
            if exc_type is None:
                await self.flush()
        finally:
            await self.close()

    async def enqueue(
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
    ) -> AsyncSending:
        """Take one task (the arguments of `AsyncClient.enqueue`); waits only while the buffer is full."""
        if (
            pid is None and sender is None and receiver is None and headers is None
            and max_attempts is None and after is None and unless is None
        ):
            task, size = self._tasks.plain(queue, data)
        else:
            task, size = self._tasks.of_fields(calls.task_fields(
                queue, data, pid=pid, sender=sender, receiver=receiver, headers=headers,
                max_attempts=max_attempts, after=after, unless=unless,
            ))
        while self._held >= self.settings.max_buffer_tasks and not self._closing:
            if not self.settings.block:
                raise errors.ProducerFull(
                    f"the producer holds {self._held} tasks not yet answered "
                    f"(max_buffer_tasks = {self.settings.max_buffer_tasks})"
                )
            self._room.clear()
            await self._room.wait()
        if self._closing:
            raise errors.ProducerClosed("the producer is closed")
        batch = self._filling
        if batch is None:
            batch = self._filling = _AsyncBatch(self._loop.time(), self._loop.create_future())
        index = len(batch.tasks)
        batch.tasks.append(task)
        batch.bytes += size
        self._held += 1
        if index + 1 >= self.settings.max_batch_tasks or batch.bytes >= self.settings.max_batch_bytes:
            self._close_filling(SIZE)
        self._send_due()
        return AsyncSending(batch, index)

    async def flush(self, timeout: float | None = None) -> None:
        """As `Producer.flush`: wait for everything enqueued so far; raise if any task failed since the last flush."""
        if self._filling is not None:
            self._close_filling(FLUSH)
        waiting = [batch.done for batch in (*self._in_flight, *self._ready)]
        self._send_due()
        if waiting:
            done, pending = await asyncio.wait(waiting, timeout=timeout)
            if pending:
                raise errors.RequestTimeout(f"the producer's tasks were not all answered within {timeout} s")
        failed, first = self._failed_tasks, self._first_failure
        self._failed_tasks, self._first_failure = 0, None
        if first is not None:
            raise errors.error_for_code(first.code, f"{failed} task(s) were not enqueued; the first: {first.message}")

    async def close(self, timeout: float | None = None) -> None:
        """Send what is held and wait for the answers (up to `timeout` s); later enqueues raise PRODUCER_CLOSED."""
        if self._closing:
            return
        self._closing = True
        self._room.set()
        try:
            await self.flush(timeout)
        except errors.KittiwakeError:
            pass  # each task's sent() tells its own
        for batch in [*self._ready, *([self._filling] if self._filling is not None else [])]:
            self._settle(batch, None, errors.ProducerClosed("the producer was closed before the task was sent"))
        self._ready.clear()
        self._filling = None
        if self._linger is not None:
            self._linger.cancel()

    # ---------------------------------------------------------------- sending

    def _close_filling(self, why: str) -> None:
        batch = self._filling
        assert batch is not None
        self._filling = None
        batch.closed_by = why
        self._ready.append(batch)

    def _send_due(self, reply: bool = False) -> None:
        while len(self._in_flight) < MAX_IN_FLIGHT:
            idle = not self._in_flight
            if self._ready:
                batch = self._ready.popleft()
                why = batch.closed_by or FLUSH
            elif self._filling is not None:
                batch = self._filling
                if reply:
                    why = REPLY
                elif idle:
                    why = IDLE
                elif self._loop.time() - batch.started >= self._linger_secs:
                    why = LINGER
                else:
                    self._arm_linger(batch)
                    return
                self._filling = None
            else:
                return
            self._in_flight.append(batch)
            stats = self.stats
            stats.batches_sent += 1
            stats.tasks_sent += len(batch.tasks)
            stats.sends[why] += 1  # type: ignore[index]
            stats.largest_batch_tasks = max(stats.largest_batch_tasks, len(batch.tasks))
            sending = self._loop.create_task(self._send(batch))
            self._sends.add(sending)
            sending.add_done_callback(self._sends.discard)

    def _arm_linger(self, batch: _AsyncBatch) -> None:
        if self._linger is None:
            delay = max(0.0, batch.started + self._linger_secs - self._loop.time())
            self._linger = self._loop.call_later(delay, self._lingered)

    def _lingered(self) -> None:
        self._linger = None
        self._send_due()

    async def _send(self, batch: _AsyncBatch) -> None:
        call: Call[Any] = Call(m.Enqueue(id=0, op="enqueue", tasks=batch.tasks), _raw)
        raw: Any = None
        error: errors.KittiwakeError | None = None
        try:
            raw = await self._channel.request(call, self._timeout_secs)
        except errors.KittiwakeError as exc:
            error = exc
        except asyncio.CancelledError:
            error = errors.ConnectionLost("the send was cancelled; outcome unknown")
        self._in_flight.remove(batch)
        self._settle(batch, raw, error)
        self._send_due(reply=True)

    def _settle(self, batch: _AsyncBatch, raw: Any, error: errors.KittiwakeError | None) -> None:
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
        batch.tasks = []
        if not batch.done.done():
            batch.done.set_result(None)
        self._room.set()
