"""`AsyncProducer`: the batching producer of `AsyncClient` (CMQ: producers batch and flush by size or age).

The same rule as the blocking `Producer`, from the same `batching.Batcher` (see there for the
theory of operation), with the time of the event loop's clock: a batch goes out at once when
nothing is in flight (idle), when it is full (size), when its oldest task waited `linger_ms`
behind the one in flight (linger), or when an answer frees a place (reply); at most two batches
are in flight, and `max_buffer_tasks` bounds what is held.

What differs is only the I/O. Batches travel through the client's channel (`AsyncChannel`), as
`enqueue` requests with the client's timeout (so reconnects, and retries of requests that never
left, are the channel's; a send that fails for any reason is that batch's answer); requests are
written in the order the batches were made, so FIFO pids follow the order of `enqueue`. The linger
deadline the batcher names is a timer of the loop. `enqueue` is a coroutine because a full
buffer makes it wait (or raise PRODUCER_FULL with `block=False`); it never waits otherwise.
`sent()` of what it returns is a coroutine too. Everything belongs to the event loop that made
the producer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from typing import Any

from kittiwake import errors
from kittiwake.client import calls
from kittiwake.client.batching import Batch, Batcher, ProducerStats, Send
from kittiwake.client.calls import Call
from kittiwake.client.channel import AsyncChannel
from kittiwake.client.producer_settings import ProducerSettings
from kittiwake.client.producer_tasks import TaskMaker
from kittiwake.model import EnqueueOutcome
from kittiwake.protocol import messages as m

_AsyncBatch = Batch[asyncio.Future[None]]  # what the batcher settles; the shell waits on its future


def _raw(result: Any) -> Any:
    return result  # decoded on first demand, by the batch


class AsyncSending:
    """A task handed to an `AsyncProducer`; `await sent()` waits until the broker made it durable."""

    __slots__ = ("_batch", "_index")

    def __init__(self, batch: _AsyncBatch, index: int) -> None:
        self._batch = batch
        self._index = index

    def done(self) -> bool:
        """Whether the broker has answered for this task (durable, or failed)."""
        return self._batch.signal.done()

    async def sent(self, timeout: float | None = None) -> EnqueueOutcome:
        """As `Sending.sent`: the outcome once durable, else the batch's error or `RequestTimeout`."""
        batch = self._batch
        if not batch.signal.done():
            try:
                async with asyncio.timeout(timeout):  # not wait_for: on 3.11 it can swallow a cancel
                    await asyncio.shield(batch.signal)
            except TimeoutError:
                raise errors.RequestTimeout(f"the task was not answered within {timeout} s; it is still pending") from None
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
        self._batcher: Batcher[asyncio.Future[None]] = Batcher(settings, self._loop.create_future, self.stats)
        self._tasks = TaskMaker()
        self._room = asyncio.Event()  # set when a batch settles: enqueuers waiting for room look again
        self._linger: asyncio.TimerHandle | None = None
        self._sends: set[asyncio.Task[None]] = set()

    @property
    def held(self) -> int:
        """Tasks taken and not yet answered."""
        return self._batcher.held

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
        batcher = self._batcher
        batch = batcher.take(task, size, self._loop.time())
        while batch is None:  # the buffer is full: wait until a batch settles
            self._send_due()  # the batcher may have closed a batch that nothing else would send
            self._room.clear()
            await self._room.wait()
            batch = batcher.take(task, size, self._loop.time())
        index = len(batch.tasks) - 1
        if index == 0 or batch.reason is not None:  # it opened a batch (idle, or a linger deadline), or closed one
            self._send_due()
        return AsyncSending(batch, index)

    async def flush(self, timeout: float | None = None) -> None:
        """As `Producer.flush`: wait for everything enqueued so far; raise if any task failed since the last flush."""
        await self._settle_all(timeout)
        failure = self._batcher.failure_report()
        if failure is not None:
            raise failure

    async def _settle_all(self, timeout: float | None) -> None:
        waiting = [batch.signal for batch in self._batcher.flush()]
        self._send_due()
        if waiting:
            _, pending = await asyncio.wait(waiting, timeout=timeout)
            if pending:
                raise errors.RequestTimeout(f"the producer's tasks were not all answered within {timeout} s")

    async def close(self, timeout: float | None = None) -> None:
        """Send what is held and wait for the answers (up to `timeout` s); later enqueues raise
        PRODUCER_CLOSED. Tasks still unsent at the timeout fail with PRODUCER_CLOSED (not enqueued);
        those in flight keep waiting for their answer on the client's connection. Does not raise
        for failed tasks."""
        if self._batcher.closed:
            return
        self._batcher.close()
        self._room.set()
        try:
            await self._settle_all(timeout)
        except errors.RequestTimeout:
            pass  # each task's sent() tells its own
        self._settled(self._batcher.fail_unsent(errors.ProducerClosed("the producer was closed before the task was sent")))
        if self._linger is not None:
            self._linger.cancel()
            self._linger = None

    # ---------------------------------------------------------------- sending

    def _send_due(self) -> None:
        """Start a send of every batch the batcher says is due; arm the linger timer it names."""
        batcher = self._batcher
        while True:
            due = batcher.next_send(self._loop.time())
            if not isinstance(due, Send):
                if due is not None and self._linger is None:
                    self._linger = self._loop.call_later(due, self._lingered)
                return
            batcher.sent(due)
            sending = self._loop.create_task(self._send(due.batch))
            self._sends.add(sending)
            sending.add_done_callback(self._sends.discard)

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
        self._settled(self._batcher.answer(batch, raw, error))
        self._send_due()

    def _settled(self, batches: list[_AsyncBatch]) -> None:
        for batch in batches:
            if not batch.signal.done():
                batch.signal.set_result(None)
        self._room.set()
