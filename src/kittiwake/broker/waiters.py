"""Parked long-poll leases: who waits on which queue, in arrival order, until when.

A lease with `wait_secs > 0` that finds nothing is parked here instead of
answered. The group-commit pass asks for the waiters of the queues the engine
reports as ready (`Engine.take_ready`) and retries their leases oldest first,
so the worker that has waited longest is served first; the periodic tick asks
for waiters past their deadline and answers them with an empty list.

Indexes: by sequence number (arrival order, also the identity), by queue (so
an enqueue to one queue touches only its own waiters, not all of them), and a
deadline heap with lazy deletion (a served waiter leaves its heap entry behind;
popping skips it). Deadlines use the monotonic clock so a wall-clock step does
not time out every poll at once.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Iterable

from kittiwake.model import LeaseRequest


@dataclass(slots=True, eq=False)
class Waiter:
    """One parked lease request; `connection` is whatever the server replies through."""

    seq: int
    connection: object
    request_id: int
    lease: LeaseRequest
    deadline: float  # time.monotonic()
    queues: tuple[str, ...] = field(default=())


class WaiterBook:
    """All parked long-polls of one broker."""

    def __init__(self) -> None:
        self._next_seq = 0
        self._by_seq: dict[int, Waiter] = {}
        self._by_queue: dict[str, dict[int, Waiter]] = {}
        self._by_connection: dict[object, dict[int, Waiter]] = {}
        self._names_of: dict[object, int] = {}  # connection -> queue names its waiters hold, in all
        self._deadlines: list[tuple[float, int]] = []

    def __len__(self) -> int:
        return len(self._by_seq)

    def park(self, connection: object, request_id: int, lease: LeaseRequest, deadline: float) -> Waiter:
        self._next_seq += 1
        waiter = Waiter(self._next_seq, connection, request_id, lease, deadline, tuple(dict.fromkeys(lease.queues)))
        self._add(waiter)
        return waiter

    def repark(self, waiters: Iterable[Waiter]) -> None:
        """Put back waiters taken out by a pass whose commit failed; they keep their place."""
        for waiter in waiters:
            if waiter.seq not in self._by_seq:
                self._add(waiter)

    def _add(self, waiter: Waiter) -> None:
        self._by_seq[waiter.seq] = waiter
        for queue in waiter.queues:
            self._by_queue.setdefault(queue, {})[waiter.seq] = waiter
        self._by_connection.setdefault(waiter.connection, {})[waiter.seq] = waiter
        self._names_of[waiter.connection] = self._names_of.get(waiter.connection, 0) + len(waiter.queues)
        heap = self._deadlines
        heapq.heappush(heap, (waiter.deadline, waiter.seq))
        if len(heap) > 2 * len(self._by_seq) + 1024:
            # served waiters leave entries behind until their deadline; keep
            # the heap proportional to the live waiters
            self._deadlines = [(w.deadline, w.seq) for w in self._by_seq.values()]
            heapq.heapify(self._deadlines)

    def remove(self, waiter: Waiter) -> None:
        if self._by_seq.pop(waiter.seq, None) is None:
            return
        for queue in waiter.queues:
            bucket = self._by_queue.get(queue)
            if bucket is not None:
                bucket.pop(waiter.seq, None)
                if not bucket:
                    del self._by_queue[queue]
        mine = self._by_connection.get(waiter.connection)
        if mine is not None:
            mine.pop(waiter.seq, None)
            if not mine:
                del self._by_connection[waiter.connection]
        names = self._names_of.get(waiter.connection, 0) - len(waiter.queues)
        if names > 0:
            self._names_of[waiter.connection] = names
        else:
            self._names_of.pop(waiter.connection, None)

    def on_queues(self, queues: Iterable[str]) -> list[Waiter]:
        """Waiters on any of these queues, oldest first."""
        found: dict[int, Waiter] = {}
        by_queue = self._by_queue
        for queue in queues:
            bucket = by_queue.get(queue)
            if bucket:
                found.update(bucket)
        return [found[seq] for seq in sorted(found)]

    def everyone(self) -> list[Waiter]:
        """Every waiter, oldest first."""
        return [self._by_seq[seq] for seq in sorted(self._by_seq)]

    def expired(self, monotonic_now: float) -> list[Waiter]:
        """Take out and return the waiters whose deadline has passed, oldest first."""
        heap = self._deadlines
        due: list[Waiter] = []
        while heap and heap[0][0] <= monotonic_now:
            deadline, seq = heapq.heappop(heap)
            waiter = self._by_seq.get(seq)
            if waiter is not None and waiter.deadline == deadline:
                self.remove(waiter)
                due.append(waiter)
        if not self._by_seq:
            heap.clear()  # drop stale entries of served waiters
        return due

    def names_of(self, connection: object) -> int:
        """How many queue names the waiters of one connection hold, in all."""
        return self._names_of.get(connection, 0)

    def of_connection(self, connection: object) -> list[Waiter]:
        """The waiters of one connection, oldest first."""
        return sorted(self._by_connection.get(connection, {}).values(), key=lambda waiter: waiter.seq)

    def drop_connection(self, connection: object) -> int:
        """Forget the waiters of a closed connection; returns how many."""
        mine = self._by_connection.get(connection)
        if not mine:
            return 0
        waiters = list(mine.values())
        for waiter in waiters:
            self.remove(waiter)
        return len(waiters)
