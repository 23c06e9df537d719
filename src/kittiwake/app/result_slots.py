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


class ResultSlot:
    """Where the collector puts a task's result; shared by every handle of the same run.

    A slot has no lock of its own: the slots of one collector share one condition
    (`arrivals`), notified once per batch of results, so that a slot costs what a small
    object costs — a bulk submit makes one per task — and handing over a batch of a
    thousand results is one notification, not a thousand.
    """

    __slots__ = ("arrivals", "done", "ok", "value", "__weakref__")

    def __init__(self, arrivals: threading.Condition) -> None:
        self.arrivals = arrivals
        self.done = False
        self.ok = False
        self.value: Any = None

    @classmethod
    def empty(cls, arrivals: threading.Condition | None = None) -> ResultSlot:
        return cls(arrivals if arrivals is not None else threading.Condition(threading.Lock()))

    def is_set(self) -> bool:
        return self.done

    def wait(self, timeout: float | None = None) -> bool:
        """Whether the outcome is in, waiting up to `timeout` seconds for it."""
        if self.done:
            return True
        with self.arrivals:
            return self.arrivals.wait_for(lambda: self.done, timeout)

    def set(self, ok: bool, value: Any) -> None:
        with self.arrivals:
            if self.fill(ok, value):
                self.arrivals.notify_all()

    def fill(self, ok: bool, value: Any) -> bool:
        """Set the outcome without notifying (hold `arrivals`, and notify once for the batch);
        whether it was taken — the first outcome wins, a duplicate run's result is ignored."""
        if self.done:
            return False
        self.ok, self.value = ok, value
        self.done = True
        return True


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
