"""The running task as the task's own code sees it: identity, attempt, and progress reports.

A worker runs each task inside a `TaskContext`. The task reaches it either as
its first argument (``@app.task(bind=True)``) or through `current_task()`.
`progress(fraction, note)` records how far the task got; the worker's
heartbeat carries the latest report to the broker with its next lease
renewal (`renew(progress=..., note=...)`), where ``handle.status()`` and
``kittiwake get`` show it. Reports are coalesced: only the latest one
between two heartbeats travels.

`enqueue_on_success(queue, data, pid=...)` adds a task to the update that
finishes the run: it is enqueued in the same atomic step that dequeues this
task and posts its result, and only if the run succeeds — never by a run that
failed, was lost with its worker, or lost its lease (TaskMaster's atomic
dequeue-and-enqueue). Such tasks must be in the running task's consistency
group (the part of its queue name before ``#``). With tracing on, such a task
carries the run's trace context in its headers (`tracing`), unless given one.
"""

from __future__ import annotations

import contextvars
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from kittiwake.app import tracing
from kittiwake.model import Limits, group_of, validate_pid, validate_queue

ProgressReporter = Callable[[float, "str | None"], None]

_current: contextvars.ContextVar[TaskContext | None] = contextvars.ContextVar("kittiwake_task", default=None)


def _ignore_progress(fraction: float, note: str | None) -> None:
    pass


@dataclass(slots=True)
class TaskContext:
    """One delivery of one task, as the worker runs it."""

    id: str  # the task id: the same on every delivery and retry
    name: str  # the task's registered name
    queue: str
    pid: str
    attempt: int = 1  # 1 on the first try, 2 on the first retry, ...
    deliveries: int = 1  # times leased, this time included (crashes count too)
    headers: dict[str, str] = field(default_factory=dict)
    reporter: ProgressReporter = _ignore_progress
    outbox: list[dict[str, Any]] = field(default_factory=list)  # tasks for the finishing update

    def progress(self, fraction: float, note: str | None = None) -> None:
        """Report progress from 0 to 1 with an optional note ("resized 40 of 100 images")."""
        fraction = float(fraction)
        if not 0.0 <= fraction <= 1.0:
            raise ValueError(f"progress must be from 0 to 1, got {fraction}")
        self.reporter(fraction, note)

    def enqueue_on_success(
        self, queue: str, data: bytes | str, *, pid: str | None = None, headers: Mapping[str, str] | None = None
    ) -> None:
        """Enqueue a task when, and only when, this run finishes successfully (see the module)."""
        from kittiwake.client.calls import task_fields

        limits = Limits()
        validate_queue(queue, limits)
        if pid is not None:
            validate_pid(pid, limits, "pid", queue)
        if tracing.enabled():
            traced = dict(headers or {})
            tracing.inject(traced)
            headers = traced or None
        item = {key: value for key, value in task_fields(queue, data, pid=pid, headers=headers).items()
                if value is not None}
        if group_of(queue) != group_of(self.queue):
            raise ValueError(
                f"{queue!r} is not in the consistency group of {self.queue!r}: one update cannot span groups"
            )
        self.outbox.append(item)


def current_task() -> TaskContext:
    """The task this code runs in; raises RuntimeError outside a worker's task."""
    context = _current.get()
    if context is None:
        raise RuntimeError("current_task() is only available inside a task run by a worker")
    return context


def enter(context: TaskContext) -> contextvars.Token[TaskContext | None]:
    return _current.set(context)


def leave(token: contextvars.Token[TaskContext | None]) -> None:
    _current.reset(token)
