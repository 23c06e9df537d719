"""`AsyncClient`: the asyncio client of one broker, pipelined over one connection.

Same methods, keywords and results as `Client` (see its docstrings), as
coroutines. Each method builds its call (`calls.py`) and awaits it on the
client's `channel.AsyncChannel`, picked by the URL's scheme (`schemes.py`;
`kwu://` has none and is refused): for `kw://` and `kws://`, `async_pool.py`,
where any number of calls are in flight at once on one connection, matched
by request id, so a long-poll lease never holds up other calls. Connection
handling follows `Client`: lazy connect, backoff within `connect_timeout`
then `BrokerUnreachable`, a request that never left is retried on a new
connection, one that left and lost its connection raises `ConnectionLost`;
an abandoned long-poll is withdrawn at the broker.

The connection belongs to the event loop that opened it; used from another
loop (say, a second `asyncio.run`), the client opens a new one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, TypeVar, overload

from kittiwake.client import calls
from kittiwake.client.async_producer import AsyncProducer
from kittiwake.client.producer_settings import (
    DEFAULT_LINGER_MS,
    DEFAULT_MAX_BATCH_BYTES,
    DEFAULT_MAX_BATCH_TASKS,
    DEFAULT_MAX_BUFFER_TASKS,
    ProducerSettings,
)
from kittiwake.client.backoff import DEFAULT_CONNECT_TIMEOUT_SECS
from kittiwake.client.calls import Call, LeaseLike, TaskLike
from kittiwake.constants import DEFAULT_LEASE_SECS
from kittiwake.protocol.messages import DEFAULT_STATS_SAMPLE
from kittiwake.client.channel import AsyncChannel
from kittiwake.client.schemes import ChannelSettings, open_async_channel
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
from kittiwake.client.cluster_channel import ClusterMapLike, cluster_address, load_cluster_map
from kittiwake.client.cluster_view import ClusterView
from kittiwake.client.url import BrokerAddress
from kittiwake.client.wire import DEFAULT_MAX_REPLY_BYTES, effective_timeout

T = TypeVar("T")


class AsyncClient(ClusterView):
    """An asyncio connection to one broker; see `Client` for the arguments."""

    def __init__(
        self,
        url: str | BrokerAddress | None = None,
        *,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT_SECS,
        timeout: float | None = None,
        worker: str | None = None,
        max_reply_bytes: int = DEFAULT_MAX_REPLY_BYTES,
        cluster_map: ClusterMapLike | None = None,
        near: str | None = None,
    ) -> None:
        known_map = load_cluster_map(cluster_map) if cluster_map is not None else None
        self.address = cluster_address(url, known_map)
        self.timeout = timeout
        self.worker = worker
        settings = ChannelSettings(
            connect_timeout_secs=connect_timeout, max_reply_bytes=max_reply_bytes, cluster_map=known_map, near=near
        )
        self._channel: AsyncChannel = open_async_channel(self.address, settings)

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
        """Close the connection; calls still waiting raise ConnectionLost, a call waiting to
        reconnect ends at once and later calls raise BrokerUnreachable."""
        await self._channel.close()

    async def _run(self, call: Call[T], timeout: float | None) -> T:
        return await self._channel.request(call, effective_timeout(call, timeout, self.timeout))

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
        return AsyncProducer(self._channel, settings, timeout_secs=self.timeout)

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
        lease_secs: float = DEFAULT_LEASE_SECS,
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
        lease_secs: float = DEFAULT_LEASE_SECS,
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
        lease_secs: float = DEFAULT_LEASE_SECS,
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
        sample: int = DEFAULT_STATS_SAMPLE,
        timeout: float | None = None,
    ) -> list[QueueStats]:
        """Queue statistics; see `Client.stats`."""
        return await self._run(calls.stats(queues, pattern, sample), timeout)

    # --------------------------------------------------------------- a cluster

    async def node_stats(
        self,
        queues: str | Iterable[str] | None = None,
        pattern: str | None = None,
        *,
        sample: int = DEFAULT_STATS_SAMPLE,
        timeout: float | None = None,
    ) -> dict[str, list[QueueStats]]:
        """`stats` of each node of a cluster on its own, by node name (`stats` sums them). A
        client of one broker answers for its one broker, under the broker's `host:port`."""
        call = calls.stats(queues, pattern, sample)
        per_node = getattr(self._channel, "per_node", None)
        if per_node is None:
            return {f"{self.address.host}:{self.address.port}": await self._run(call, timeout)}
        result: dict[str, list[QueueStats]] = await per_node(call, effective_timeout(call, timeout, self.timeout))
        return result
