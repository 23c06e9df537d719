"""The seams other packages rely on, declared: what they need of a client, and nothing more.

`QueueReads` is the read side of a queue client: list the queues, page
through one, look up a task, read queues' statistics. `kittiwake.Client`
satisfies it; so does a reader that answers from a broker's engine in the
broker's own process (the dashboard's flows view,
`kittiwake.observe.engine_reader.EngineReader`, over `kittiwake.engine.reads`),
so code that only reads — a flow run's status (`kittiwake.flow.runs`) — is
written once for both, and anything else such code tried to call would be a
type error rather than a runtime surprise.

`QueueClient` is what the worker (`kittiwake.worker`), flows
(`kittiwake.flow`), the Spark source (`kittiwake.spark`) and the kombu
transport (`kittiwake.kombu`) call on the client they are given: the methods
of `kittiwake.Client` they use, with its parameters, names, defaults and
results. Where `Client` takes anything (`cancel`'s tasks), the seam says
what callers pass: a task named by `(queue, pid)` or by anything with
`.queue` and `.pid`, or a list of those.

Code that makes its own client still makes a `Client`; code handed one takes
a `QueueClient`, so a client that routes each call to one of several brokers
can stand in without these packages changing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Protocol, Union, overload, runtime_checkable

from kittiwake.client.url import BrokerAddress
from kittiwake.constants import DEFAULT_LEASE_SECS
from kittiwake.model import EnqueueOutcome, ItemOutcome, LeaseRef, NewTask, QueueInfo, QueueStats
from kittiwake.protocol.messages import DEFAULT_STATS_SAMPLE
from kittiwake.protocol.replies import DeadLetterPage, LeasedTask, TaskView, UpdateResult


class NamedTask(Protocol):
    """Anything that names a task by its queue and pid: a leased task, a view, an enqueue outcome."""

    @property
    def queue(self) -> str: ...

    @property
    def pid(self) -> str: ...


# A task to enqueue: a NewTask, or a map with the keywords of `Client.enqueue` plus `queue` and `data`.
NewTaskLike = Union[NewTask, Mapping[str, object]]
# A lease: what `lease` returned, a LeaseRef, or a map with its `queue`, `pid` and `lease_id`.
LeaseName = Union[LeasedTask, LeaseRef, Mapping[str, object]]
# A task named for `cancel`: `(queue, pid)`, or anything with `.queue` and `.pid`.
TaskName = Union[tuple[str, str], NamedTask]


@runtime_checkable
class QueueReads(Protocol):
    """Reads of queues and tasks: what status views and readers need."""

    def list_queues(
        self, pattern: str | None = None, min_tasks: int = 0, limit: int = 1000, *, start_after: str | None = None
    ) -> list[QueueInfo]:
        """Queues in name order past `start_after` whose name matches `pattern`, holding at least
        max(1, `min_tasks`) tasks."""

    def peek(self, queue: str, n: int = 10, from_pid: str | None = None) -> list[TaskView]:
        """Up to `n` tasks of `queue` in pid order from `from_pid` on, leasing none."""

    def get(self, queue: str, pid: str) -> TaskView:
        """One task by pid; raises `TaskNotFound`."""

    def stats(
        self, queues: str | Iterable[str] | None = None, pattern: str | None = None, *, sample: int = DEFAULT_STATS_SAMPLE
    ) -> list[QueueStats]:
        """Statistics of the named queues, or of every non-empty queue matching `pattern`, with up
        to `sample` leases each."""


@runtime_checkable
class QueueClient(QueueReads, Protocol):
    """What the worker, flows, the Spark source and the kombu transport call on a client
    (`kittiwake.Client`'s methods of those names, as it declares them)."""

    @property
    def worker(self) -> str | None:
        """The name lease records give this client's leases unless a lease call names another."""

    @property
    def address(self) -> BrokerAddress:
        """The broker the client talks to (no credentials are shown by its `str`)."""

    @property
    def url(self) -> str:
        """The broker's URL, without credentials."""

    def close(self) -> None:
        """Close every connection; later calls fail."""

    def ping(self, *, timeout: float | None = None) -> object:
        """Round trip to the broker."""

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
        after: Iterable[object] | None = None,
        unless: Iterable[object] | None = None,
        timeout: float | None = None,
    ) -> EnqueueOutcome:
        """Add one task."""

    def enqueue_many(self, tasks: Iterable[NewTaskLike], *, timeout: float | None = None) -> list[EnqueueOutcome]:
        """Add many tasks in one request; one outcome per task, in order."""

    # ------------------------------------------------------------ consuming

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
        """Lease up to `max_tasks` available tasks, smallest pid first, across `queues`."""

    @overload
    def renew(
        self, tasks: LeaseName, lease_secs: float = ..., *, progress: float | None = ..., note: str | None = ...,
        timeout: float | None = ...,
    ) -> ItemOutcome: ...
    @overload
    def renew(
        self, tasks: Iterable[LeaseName], lease_secs: float = ..., *, progress: float | None = ...,
        note: str | None = ..., timeout: float | None = ...,
    ) -> list[ItemOutcome]: ...

    def renew(
        self,
        tasks: LeaseName | Iterable[LeaseName],
        lease_secs: float = DEFAULT_LEASE_SECS,
        *,
        progress: float | None = None,
        note: str | None = None,
        timeout: float | None = None,
    ) -> ItemOutcome | list[ItemOutcome]:
        """Extend leases to now + `lease_secs`: one task's outcome (or an error), or one per task of a list."""

    @overload
    def dequeue(self, tasks: LeaseName, *, timeout: float | None = ...) -> ItemOutcome: ...
    @overload
    def dequeue(self, tasks: Iterable[LeaseName], *, timeout: float | None = ...) -> list[ItemOutcome]: ...

    def dequeue(
        self, tasks: LeaseName | Iterable[LeaseName], *, timeout: float | None = None
    ) -> ItemOutcome | list[ItemOutcome]:
        """Finish leased tasks: one task's outcome (or an error), or one per task of a list."""

    @overload
    def release(
        self, tasks: LeaseName, reason: str | None = ..., *, bury: bool = ..., reject: bool = ...,
        timeout: float | None = ...,
    ) -> ItemOutcome: ...
    @overload
    def release(
        self, tasks: Iterable[LeaseName], reason: str | None = ..., *, bury: bool = ..., reject: bool = ...,
        timeout: float | None = ...,
    ) -> list[ItemOutcome]: ...

    def release(
        self,
        tasks: LeaseName | Iterable[LeaseName],
        reason: str | None = None,
        *,
        bury: bool = False,
        reject: bool = False,
        timeout: float | None = None,
    ) -> ItemOutcome | list[ItemOutcome]:
        """Give leased tasks back: one task's outcome (or an error), or one per task of a list."""

    @overload
    def cancel(self, tasks: TaskName, reason: str | None = ..., *, timeout: float | None = ...) -> ItemOutcome: ...
    @overload
    def cancel(
        self, tasks: Sequence[TaskName], reason: str | None = ..., *, timeout: float | None = ...
    ) -> list[ItemOutcome]: ...

    def cancel(
        self, tasks: TaskName | Sequence[TaskName], reason: str | None = None, *, timeout: float | None = None
    ) -> ItemOutcome | list[ItemOutcome]:
        """Withdraw tasks into their dead-letter queues: one task's outcome (or TASK_NOT_FOUND), or
        one per task of a list."""

    def update(
        self,
        *,
        enqueue: Iterable[NewTaskLike] = (),
        dequeue: Iterable[LeaseName] | LeaseName = (),
        renew: Iterable[LeaseName] | LeaseName = (),
        release: Iterable[LeaseName] | LeaseName = (),
        lease_secs: float = DEFAULT_LEASE_SECS,
        reason: str | None = None,
        timeout: float | None = None,
    ) -> UpdateResult:
        """Apply enqueues, dequeues, renewals and releases atomically, in one consistency group."""

    # ------------------------------------------------------------ inspecting

    def peek(
        self, queue: str, n: int = 10, from_pid: str | None = None, *, timeout: float | None = None
    ) -> list[TaskView]:
        """Up to `n` tasks of a queue in pid order (from `from_pid` on), without leasing them."""

    def get(self, queue: str, pid: str, *, timeout: float | None = None) -> TaskView:
        """One task by pid; raises TaskNotFound."""

    def list_queues(
        self, pattern: str | None = None, min_tasks: int = 0, limit: int = 1000, *,
        start_after: str | None = None, timeout: float | None = None
    ) -> list[QueueInfo]:
        """Queues in name order past `start_after` whose name matches `pattern`, holding at least
        max(1, `min_tasks`) tasks."""

    def stats(
        self,
        queues: str | Iterable[str] | None = None,
        pattern: str | None = None,
        *,
        sample: int = DEFAULT_STATS_SAMPLE,
        timeout: float | None = None,
    ) -> list[QueueStats]:
        """Statistics of the named queues, or of every non-empty queue matching `pattern`."""

    # ---------------------------------------------------------- joins, dead letters, queues

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
        """Keep a join; returns "created", "unchanged" or "replaced"."""

    def purge_join(self, name: str, key: str, *, limit: int = 10_000, timeout: float | None = None) -> int:
        """Delete up to `limit` tokens of key `key` (or below it) waiting in the join's ports; how many."""

    def delete_queue(self, queue: str, *, timeout: float | None = None) -> int:
        """Drop a queue and all its tasks; returns how many tasks it held."""

    def requeue_dead(
        self,
        queue: str,
        pids: Iterable[str] | None = None,
        *,
        after_pid: str | None = None,
        limit: int = 1000,
        timeout: float | None = None,
    ) -> DeadLetterPage:
        """Move dead letters of `queue` back into it under their original pids, a page at a time
        (`next_pid`: the `after_pid` of the next call; see `Client.requeue_dead`)."""

    def purge_dead(
        self,
        queue: str,
        pids: Iterable[str] | None = None,
        *,
        after_pid: str | None = None,
        limit: int = 1000,
        timeout: float | None = None,
    ) -> DeadLetterPage:
        """Delete dead letters of `queue`, chosen as for `requeue_dead`."""
