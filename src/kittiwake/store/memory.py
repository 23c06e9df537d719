"""In-memory twin of the stores: same contract, no disk.

Writes apply at once and are journalled so `rollback()` can undo everything
since the last `commit()`; `crash()` is rollback under the name a test reads
best. Tasks are copied in and out so the engine's own objects never alias the
store's rows. Generations are kept per queue exactly as the SQLite store
keeps them, so dropped queues vanish from reads at once, and `reap` has
nothing to do. It has no disk to fail, so it raises no `errors.StorageFailure`
of its own (a test wraps it in a store that fails on demand).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

from sortedcontainers import SortedDict

from kittiwake.engine.mutations import (
    DeleteEdges,
    DeleteTask,
    DropQueue,
    Mutation,
    PutEdge,
    PutTask,
    SetCounter,
    SetLease,
    SetWaiting,
)
from kittiwake.engine.storage import QueueSummary, Recovery
from kittiwake.model import FIFO_PID_DIGITS, Task

_LEASE_FIELDS = (
    "attempts",
    "deliveries",
    "lease_id",
    "lease_owner",
    "lease_peer",
    "leased_at",
    "lease_expires_at",
    "progress",
    "note",
)


def _copy(task: Task) -> Task:
    """A copy that shares nothing mutable with the original (headers are a dict)."""
    return dataclasses.replace(task, headers=dict(task.headers) if task.headers is not None else None)


class MemoryStore:
    def __init__(self) -> None:
        self._queues: dict[str, SortedDict] = {}
        self._edges: dict[tuple[str, str], list[tuple[str, str]]] = {}
        self._journal: list[tuple[str, Any, Any]] = []
        self._counters: dict[str, int] = {}
        self.commits = 0
        self.writes: list[Mutation] = []  # every mutation ever written, for tests

    # writes

    def write(self, mutations: Sequence[Mutation]) -> None:
        for mutation in mutations:
            self.writes.append(mutation)
            if isinstance(mutation, PutTask):
                task = _copy(mutation.task)
                rows = self._queues.get(task.queue)
                if rows is None:
                    rows = self._queues[task.queue] = SortedDict()
                    self._journal.append(("new-queue", task.queue, None))
                self._journal.append(("row", (task.queue, task.pid), rows.get(task.pid)))
                rows[task.pid] = task
            elif isinstance(mutation, SetLease):
                rows = self._queues.get(mutation.queue)
                row = rows.get(mutation.pid) if rows is not None else None
                if row is None:
                    continue
                self._journal.append(("row", (mutation.queue, mutation.pid), _copy(row)))
                for name in _LEASE_FIELDS:
                    setattr(row, name, getattr(mutation, name))
            elif isinstance(mutation, SetWaiting):
                rows = self._queues.get(mutation.queue)
                row = rows.get(mutation.pid) if rows is not None else None
                if row is None:
                    continue
                self._journal.append(("row", (mutation.queue, mutation.pid), _copy(row)))
                row.waiting_on = mutation.waiting_on
                row.children = mutation.children
            elif isinstance(mutation, PutEdge):
                key = (mutation.queue, mutation.pid)
                self._journal.append(("edges", key, list(self._edges.get(key, ()))))
                children = self._edges.setdefault(key, [])
                child = (mutation.child_queue, mutation.child_pid)
                if child not in children:
                    children.append(child)
            elif isinstance(mutation, DeleteEdges):
                key = (mutation.queue, mutation.pid)
                if key in self._edges:
                    self._journal.append(("edges", key, self._edges.pop(key)))
            elif isinstance(mutation, DeleteTask):
                rows = self._queues.get(mutation.queue)
                if rows is not None and mutation.pid in rows:
                    self._journal.append(("row", (mutation.queue, mutation.pid), rows.pop(mutation.pid)))
            elif isinstance(mutation, SetCounter):
                old = self._counters.get(mutation.name)
                self._journal.append(("counter", mutation.name, old))
                self._counters[mutation.name] = max(old or 0, mutation.value)
            elif isinstance(mutation, DropQueue):
                rows = self._queues.pop(mutation.queue, None)
                if rows is not None:
                    self._journal.append(("drop", mutation.queue, rows))

    def commit(self) -> None:
        self._journal.clear()
        self.commits += 1

    def rollback(self) -> None:
        for kind, key, old in reversed(self._journal):
            if kind == "row":
                queue, pid = key
                rows = self._queues.setdefault(queue, SortedDict())
                if old is None:
                    rows.pop(pid, None)
                else:
                    rows[pid] = old
            elif kind == "drop":
                self._queues[key] = old
            elif kind == "edges":
                if old:
                    self._edges[key] = old
                else:
                    self._edges.pop(key, None)
            elif kind == "counter":
                if old is None:
                    self._counters.pop(key, None)
                else:
                    self._counters[key] = old
            elif kind == "new-queue":
                self._queues.pop(key, None)
        self._journal.clear()
        for name in [name for name, rows in self._queues.items() if not rows]:
            del self._queues[name]

    crash = rollback

    # reads

    def load_available(self, queue: str, after_pid: str, limit: int, now: float) -> list[Task]:
        rows = self._queues.get(queue)
        if not rows:
            return []
        found: list[Task] = []
        start = rows.bisect_right(after_pid)
        for pid in rows.islice(start):
            row = rows[pid]
            if row.waiting_on > 0 or (row.lease_expires_at is not None and row.lease_expires_at > now):
                continue
            found.append(_copy(row))
            if len(found) >= limit:
                break
        return found

    def children_of(self, queue: str, pid: str) -> list[tuple[str, str]]:
        return sorted(self._edges.get((queue, pid), ()))

    def parents_in(self, queue: str) -> list[str]:
        return sorted(pid for parent_queue, pid in self._edges if parent_queue == queue)

    def load_task(self, queue: str, pid: str) -> Task | None:
        rows = self._queues.get(queue)
        row = rows.get(pid) if rows is not None else None
        return _copy(row) if row is not None else None

    def scan(self, queue: str, from_pid: str | None, limit: int) -> list[Task]:
        rows = self._queues.get(queue)
        if not rows:
            return []
        start = rows.bisect_left(from_pid) if from_pid is not None else 0
        return [_copy(rows[pid]) for pid in rows.islice(start, start + limit)]

    def find_by_sender(
        self, sender: str, queue: str | None, limit: int, after: tuple[str, str] | None = None
    ) -> list[Task]:
        if queue is not None and after is not None:
            raise ValueError("find_by_sender: `after` walks every queue; it goes without `queue`")
        found: list[Task] = []
        names = [queue] if queue is not None else sorted(self._queues)
        for name in names:
            if after is not None and name < after[0]:
                continue
            for row in self._queues.get(name, {}).values():
                if row.sender == sender and (after is None or (name, row.pid) > after):
                    found.append(_copy(row))
                    if len(found) >= limit:
                        return found
        return found

    def queues_for_receiver(self, receiver: str) -> list[str]:
        return sorted(
            name for name, rows in self._queues.items() if any(row.receiver == receiver for row in rows.values())
        )

    def recover(self, now: float) -> Recovery:
        recovery = Recovery()
        for name in sorted(self._queues):
            rows = self._queues[name]
            if not rows:
                continue
            fifo = [pid for pid in rows if len(pid) == FIFO_PID_DIGITS and pid.isascii() and pid.isdigit()]
            blocked = sum(1 for row in rows.values() if row.waiting_on > 0)
            recovery.queues.append(QueueSummary(name, len(rows), rows.keys()[-1], max(fifo, default=None), blocked))
            for row in rows.values():
                if row.lease_expires_at is None:
                    continue
                held = recovery.leased if row.lease_expires_at > now else recovery.expired
                held.append(_copy(row))
        recovery.counters = dict(self._counters)
        return recovery

    def reap(self, limit: int) -> int:
        return 0  # dropped queues are gone at once

    def close(self) -> None:
        pass

    # for tests

    def all_tasks(self) -> list[Task]:
        return [_copy(row) for name in sorted(self._queues) for row in self._queues[name].values()]
