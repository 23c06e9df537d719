"""`AsyncClient`: the asyncio client of one broker, pipelined over one connection.

Same methods, keywords and results as `Client` (see its docstrings), as
coroutines. Any number of calls may be in flight at once on the single
connection; replies are matched to calls by request id, so a long-poll lease
never holds up other calls. Connection handling follows `Client`: lazy
connect, backoff within `connect_timeout` then `BrokerUnreachable`, a request
that never left is retried on a new connection, one that left and lost its
connection raises `ConnectionLost`.

The connection belongs to the event loop that opened it; used from another
loop (say, a second `asyncio.run`), the client opens a new one.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from contextlib import suppress
from collections.abc import Iterable, Mapping
from typing import Any, TypeVar, overload

from kittiwake import errors
from kittiwake.client import calls
from kittiwake.client.async_connection import AsyncConnection
from kittiwake.client.async_producer import AsyncProducer
from kittiwake.client.producer_settings import (
    DEFAULT_LINGER_MS,
    DEFAULT_MAX_BATCH_BYTES,
    DEFAULT_MAX_BATCH_TASKS,
    DEFAULT_MAX_BUFFER_TASKS,
    ProducerSettings,
)
from kittiwake.client.backoff import DEFAULT_CONNECT_TIMEOUT_SECS, next_delay_secs
from kittiwake.client.calls import Call, LeaseLike, TaskLike
from kittiwake.client.pool import MAX_CONNECT_ATTEMPT_SECS, MAX_UNSENT_RETRIES
from kittiwake.protocol.replies import (
    DeadLetterPage,
    EnqueueOutcome,
    ItemOutcome,
    JoinInfo,
    LeasedTask,
    QueueInfo,
    QueueStats,
    TaskView,
    UpdateResult,
)
from kittiwake.client.url import BrokerAddress, parse_url
from kittiwake.client.wire import DEFAULT_MAX_REPLY_BYTES, NotSent, effective_timeout, encode_call, result_of

T = TypeVar("T")


class AsyncClient:
    """An asyncio connection to one broker; see `Client` for the arguments."""

    def __init__(
        self,
        url: str | BrokerAddress | None = None,
        *,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT_SECS,
        timeout: float | None = None,
        worker: str | None = None,
        max_reply_bytes: int = DEFAULT_MAX_REPLY_BYTES,
    ) -> None:
        self.address = parse_url(url)
        if self.address.udp:
            raise errors.BadRequest("kwu:// (UDP) is served by the blocking Client only; use kw:// here")
        self.connect_timeout = connect_timeout
        self.timeout = timeout
        self.worker = worker
        self.max_reply_bytes = max_reply_bytes
        self._connection: AsyncConnection | None = None
        self._connecting: asyncio.Lock | None = None
        self._connecting_loop: asyncio.AbstractEventLoop | None = None
        self._ids = itertools.count(1)
        self._closed = False

    @property
    def url(self) -> str:
        return self.address.url

    def __repr__(self) -> str:
        return f"AsyncClient({self.url!r})"

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the connection; calls still waiting raise ConnectionLost, later calls BrokerUnreachable."""
        self._closed = True
        connection, self._connection = self._connection, None
        if connection is not None and connection.loop is asyncio.get_running_loop():
            await connection.close()

    # ----------------------------------------------------------- connection

    async def _connected(self) -> AsyncConnection:
        if self._closed:
            raise errors.BrokerUnreachable("the client is closed")
        loop = asyncio.get_running_loop()
        connection = self._connection
        if connection is not None and connection.loop is loop and not connection.is_dropped():
            return connection
        if self._connecting is None or self._connecting_loop is not loop:
            self._connecting = asyncio.Lock()  # a lock serves one loop only
            self._connecting_loop = loop
        async with self._connecting:
            connection = self._connection
            if connection is not None and connection.loop is loop and not connection.is_dropped():
                return connection
            if connection is not None and connection.loop is loop:
                await connection.close()
            self._connection = await self._connect()
            return self._connection

    async def _connect(self) -> AsyncConnection:
        started = time.monotonic()
        deadline = started + self.connect_timeout
        attempt = 0
        failure: BaseException
        while True:
            remaining = deadline - time.monotonic()
            try:
                return await AsyncConnection.open(
                    self.address, max(0.001, min(remaining, MAX_CONNECT_ATTEMPT_SECS)), self.max_reply_bytes
                )
            except (OSError, asyncio.TimeoutError) as exc:
                failure = exc
            delay = next_delay_secs(attempt, deadline - time.monotonic())
            if delay is None:
                raise errors.BrokerUnreachable(
                    f"no broker at {self.address} after {attempt + 1} attempts in "
                    f"{time.monotonic() - started:.1f}s: {failure!r}"
                )
            await asyncio.sleep(delay)
            attempt += 1

    async def _run(self, call: Call[T], timeout: float | None) -> T:
        wait_secs = effective_timeout(call, timeout, self.timeout)
        for _ in range(MAX_UNSENT_RETRIES):
            connection = await self._connected()
            request_id = next(self._ids)
            try:
                future = connection.send(request_id, encode_call(call, request_id))
            except NotSent:
                continue
            try:
                await connection.drain()
                reply = await asyncio.wait_for(future, wait_secs)
            except asyncio.TimeoutError:
                self._withdraw(connection, call, request_id)
                raise errors.RequestTimeout(
                    f"no reply to {call.op} from {self.address} within {wait_secs}s; outcome unknown"
                ) from None
            except asyncio.CancelledError:
                self._withdraw(connection, call, request_id)
                raise
            finally:
                connection.forget(request_id)
            return result_of(call, reply)
        raise errors.ConnectionLost(
            f"{self.address} dropped {MAX_UNSENT_RETRIES} fresh connections before a request could be sent; "
            "the request was not sent"
        )

    def _withdraw(self, connection: AsyncConnection, call: Call[Any], request_id: int) -> None:
        """An abandoned long-poll: ask the broker to answer it with nothing now,
        so no task is leased to a reply that nobody will read."""
        if call.wait_secs <= 0:
            return
        cancel_id = next(self._ids)
        with suppress(Exception):
            connection.send(cancel_id, encode_call(calls.cancel_wait(request_id), cancel_id))
            connection.forget(cancel_id)

    # ------------------------------------------------------------ producing

    async def ping(self, *, timeout: float | None = None) -> Any:
        """Round trip to the broker; returns its answer as a map (`now`: its clock)."""
        return await self._run(calls.ping(), timeout)

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
        timeout: float | None = None,
    ) -> EnqueueOutcome:
        """Add one task; see `Client.enqueue`."""
        call = calls.enqueue(
            queue,
            data,
            pid=pid,
            sender=sender,
            receiver=receiver,
            headers=headers,
            max_attempts=max_attempts,
            after=after,
            unless=unless,
        )
        return await self._run(call, timeout)

    def producer(
        self,
        *,
        linger_ms: float = DEFAULT_LINGER_MS,
        max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES,
        max_batch_tasks: int = DEFAULT_MAX_BATCH_TASKS,
        max_buffer_tasks: int = DEFAULT_MAX_BUFFER_TASKS,
        block: bool = True,
    ) -> AsyncProducer:
        """A batching producer on this client's connection (`kittiwake.client.async_producer`); the
        settings of `Client.producer`. Call it inside the event loop that will use it:
        ``async with client.producer() as producer: await producer.enqueue(queue, data)``."""
        settings = ProducerSettings(
            linger_ms=linger_ms,
            max_batch_bytes=max_batch_bytes,
            max_batch_tasks=max_batch_tasks,
            max_buffer_tasks=max_buffer_tasks,
            block=block,
        )
        return AsyncProducer(self._run, settings)

    async def enqueue_many(
        self, tasks: Iterable[TaskLike], *, timeout: float | None = None
    ) -> list[EnqueueOutcome]:
        """Add many tasks in one request; see `Client.enqueue_many`."""
        return await self._run(calls.enqueue_many(tasks), timeout)

    # ------------------------------------------------------------- consuming

    async def lease(
        self,
        queues: str | Iterable[str],
        *,
        max_tasks: int = 1,
        lease_secs: float = calls.DEFAULT_LEASE_SECS,
        max_pid: str | None = None,
        receiver: str | None = None,
        wait_secs: float = 0,
        worker: str | None = None,
        rate_per_sec: float | None = None,
        rate_burst: float | None = None,
        timeout: float | None = None,
    ) -> list[LeasedTask]:
        """Lease available tasks; see `Client.lease`. A long-poll does not block other calls."""
        call = calls.lease(
            queues,
            max_tasks=max_tasks,
            lease_secs=lease_secs,
            max_pid=max_pid,
            receiver=receiver,
            wait_secs=wait_secs,
            worker=worker if worker is not None else self.worker,
            rate_per_sec=rate_per_sec,
            rate_burst=rate_burst,
        )
        return await self._run(call, timeout)

    @overload
    async def renew(
        self, tasks: LeaseLike, lease_secs: float = ..., *, progress: float | None = ..., note: str | None = ...,
        timeout: float | None = ...
    ) -> ItemOutcome: ...
    @overload
    async def renew(
        self, tasks: Iterable[LeaseLike], lease_secs: float = ..., *, progress: float | None = ..., note: str | None = ...,
        timeout: float | None = ...
    ) -> list[ItemOutcome]: ...

    async def renew(
        self,
        tasks: Any,
        lease_secs: float = calls.DEFAULT_LEASE_SECS,
        *,
        progress: float | None = None,
        note: str | None = None,
        timeout: float | None = None,
    ) -> Any:
        """Extend leases; see `Client.renew` (one task raises, a list returns outcomes)."""
        return await self._run(calls.renew(tasks, lease_secs, progress, note), timeout)

    @overload
    async def dequeue(self, tasks: LeaseLike, *, timeout: float | None = ...) -> ItemOutcome: ...
    @overload
    async def dequeue(
        self, tasks: Iterable[LeaseLike], *, timeout: float | None = ...
    ) -> list[ItemOutcome]: ...

    async def dequeue(self, tasks: Any, *, timeout: float | None = None) -> Any:
        """Finish leased tasks; see `Client.dequeue`."""
        return await self._run(calls.dequeue(tasks), timeout)

    @overload
    async def release(
        self, tasks: LeaseLike, reason: str | None = ..., *, bury: bool = ..., reject: bool = ..., timeout: float | None = ...
    ) -> ItemOutcome: ...
    @overload
    async def release(
        self, tasks: Iterable[LeaseLike], reason: str | None = ..., *, bury: bool = ..., reject: bool = ..., timeout: float | None = ...
    ) -> list[ItemOutcome]: ...

    async def release(
        self, tasks: Any, reason: str | None = None, *, bury: bool = False, reject: bool = False, timeout: float | None = None
    ) -> Any:
        """Give leased tasks back, counting an attempt; see `Client.release`."""
        return await self._run(calls.release(tasks, reason, bury, reject), timeout)

    async def cancel(self, tasks: Any, reason: str | None = None, *, timeout: float | None = None) -> Any:
        """Withdraw tasks, whatever their state, into their dead-letter queues
        (reason CANCELLED unless given), failing every task that waits on them.

        `tasks` names one task — `(queue, pid)`, a leased task or anything with
        `.queue` and `.pid` — or a list of them. One task: returns its outcome
        or raises TASK_NOT_FOUND. A list: one outcome per task.
        """
        return await self._run(calls.cancel(tasks, reason), timeout)

    async def update(
        self,
        *,
        enqueue: Iterable[TaskLike] = (),
        dequeue: Iterable[LeaseLike] | LeaseLike = (),
        renew: Iterable[LeaseLike] | LeaseLike = (),
        release: Iterable[LeaseLike] | LeaseLike = (),
        lease_secs: float = calls.DEFAULT_LEASE_SECS,
        reason: str | None = None,
        timeout: float | None = None,
    ) -> UpdateResult:
        """One atomic batch in one consistency group; see `Client.update`."""
        call = calls.update(
            enqueue=enqueue, dequeue=dequeue, renew=renew, release=release, lease_secs=lease_secs, reason=reason
        )
        return await self._run(call, timeout)

    # ------------------------------------------------------------ inspecting

    async def peek(
        self, queue: str, n: int = 10, from_pid: str | None = None, *, timeout: float | None = None
    ) -> list[TaskView]:
        """Tasks in pid order without leasing them; see `Client.peek`."""
        return await self._run(calls.peek(queue, n, from_pid), timeout)

    async def get(self, queue: str, pid: str, *, timeout: float | None = None) -> TaskView:
        """One task by pid; raises TaskNotFound."""
        return await self._run(calls.get(queue, pid), timeout)

    async def find_by_sender(
        self, sender: str, queue: str | None = None, limit: int = 100, *, timeout: float | None = None
    ) -> list[TaskView]:
        """Tasks a sender enqueued; see `Client.find_by_sender`."""
        return await self._run(calls.find_by_sender(sender, queue, limit), timeout)

    async def queues_for_receiver(self, receiver: str, *, timeout: float | None = None) -> list[str]:
        """Queues holding tasks directed at `receiver`."""
        return await self._run(calls.queues_for_receiver(receiver), timeout)

    async def list_queues(
        self, pattern: str | None = None, min_tasks: int = 0, limit: int = 1000, *,
        start_after: str | None = None, timeout: float | None = None
    ) -> list[QueueInfo]:
        """Queues by name and size, from the name after `start_after` on; see `Client.list_queues`."""
        return await self._run(calls.list_queues(pattern, min_tasks, limit, start_after), timeout)

    async def declare_join(
        self,
        name: str,
        job_queue: str,
        *,
        required: Mapping[str, str],
        optional: Mapping[str, str] | None = None,
        sequence: Mapping[str, str] | None = None,
        max_attempts: int | None = None,
        timeout: float | None = None,
    ) -> str:
        """Keep a join: once every `required` port (port name -> queue) holds a token whose pid is a
        key, and every `sequence` port the whole sequence `<key>/<index>` up to the token flagged
        `kittiwake-seq-final`, the broker takes them (with any `optional` port's token of that key)
        and enqueues one job into `job_queue`, pid = the key, in the same commit. All queues lie in
        `job_queue`'s group. Returns "created", "unchanged" or "replaced"."""
        call = calls.declare_join(name, job_queue, required, optional or {}, sequence or {}, max_attempts)
        return await self._run(call, timeout)

    async def drop_join(self, name: str, *, timeout: float | None = None) -> bool:
        """Forget a join (its waiting tokens stay in their queues); False if there was none."""
        return await self._run(calls.drop_join(name), timeout)

    async def purge_join(self, name: str, key: str, *, limit: int = 10_000, timeout: float | None = None) -> int:
        """Delete up to `limit` tokens waiting in the join's ports whose key is `key` or below it
        (`key/...`): the garbage of a finished or cancelled run. Returns how many; repeat until 0."""
        return await self._run(calls.purge_join(name, key, limit), timeout)

    async def list_joins(self, pattern: str | None = None, *, timeout: float | None = None) -> list[JoinInfo]:
        """The joins (whose name matches `pattern`, as in list_queues), with the tokens waiting in each."""
        return await self._run(calls.list_joins(pattern), timeout)

    async def delete_queue(self, queue: str, *, timeout: float | None = None) -> int:
        """Drop a queue and its tasks; returns how many it held."""
        return await self._run(calls.delete_queue(queue), timeout)

    async def requeue_dead(
        self,
        queue: str,
        pids: Iterable[str] | None = None,
        *,
        after_pid: str | None = None,
        limit: int = 1000,
        timeout: float | None = None,
    ) -> DeadLetterPage:
        """Move dead letters back into their queue; see `Client.requeue_dead`."""
        return await self._run(calls.dead_letters("requeue_dead", queue, pids, after_pid, limit), timeout)

    async def purge_dead(
        self,
        queue: str,
        pids: Iterable[str] | None = None,
        *,
        after_pid: str | None = None,
        limit: int = 1000,
        timeout: float | None = None,
    ) -> DeadLetterPage:
        """Delete dead letters; see `Client.purge_dead`."""
        return await self._run(calls.dead_letters("purge_dead", queue, pids, after_pid, limit), timeout)

    async def stats(
        self,
        queues: str | Iterable[str] | None = None,
        pattern: str | None = None,
        *,
        sample: int = calls.DEFAULT_STATS_SAMPLE,
        timeout: float | None = None,
    ) -> list[QueueStats]:
        """Queue statistics; see `Client.stats`."""
        return await self._run(calls.stats(queues, pattern, sample), timeout)
