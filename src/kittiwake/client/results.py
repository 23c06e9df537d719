"""What client calls return: typed views of the broker's replies.

Replies carry the engine's return values encoded by msgspec, so the records
the engine already defines in `kittiwake.model` (`EnqueueOutcome`,
`ItemOutcome`, `QueueInfo`, `QueueStats`, `LeaseSample`) are decoded straight
into those dataclasses. Two views exist only on this side of the wire:

* `LeasedTask`: a task as a lease hands it out. The broker sends the stored
  task; the client names the lease expiry `expires_at` (the broker's field is
  `lease_expires_at`) and the lease owner `worker`. A `LeasedTask` is what
  `renew`, `dequeue` and `release` take back; a successful renew moves its
  `expires_at` forward in place so a worker always holds the current expiry.
* `TaskView`: a task as `peek`, `get` and `find_by_sender` show it, without
  a lease id (those calls never grant a lease).

Unknown fields in a reply are ignored, so a newer broker can add fields
without breaking older clients.
"""

from __future__ import annotations

import msgspec

from kittiwake.model import EnqueueOutcome, ItemOutcome, LeaseRef, LeaseSample, QueueInfo, QueueStats


class LeasedTask(msgspec.Struct, kw_only=True):
    """A task held under a lease; `lease_id` is the fencing token to show when finishing it."""

    queue: str
    pid: str
    data: bytes
    lease_id: int
    expires_at: float | None = msgspec.field(default=None, name="lease_expires_at")
    attempts: int = 0  # failed attempts so far: releases and expired leases
    deliveries: int = 0  # times leased, this lease included
    enqueued_at: float = 0.0
    sender: str | None = None
    receiver: str | None = None
    headers: dict[str, str] | None = None
    max_attempts: int | None = None
    leased_at: float | None = None
    worker: str | None = msgspec.field(default=None, name="lease_owner")

    def lease_ref(self) -> LeaseRef:
        """The (queue, pid, lease id) triple that names this lease."""
        return LeaseRef(self.queue, self.pid, self.lease_id)


class TaskView(msgspec.Struct, kw_only=True):
    """A task as peek, get and find_by_sender show it; `state` is "available", "leased" or "blocked"."""

    queue: str
    pid: str
    data: bytes
    state: str
    enqueued_at: float
    sender: str | None = None
    receiver: str | None = None
    headers: dict[str, str] | None = None
    attempts: int = 0
    deliveries: int = 0
    lease_owner: str | None = None
    lease_expires_at: float | None = None
    waiting_on: int = 0  # unfinished parents; state is "blocked" while above 0
    children: int = 0
    progress: float | None = None
    note: str | None = None


class DeadLetterPage(msgspec.Struct, kw_only=True):
    """What `requeue_dead` / `purge_dead` did to each dead letter; `next_pid` is the cursor
    of the next page when walking a whole dead-letter queue (None: done)."""

    outcomes: list[ItemOutcome] = []
    next_pid: str | None = None


class UpdateResult(msgspec.Struct, kw_only=True):
    """What one atomic update did, item by item (every item succeeded, or the update raised)."""

    enqueued: list[EnqueueOutcome] = []
    dequeued: list[ItemOutcome] = []
    renewed: list[ItemOutcome] = []
    released: list[ItemOutcome] = []


__all__ = [
    "DeadLetterPage",
    "EnqueueOutcome",
    "ItemOutcome",
    "LeaseRef",
    "LeaseSample",
    "LeasedTask",
    "QueueInfo",
    "QueueStats",
    "TaskView",
    "UpdateResult",
]
