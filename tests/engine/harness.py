"""Small helpers that let engine tests read like the paper's examples.

A `Clock` is the broker's wall clock, moved by hand. `put` and `take` are enqueue and lease with
the arguments a test cares about; `ref` is what a worker hands back to renew, release or dequeue;
`lease_all` and `finish` drain a queue and finish what was leased.
"""

from __future__ import annotations

import dataclasses
from typing import Iterable

from kittiwake.engine import Engine
from kittiwake.model import EnqueueOutcome, LeaseRef, LeaseRequest, NewTask, Task

START = 1_000.0


class Clock:
    """Epoch seconds, moved only by the test."""

    def __init__(self, now: float = START) -> None:
        self.now = now

    def advance(self, secs: float) -> float:
        self.now += secs
        return self.now


def put(engine: Engine, now: float, queue: str, *pids: str | None, data: bytes = b"task", **fields) -> list[EnqueueOutcome]:
    """Enqueue one task per pid (None: a FIFO pid) in one request."""
    return engine.enqueue([NewTask(queue, data, pid=pid, **fields) for pid in pids], now)


def take(engine: Engine, now: float, *queues: str, max_tasks: int = 1, lease_secs: float = 30.0, **fields) -> list[Task]:
    """Lease from the queues; the tasks come back in pid order, as copies: the engine hands out
    its own objects, which later calls change (a broker encodes its reply at once)."""
    request = LeaseRequest(list(queues), max_tasks=max_tasks, lease_secs=lease_secs, **fields)
    return [dataclasses.replace(task) for task in engine.lease(request, now)]


def lease_all(engine: Engine, now: float, queue: str) -> list[Task]:
    """Every task leasable now (a lease may return fewer than asked: the head may be small)."""
    leased: list[Task] = []
    while batch := engine.lease(LeaseRequest([queue], max_tasks=10_000), now):
        leased.extend(batch)
    return leased


def finish(engine: Engine, now: float, tasks: Iterable[Task]) -> None:
    """Dequeue leased tasks, each of which must succeed."""
    outcomes = engine.dequeue([ref(task) for task in tasks], now)
    assert all(o.ok for o in outcomes), outcomes


def ref(task: Task) -> LeaseRef:
    return LeaseRef(task.queue, task.pid, task.lease_id)


def pids(tasks: Iterable) -> list[str]:
    return [task.pid if hasattr(task, "pid") else task["pid"] for task in tasks]


def codes(outcomes: Iterable) -> list[str | None]:
    return [outcome.code for outcome in outcomes]
