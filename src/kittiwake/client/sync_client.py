"""`Client`: the blocking, thread-safe client of one broker.

Every method builds its call (`calls.py`), hands it to the client's channel
(`channel.Channel`, picked by the URL's scheme in `schemes.py`) and blocks for
its reply. Threads may share a `Client`: over `kw://` each concurrent call
borrows its own connection from a small pool (`pool.py`), so a long-poll lease
(`wait_secs > 0`) holds one connection while other threads carry on over
others; `kwu://` sends datagrams (`udp_channel.py`). The asyncio twin is
`AsyncClient`, with the same methods and keywords.

Failures are `kittiwake.errors` errors, each with a stable `.code`: the
broker's refusals (BAD_REQUEST, TASK_NOT_LEASED, …) and, from this side,
`BrokerUnreachable` (no connection within `connect_timeout`), `ConnectionLost`
(the request was sent, the connection broke, the outcome is unknown) and
`RequestTimeout` (no reply within the timeout, the outcome is unknown).

Timeouts: `timeout` (per call, else the client's) bounds the wait for a reply;
None waits as long as it takes. A long-poll lease waits `wait_secs` plus the
client's timeout, or `wait_secs` + 5 s when that is None.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, TypeVar, overload

from kittiwake import errors
from kittiwake.client import calls
from kittiwake.client.backoff import DEFAULT_CONNECT_TIMEOUT_SECS
from kittiwake.client.calls import Call, LeaseLike, TaskLike
from kittiwake.constants import DEFAULT_LEASE_SECS
from kittiwake.protocol.messages import DEFAULT_STATS_SAMPLE
from kittiwake.client.channel import Channel
from kittiwake.client.pool import DEFAULT_MAX_IDLE_CONNECTIONS, ConnectionPool
from kittiwake.client.producer import Producer
from kittiwake.client.routed_producer import RoutedProducer
from kittiwake.client.producer_settings import (
    DEFAULT_LINGER_MS,
    DEFAULT_MAX_BATCH_BYTES,
    DEFAULT_MAX_BATCH_TASKS,
    DEFAULT_MAX_BUFFER_TASKS,
    ProducerSettings,
)
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
from kittiwake.client.schemes import ChannelSettings, open_channel
from kittiwake.client.cluster_channel import ClusterMapLike, cluster_address, load_cluster_map
from kittiwake.client.cluster_view import ClusterView
from kittiwake.client.url import BrokerAddress
from kittiwake.client.wire import DEFAULT_MAX_REPLY_BYTES, effective_timeout

T = TypeVar("T")


class Client(ClusterView):
    """A blocking connection to one broker, safe to share between threads.

    `url` is `kw://host:port` (default: `$KITTIWAKE_URL`, else
    `kw://127.0.0.1:7370`); `kwu://host:port` talks to the broker's UDP port
    in datagrams (`udp_channel`: retransmitted until answered, each call
    bounded by its timeout or 10 s; requests must fit in a datagram). `worker` names this client in the broker's lease
    records (stats show it) unless a lease call names another. Use it as a
    context manager or call `close()`.
    """

    def __init__(
        self,
        url: str | BrokerAddress | None = None,
        *,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT_SECS,
        timeout: float | None = None,
        worker: str | None = None,
        max_idle_connections: int = DEFAULT_MAX_IDLE_CONNECTIONS,
        max_reply_bytes: int = DEFAULT_MAX_REPLY_BYTES,
        cluster_map: ClusterMapLike | None = None,
        near: str | None = None,
    ) -> None:
        known_map = load_cluster_map(cluster_map) if cluster_map is not None else None
        self.address = cluster_address(url, known_map)
        self.timeout = timeout
        self.worker = worker
        settings = ChannelSettings(
            connect_timeout_secs=connect_timeout,
            max_idle_connections=max_idle_connections,
            max_reply_bytes=max_reply_bytes,
            cluster_map=known_map,
            near=near,
        )
        self._channel: Channel = open_channel(self.address, settings)

    @property
    def url(self) -> str:
        return self.address.url

    def __repr__(self) -> str:
        return f"Client({self.url!r})"

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Close every idle connection (the others as their calls end); a call waiting to reconnect
        ends at once and later calls raise BrokerUnreachable. Safe to call from another thread."""
        self._channel.close()

    def _run(self, call: Call[T], timeout: float | None) -> T:
        return self._channel.request(call, effective_timeout(call, timeout, self.timeout))

    # ------------------------------------------------------------ producing

    def ping(self, *, timeout: float | None = None) -> Any:
        """Round trip to the broker; returns its answer as a map (`now`: its clock)."""
        return self._run(calls.ping(), timeout)

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
        timeout: float | None = None,
    ) -> EnqueueOutcome:
        """Add one task; `data` is bytes (a str is sent as UTF-8).

        Without `pid` the broker assigns a FIFO pid; with one, an existing task
        at that pid wins and the outcome says `collapsed=True` (dedupe). A task
        with a `receiver` is leased only by that receiver; without one, by
        anyone. `after` names parent tasks — (queue, pid) pairs or results of
        `enqueue`/`lease` — that must all finish (be dequeued) before this one
        can be leased; a parent that fails or is cancelled fails this task
        too. `unless` names tasks whose existence makes this enqueue collapse
        instead. Returns the task's `.queue`, `.pid` and `.collapsed`.
        """
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
        return self._run(call, timeout)

    def enqueue_many(
        self, tasks: Iterable[TaskLike], *, timeout: float | None = None
    ) -> list[EnqueueOutcome]:
        """Add many tasks in one request; each is a `NewTask` or a map with the
        keyword names of `enqueue` plus `queue` and `data`. One outcome per task, in order."""
        return self._run(calls.enqueue_many(tasks), timeout)

    def producer(
        self,
        *,
        linger_ms: float = DEFAULT_LINGER_MS,
        max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES,
        max_batch_tasks: int = DEFAULT_MAX_BATCH_TASKS,
        max_buffer_tasks: int = DEFAULT_MAX_BUFFER_TASKS,
        block: bool = True,
    ) -> Producer:
        """A batching producer on a connection of its own (`kittiwake.client.producer`).

        `producer.enqueue(queue, data, **options)` takes the options of `enqueue` and returns at
        once; `.sent(timeout)` on its result waits until the task is durable and returns its
        `EnqueueOutcome`. A batch goes out when nothing is in flight, when it holds
        `max_batch_tasks` tasks or `max_batch_bytes` bytes, when its oldest task waited
        `linger_ms` behind the batch in flight, or when a reply arrives. At most
        `max_buffer_tasks` tasks are held: then `enqueue` blocks, or raises PRODUCER_FULL with
        `block=False`. `flush()` waits for everything so far; use it as a context manager (exit:
        flush, then close). On a cluster (`kw://a,b,c`) it is a `RoutedProducer`: the same calls,
        each batch one routed enqueue split by node (`kittiwake.client.routed_producer`)."""
        routed = hasattr(self._channel, "routing_stats")
        if not isinstance(self._channel, ConnectionPool) and not routed:
            # the producer pipelines batches on a TCP connection of its own
            raise errors.BadRequest(
                f"the batching producer needs kw:// or kws://, not {self.address.scheme}://; "
                "use enqueue_many to send several tasks in one request"
            )
        settings = ProducerSettings(
            linger_ms=linger_ms,
            max_batch_bytes=max_batch_bytes,
            max_batch_tasks=max_batch_tasks,
            max_buffer_tasks=max_buffer_tasks,
            block=block,
        )
        if isinstance(self._channel, ConnectionPool):
            return Producer(self._channel, settings)
        # a cluster: each batch is one routed enqueue, split by node (`routed_producer`)
        return RoutedProducer(self._channel, settings, self.timeout)

    # ------------------------------------------------------------- consuming

    def lease(
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
        """Lease up to `max_tasks` available tasks, smallest pid first, across `queues`.

        `max_pid` leases only tasks whose pid is at most it (with
        `model.pid_at(time.time())`: only tasks that are due). `receiver` also
        leases tasks directed at that receiver. `wait_secs > 0` long-polls: an
        empty answer comes only after that long without a task, and this call
        holds one pooled connection meanwhile. `rate_per_sec` sets a limit
        the broker enforces for these queues across every worker (a token
        bucket of `rate_burst`, default one second's worth). Returns possibly
        fewer tasks.
        """
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
        return self._run(call, timeout)

    @overload
    def renew(
        self, tasks: LeaseLike, lease_secs: float = ..., *, progress: float | None = ..., note: str | None = ...,
        timeout: float | None = ...
    ) -> ItemOutcome: ...
    @overload
    def renew(
        self, tasks: Iterable[LeaseLike], lease_secs: float = ..., *, progress: float | None = ..., note: str | None = ...,
        timeout: float | None = ...
    ) -> list[ItemOutcome]: ...

    def renew(
        self,
        tasks: Any,
        lease_secs: float = DEFAULT_LEASE_SECS,
        *,
        progress: float | None = None,
        note: str | None = None,
        timeout: float | None = None,
    ) -> Any:
        """Extend leases to now + `lease_secs` and move each `LeasedTask.expires_at` forward;
        `progress` (0..1) and `note` are recorded on the task for `get` and `peek` to show.

        One task: returns its outcome or raises (LEASE_EXPIRED, TASK_NOT_LEASED,
        …). A list: returns one outcome per task and never raises for an item.
        """
        return self._run(calls.renew(tasks, lease_secs, progress, note), timeout)

    @overload
    def dequeue(self, tasks: LeaseLike, *, timeout: float | None = ...) -> ItemOutcome: ...
    @overload
    def dequeue(self, tasks: Iterable[LeaseLike], *, timeout: float | None = ...) -> list[ItemOutcome]: ...

    def dequeue(self, tasks: Any, *, timeout: float | None = None) -> Any:
        """Finish leased tasks: they leave their queue for good.

        A lease that ran out still finishes its task if nobody leased it since.
        One task: returns its outcome or raises. A list: one outcome per task.
        """
        return self._run(calls.dequeue(tasks), timeout)

    @overload
    def release(
        self, tasks: LeaseLike, reason: str | None = ..., *, bury: bool = ..., reject: bool = ..., timeout: float | None = ...
    ) -> ItemOutcome: ...
    @overload
    def release(
        self, tasks: Iterable[LeaseLike], reason: str | None = ..., *, bury: bool = ..., reject: bool = ..., timeout: float | None = ...
    ) -> list[ItemOutcome]: ...

    def release(
        self, tasks: Any, reason: str | None = None, *, bury: bool = False, reject: bool = False, timeout: float | None = None
    ) -> Any:
        """Give leased tasks back (nack), counting a failed attempt each.

        A task that reaches its `max_attempts` — or any task, with `bury` —
        moves to `<queue>.dead` (outcome `.dead`), failing its dependants. With `reject` the task
        goes back without counting an attempt (this consumer cannot take it now; another may).
        One task: returns its outcome or raises. A list: one outcome per task.
        """
        return self._run(calls.release(tasks, reason, bury, reject), timeout)

    def cancel(self, tasks: Any, reason: str | None = None, *, timeout: float | None = None) -> Any:
        """Withdraw tasks, whatever their state, into their dead-letter queues
        (reason CANCELLED unless given), failing every task that waits on them.

        `tasks` names one task — `(queue, pid)`, a leased task or anything with
        `.queue` and `.pid` — or a list of them. One task: returns its outcome
        or raises TASK_NOT_FOUND. A list: one outcome per task.
        """
        return self._run(calls.cancel(tasks, reason), timeout)

    def update(
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
        """Apply enqueues, dequeues, renewals and releases atomically, in one
        consistency group: all happen, or none and the first item's error is raised."""
        call = calls.update(
            enqueue=enqueue, dequeue=dequeue, renew=renew, release=release, lease_secs=lease_secs, reason=reason
        )
        return self._run(call, timeout)

    # ------------------------------------------------------------ inspecting

    def peek(
        self, queue: str, n: int = 10, from_pid: str | None = None, *, timeout: float | None = None
    ) -> list[TaskView]:
        """Up to `n` tasks of a queue in pid order (from `from_pid` on), without leasing them."""
        return self._run(calls.peek(queue, n, from_pid), timeout)

    def get(self, queue: str, pid: str, *, timeout: float | None = None) -> TaskView:
        """One task by pid; raises TaskNotFound."""
        return self._run(calls.get(queue, pid), timeout)

    def find_by_sender(
        self, sender: str, queue: str | None = None, limit: int = 100, *, timeout: float | None = None
    ) -> list[TaskView]:
        """Tasks a sender enqueued (in one queue, or in all), up to `limit`."""
        return self._run(calls.find_by_sender(sender, queue, limit), timeout)

    def queues_for_receiver(self, receiver: str, *, timeout: float | None = None) -> list[str]:
        """Names of the queues holding tasks directed at `receiver`."""
        return self._run(calls.queues_for_receiver(receiver), timeout)

    def list_queues(
        self, pattern: str | None = None, min_tasks: int = 0, limit: int = 1000, *,
        start_after: str | None = None, timeout: float | None = None
    ) -> list[QueueInfo]:
        """Up to `limit` queues in name order whose name matches the regex `pattern`
        (searched, not anchored) and that hold at least `min_tasks` tasks (and at least one).

        With `start_after`, only queues whose name sorts after it: pass the last name
        of one page to get the next, and stop at a page shorter than `limit`. It is a
        queue name (checked as one: `BadRequest` otherwise) and need not exist.

        Patterns run in linear time (RE2): Python's `re` syntax without
        backreferences or lookaround, at most 1024 characters; others are
        refused with `BadRequest`."""
        return self._run(calls.list_queues(pattern, min_tasks, limit, start_after), timeout)

    def declare_join(
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
        return self._run(call, timeout)

    def drop_join(self, name: str, *, timeout: float | None = None) -> bool:
        """Forget a join (its waiting tokens stay in their queues); False if there was none."""
        return self._run(calls.drop_join(name), timeout)

    def purge_join(self, name: str, key: str, *, limit: int = 10_000, timeout: float | None = None) -> int:
        """Delete up to `limit` tokens waiting in the join's ports whose key is `key` or below it
        (`key/...`): the garbage of a finished or cancelled run. Returns how many; repeat until 0."""
        return self._run(calls.purge_join(name, key, limit), timeout)

    def list_joins(self, pattern: str | None = None, *, timeout: float | None = None) -> list[JoinInfo]:
        """The joins (whose name matches `pattern`, as in list_queues), with the tokens waiting in each."""
        return self._run(calls.list_joins(pattern), timeout)

    def delete_queue(self, queue: str, *, timeout: float | None = None) -> int:
        """Drop a queue and all its tasks; returns how many tasks it held."""
        return self._run(calls.delete_queue(queue), timeout)

    def requeue_dead(
        self,
        queue: str,
        pids: Iterable[str] | None = None,
        *,
        after_pid: str | None = None,
        limit: int = 1000,
        timeout: float | None = None,
    ) -> DeadLetterPage:
        """Move dead letters of `queue` back into it under their original pids, attempts
        from zero. `pids` names dead letters by their own pid or by the original pid (all
        of its dead letters); without `pids`, every dead letter of the queue. One call is
        one page: the dead letters it reaches in pid order after the cursor `after_pid`,
        reading at most `limit` of them; when more are left the page's `next_pid` is set,
        and the same call with `after_pid=next_pid` goes on. A dead letter whose pid exists
        again in the queue stays (`TASK_EXISTS`); a held one too (`TASK_LEASED`), and one that
        cannot go back as stored (`BAD_DEAD_LETTER`: checked before anything moves). On a cluster, `pids` of a spread
        queue are paged by the client, node by node in requests of at most `limit`: the call
        answers all their outcomes, `next_pid` None (`cluster_router`)."""
        return self._run(calls.dead_letters("requeue_dead", queue, pids, after_pid, limit), timeout)

    def purge_dead(
        self,
        queue: str,
        pids: Iterable[str] | None = None,
        *,
        after_pid: str | None = None,
        limit: int = 1000,
        timeout: float | None = None,
    ) -> DeadLetterPage:
        """Delete dead letters of `queue`, chosen as for `requeue_dead`; `delete_queue("<queue>.dead")`
        drops them all at once."""
        return self._run(calls.dead_letters("purge_dead", queue, pids, after_pid, limit), timeout)

    def stats(
        self,
        queues: str | Iterable[str] | None = None,
        pattern: str | None = None,
        *,
        sample: int = DEFAULT_STATS_SAMPLE,
        timeout: float | None = None,
    ) -> list[QueueStats]:
        """Statistics of the named queues, or of every non-empty queue matching
        `pattern` (all of them when both are None), with up to `sample` leases each."""
        return self._run(calls.stats(queues, pattern, sample), timeout)

    # --------------------------------------------------------------- a cluster

    def node_stats(
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
            return {f"{self.address.host}:{self.address.port}": self._run(call, timeout)}
        result: dict[str, list[QueueStats]] = per_node(call, effective_timeout(call, timeout, self.timeout))
        return result
