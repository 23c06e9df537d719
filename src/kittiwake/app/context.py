"""The running task as the task's own code sees it: identity, attempt, and progress reports.

A worker runs each task inside a `TaskContext`. The task reaches it either as
its first argument (``@app.task(bind=True)``) or through `current_task()`.
`progress(fraction, note)` records how far the task got; the worker's
heartbeat carries the latest report to the broker with its next lease
renewal (`renew(progress=..., note=...)`), where ``handle.status()`` and
``kittiwake get`` show it. Reports are coalesced: only the latest one
between two heartbeats travels.
"""

from __future__ import annotations

import contextvars
from dataclasses import dataclass, field
from typing import Callable

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

    def progress(self, fraction: float, note: str | None = None) -> None:
        """Report progress from 0 to 1 with an optional note ("resized 40 of 100 images")."""
        fraction = float(fraction)
        if not 0.0 <= fraction <= 1.0:
            raise ValueError(f"progress must be from 0 to 1, got {fraction}")
        self.reporter(fraction, note)


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
