"""Where a result waits between the collector that receives it and the handles that want it.

A `ResultSlot` holds the outcome of one run (one submission); every handle of
that run shares it, and the first outcome set wins. A `ResultCapture` keeps
the results of one task id while a submission that collapsed into a live
task finds out which run it joined (see `app.collapse`). The `ReplyCollector`
(`app.replies`) fills both; `Handle`s (`app.handles`) read them. Neither
module imports the other for these: both import this one.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True, weakref_slot=True)
class ResultSlot:
    """Where the collector puts a task's result; shared by every handle of the same run."""

    event: threading.Event
    ok: bool = False
    value: Any = None

    @classmethod
    def empty(cls) -> ResultSlot:
        return cls(threading.Event())

    def set(self, ok: bool, value: Any) -> None:
        if self.event.is_set():
            return  # the first outcome wins (a duplicate run's result is ignored)
        self.ok, self.value = ok, value
        self.event.set()


@dataclass(slots=True, weakref_slot=True, eq=False)  # eq=False: hashed by identity, for the WeakSet
class ResultCapture:
    """Results of one task id collected while a submission of it works out which run it joined.

    `results` holds (enqueued_at, submission, ok, value) of each result seen;
    once `follower` is set, the next result seen goes to it instead.
    """

    task_id: str
    results: list[tuple[float, str, bool, Any]] = field(default_factory=list)
    follower: ResultSlot | None = None

    def offer(self, enqueued_at: float, submission: str, ok: bool, value: Any) -> None:
        if self.follower is not None:
            self.follower.set(ok, value)
        else:
            self.results.append((enqueued_at, submission, ok, value))
