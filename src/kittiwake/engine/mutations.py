"""The changes the engine asks a store to make durable, as plain data.

The engine never writes rows itself: each operation appends mutations here
and hands them to the store (`TaskStore.write`). The store applies them in
order; the broker calls `commit()` before any reply that depends on them goes
out (group commit: one fsync for many requests).

* `PutTask`: insert a new task row (enqueue, dead-letter move). The engine
  never puts a pid that exists (it collapses instead, and dead letters get
  pids of their own), so a store may count each put as one task more.
* `SetLease`: overwrite the lease and attempt columns of an existing row
  (lease, renew, release, expiry) — TaskMaster §5.2 persists the leased state
  so a restart does not hand out leased tasks twice.
* `DeleteTask`: remove a row (dequeue, dead-letter move).
* `SetWaiting`, `PutEdge`, `DeleteEdges`: dependencies (Albatross §5.2.2):
  a blocked task's count of unfinished parents, a parent's count of children,
  and the parent → child edges read back when a parent finishes or fails.
* `DropQueue`: forget every row of a queue in constant time by bumping its
  generation; the store reaps the old rows lazily (TaskMaster §5.2).
* `SetCounter`: raise a broker-wide high-water mark (the last lease id, the
  FIFO clock) so ids issued after a restart never repeat one issued before,
  even when the clock stepped back and the rows that carried them are gone.
"""

from __future__ import annotations

from dataclasses import dataclass

from kittiwake.model import Task


@dataclass(frozen=True, slots=True)
class PutTask:
    task: Task


@dataclass(frozen=True, slots=True)
class SetLease:
    queue: str
    pid: str
    attempts: int
    deliveries: int
    lease_id: int
    lease_owner: str | None
    lease_peer: str | None
    leased_at: float | None
    lease_expires_at: float | None
    progress: float | None = None
    note: str | None = None

    @classmethod
    def of(cls, task: Task) -> SetLease:
        return cls(
            task.queue,
            task.pid,
            task.attempts,
            task.deliveries,
            task.lease_id,
            task.lease_owner,
            task.lease_peer,
            task.leased_at,
            task.lease_expires_at,
            task.progress,
            task.note,
        )


@dataclass(frozen=True, slots=True)
class SetWaiting:
    """New dependency counts of an existing row: unfinished parents and children."""

    queue: str
    pid: str
    waiting_on: int
    children: int


@dataclass(frozen=True, slots=True)
class PutEdge:
    """Child (child_queue, child_pid) waits for parent (queue, pid)."""

    queue: str
    pid: str
    child_queue: str
    child_pid: str


@dataclass(frozen=True, slots=True)
class DeleteEdges:
    """Forget every edge from the parent (queue, pid): it finished or failed."""

    queue: str
    pid: str


@dataclass(frozen=True, slots=True)
class DeleteTask:
    queue: str
    pid: str


@dataclass(frozen=True, slots=True)
class DropQueue:
    queue: str


@dataclass(frozen=True, slots=True)
class SetCounter:
    """Persist `value` as the high-water mark named `name` (it only grows)."""

    name: str
    value: int


Mutation = PutTask | SetLease | SetWaiting | PutEdge | DeleteEdges | DeleteTask | DropQueue | SetCounter
