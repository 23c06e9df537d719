"""What the engine needs from a store: buffered writes and a handful of reads.

The engine is sans-IO in the h11 sense: it imports no socket, disk or clock.
It reads cold data (queue tails beyond the in-memory head, point look-ups for
dedupe, peeks) through this `TaskStore` protocol, which the in-memory
twin (`kittiwake.store.memory`), SQLite (`kittiwake.store.sqlite`) and
PostgreSQL (`kittiwake.store.postgres`) implement and one contract suite tests.

Contract:

* `write(mutations)` takes effect for every later read at once; it becomes
  durable at the next `commit()`; `rollback()` forgets writes since the last
  commit (the broker then rebuilds the engine from `recover`).
* Reads see only the current generation of each queue (rows of a dropped
  queue vanish at once even before they are reaped).
* every call may raise `errors.StorageFailure` when the disk fails (each store
  turns its own database's errors into it, `kittiwake.store.faults`); a
  failed `commit()` says whether its outcome is known. Anything else a store
  raises is a bug;
* `reap(limit)` is housekeeping: it deletes up to `limit` rows of dropped
  queues inside the open transaction (a store that drops them at once does
  nothing and returns 0);
* `recover(now)` summarises what is on disk so a new engine can start:
  per-queue size, largest pid and largest FIFO-shaped pid, every task whose lease is still running,
  every task whose lease ran out while no engine was watching (its failed
  attempt is not counted yet), and the high-water marks written with
  `SetCounter` (ids must never repeat, even when the clock stepped back over a
  restart). It costs O(live queues + running leases + blocked tasks), never a
  read of every task row: a broker with 10M tasks on disk restarts in seconds.

A store that several brokers share (`shared` true: PostgreSQL with
`brokers=many`) is a `SharedTaskStore`: it also offers what `coherence` needs
to keep each broker's cache right: `claim(names)` locks queues for the open
transaction and returns a `QueueReload` for each one another broker changed
since this one last saw it; `claimed` is the set locked so far;
`expired_lease_queues(now, limit)` names queues with leases that ran out,
whoever granted them; `id_slot` and `id_stride` split the id space between
brokers (`ids`). `is_shared(store)` is how the engine tells: a store that
says `shared` offers the rest.
"""

from __future__ import annotations

from collections.abc import Set
from dataclasses import dataclass, field
from typing import Protocol, Sequence, TypeGuard

from kittiwake.engine.mutations import Mutation
from kittiwake.model import Task


@dataclass(slots=True)
class QueueSummary:
    queue: str
    size: int
    max_pid: str
    max_fifo_pid: str | None = None  # largest pid of 17 digits: where FIFO pids resume
    blocked: int = 0  # tasks waiting for parents


@dataclass(slots=True)
class Recovery:
    queues: list[QueueSummary] = field(default_factory=list)
    leased: list[Task] = field(default_factory=list)  # lease still running at `now`
    expired: list[Task] = field(default_factory=list)  # lease ran out, attempt not yet counted
    counters: dict[str, int] = field(default_factory=dict)  # high-water marks (SetCounter)


@dataclass(slots=True)
class QueueReload:
    """One queue as the store holds it now, for a broker whose cache of it went stale."""

    summary: QueueSummary | None  # None: the queue holds no task
    leased: list[Task] = field(default_factory=list)  # every task with a lease set, running or run out


class TaskStore(Protocol):
    def write(self, mutations: Sequence[Mutation]) -> None:
        """Apply mutations in order; visible to reads now, durable at commit."""

    def commit(self) -> None:
        """Make every write so far durable (fsync unless durability is relaxed)."""

    def rollback(self) -> None:
        """Forget writes since the last commit."""

    def load_available(self, queue: str, after_pid: str, limit: int, now: float) -> list[Task]:
        """Up to `limit` tasks with pid > after_pid in pid order, not blocked, whose lease is not running at `now`."""

    def children_of(self, queue: str, pid: str) -> list[tuple[str, str]]:
        """(queue, pid) of every task waiting on this one."""

    def parents_in(self, queue: str) -> list[str]:
        """Pids of `queue` that have children waiting on them (edges), in pid order."""

    def load_task(self, queue: str, pid: str) -> Task | None:
        """The task at (queue, pid), leased or not."""

    def scan(self, queue: str, from_pid: str | None, limit: int) -> list[Task]:
        """Up to `limit` tasks with pid >= from_pid in pid order, leased or not."""

    def find_by_sender(
        self, sender: str, queue: str | None, limit: int, after: tuple[str, str] | None = None
    ) -> list[Task]:
        """Tasks sent by `sender` (optionally in one queue), by queue then pid. With `after` (and no
        `queue`: ValueError), only those whose (queue, pid) sorts after it — `(q, "")` is from queue
        q on — so a search walks the sender's index a page at a time and can jump over queues."""

    def queues_for_receiver(self, receiver: str) -> list[str]:
        """Names of queues holding at least one task directed to `receiver`."""

    def recover(self, now: float) -> Recovery:
        """Summary of the durable state, for a fresh engine."""

    def reap(self, limit: int) -> int:
        """Delete up to `limit` rows of dropped queues, durable at the next commit; how many."""

    def close(self) -> None:
        """Release files and connections."""


class SharedTaskStore(TaskStore, Protocol):
    """A store several brokers share: what `coherence`, `leases` and `ids` use of it."""

    @property
    def shared(self) -> bool:
        """True: other brokers may change any queue (only such a store is used as one)."""

    @property
    def claimed(self) -> Set[str]:
        """The queues locked in the open transaction."""

    @property
    def id_slot(self) -> int:
        """This broker's share of the id space: its ids are `id_slot` modulo `id_stride`."""

    @property
    def id_stride(self) -> int:
        """How many shares the id space is cut into."""

    def claim(self, names: Sequence[str]) -> dict[str, QueueReload]:
        """Lock these queues until the transaction ends; a reload of each another broker changed
        since this one last saw it."""

    def expired_lease_queues(self, now: float, limit: int) -> list[str]:
        """Up to `limit` queues holding a lease that ran out by `now`, whichever broker granted it."""


def is_shared(store: TaskStore) -> TypeGuard[SharedTaskStore]:
    """Whether other brokers share `store` (its `shared` is true); such a store is a `SharedTaskStore`."""
    return bool(getattr(store, "shared", False))
