"""What a run of mutations comes to: the shorter list a store applies to the same end, pure.

Behind a commit log the store is brought up to date in batches (`sqlite`'s
checkpoints), and most tasks of a queue live briefly: enqueued, leased and
dequeued between two checkpoints, such a task need never touch the B-tree.
`coalesce` drops what cancels out and folds what overwrites, keyed by
(queue, pid) within one generation of the queue (a `DropQueue` starts a new
one, and nothing is carried across it):

* `PutTask` … `DeleteTask` of the same task: both go, with every `SetLease`
  and `SetWaiting` of it in between;
* `SetLease` or `SetWaiting` after a `PutTask` of the same task: folded into
  the put's row (the task is inserted as it ended up);
* `SetLease` after a `SetLease` (or `SetWaiting` after `SetWaiting`) of the
  same task: only the last stays (each overwrites every column it sets);
* `SetLease`/`SetWaiting` then `DeleteTask` of a task put earlier (already in
  the store): the updates go, the delete stays.

Edges (`PutEdge`, `DeleteEdges`), counters and drops are kept as they are, in
their order. The result, applied in order, leaves every row, edge, counter
and queue size as the input would: a put and its delete both count nothing.
"""

from __future__ import annotations

from typing import Sequence

from kittiwake.engine.mutations import DeleteTask, DropQueue, Mutation, PutTask, SetLease, SetWaiting
from kittiwake.model import Task

Key = tuple[str, str, int]  # queue, pid, generation (counted here: DropQueues seen)


def _with_lease(task: Task, lease: SetLease) -> Task:
    return Task(
        task.queue, task.pid, task.data, task.enqueued_at, task.sender, task.receiver, task.headers,
        task.max_attempts, lease.attempts, lease.deliveries, lease.lease_id, lease.lease_owner, lease.lease_peer,
        lease.leased_at, lease.lease_expires_at, task.waiting_on, task.children, lease.progress, lease.note,
    )


def _with_waiting(task: Task, waiting: SetWaiting) -> Task:
    return Task(
        task.queue, task.pid, task.data, task.enqueued_at, task.sender, task.receiver, task.headers,
        task.max_attempts, task.attempts, task.deliveries, task.lease_id, task.lease_owner, task.lease_peer,
        task.leased_at, task.lease_expires_at, waiting.waiting_on, waiting.children, task.progress, task.note,
    )


def coalesce(mutations: Sequence[Mutation]) -> list[Mutation]:
    """The mutations with what cancels out dropped and what overwrites folded (see the module)."""
    out: list[Mutation | None] = []
    generation: dict[str, int] = {}
    put_at: dict[Key, int] = {}
    lease_at: dict[Key, int] = {}
    waiting_at: dict[Key, int] = {}
    for mutation in mutations:
        kind = type(mutation)
        if kind is PutTask:
            task = mutation.task  # type: ignore[union-attr]
            key = (task.queue, task.pid, generation.get(task.queue, 0))
            if key not in put_at:  # a second put of one pid is not ours to fold: keep both
                put_at[key] = len(out)
            out.append(mutation)
        elif kind is SetLease or kind is SetWaiting:
            update: SetLease | SetWaiting = mutation  # type: ignore[assignment]
            key = (update.queue, update.pid, generation.get(update.queue, 0))
            at = put_at.get(key)
            if at is not None:
                put = out[at]
                assert isinstance(put, PutTask)
                if isinstance(update, SetLease):
                    out[at] = PutTask(_with_lease(put.task, update))
                else:
                    out[at] = PutTask(_with_waiting(put.task, update))
                continue
            last = lease_at if kind is SetLease else waiting_at
            before = last.get(key)
            if before is not None:
                out[before] = None
            last[key] = len(out)
            out.append(mutation)
        elif kind is DeleteTask:
            delete: DeleteTask = mutation  # type: ignore[assignment]
            key = (delete.queue, delete.pid, generation.get(delete.queue, 0))
            for last in (lease_at, waiting_at):
                before = last.pop(key, None)
                if before is not None:
                    out[before] = None
            at = put_at.pop(key, None)
            if at is not None:
                out[at] = None  # never stored: neither it nor its delete need touch the store
                continue
            out.append(mutation)
        elif kind is DropQueue:
            queue = mutation.queue  # type: ignore[union-attr]
            generation[queue] = generation.get(queue, 0) + 1
            out.append(mutation)
        else:
            out.append(mutation)
    return [mutation for mutation in out if mutation is not None]
