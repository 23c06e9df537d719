"""The periodic scheduler (``kittiwake worker --beat``): fire each tick of each periodic task, once.

Any number of schedulers may run — one per host for availability — and each
tick still runs once, with no leader election: a tick is enqueued with the
pid ``<name>@<tick>`` (`envelope.tick_pid`), so while it waits or runs a
second scheduler's enqueue collapses into it, and with
``unless=[(<queue>.ticks-done, <tick>@<name>), (<queue>.dead, <name>@<tick>)]``
so that once it finished (the worker enqueues the marker in the same update
that dequeues the run) or was dead-lettered, a late scheduler's enqueue
collapses too. A worker writes a marker only for a tick already due by its
clock (`loop.TICK_SKEW_SECS` of slack): anyone who may enqueue into the queue
can run a task under a tick's pid, and a marker for a tick still to come would
have every scheduler skip it. Markers are kept for an hour (`loop.MARKER_RETENTION_SECS`)
and a scheduler fires only ticks younger than `TICK_GRACE_SECS`, so a marker
is always there when it matters.

Ticks are absolute (`schedule`), so every scheduler computes the same ones.
A scheduler fires only the latest due tick of each task: ticks missed while
no scheduler ran are skipped, not replayed.
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import datetime
from typing import Any, Callable

from kittiwake import errors
from kittiwake.app.definitions import PeriodicDefinition
from kittiwake.app.envelope import tick_marker_pid, tick_pid, ticks_done_queue_of
from kittiwake.app.schedule import utc
from kittiwake.client.interfaces import QueueClient
from kittiwake.constants import TASK_ID_HEADER
from kittiwake.model import dead_queue_of

log = logging.getLogger("kittiwake.worker.beat")

TICK_GRACE_SECS = 60.0
MAX_SLEEP_SECS = 1.0


def tick_task(app: Any, periodic: PeriodicDefinition, tick: datetime) -> dict[str, Any]:
    """The task that runs `periodic` for `tick` (see the module docstring for its pid and `unless`)."""
    definition = periodic.task
    queue = definition.queue
    pid = tick_pid(definition.name, tick)
    return {
        "queue": queue,
        "pid": pid,
        "data": app.serializer.dump_call(definition.name, periodic.args, periodic.kwargs),
        "headers": {TASK_ID_HEADER: pid},
        "max_attempts": definition.options.broker_max_attempts,
        "unless": [
            (ticks_done_queue_of(queue), tick_marker_pid(definition.name, tick)),
            (dead_queue_of(queue), pid),
        ],
    }


class Beat:
    """Fires due ticks of an app's periodic tasks; `fire_due(now)` is one step, `start` runs it in a thread."""

    def __init__(self, app: Any, client: QueueClient, clock: Callable[[], float] = time.time) -> None:
        self.app = app
        self.client = client
        self.clock = clock
        self.fired: dict[str, datetime] = {}  # last tick enqueued (or found collapsed) per task
        self.enqueued = 0
        self.collapsed = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def fire_due(self, now: float) -> float:
        """Enqueue every periodic task's latest due tick not fired yet; returns seconds to sleep."""
        moment = utc(now)
        sleep = MAX_SLEEP_SECS
        for name, periodic in self.app.periodics.items():
            tick = periodic.schedule.last_tick(moment)
            if self.fired.get(name) != tick and (moment - tick).total_seconds() <= TICK_GRACE_SECS:
                try:
                    outcome = self.client.enqueue_many([tick_task(self.app, periodic, tick)])[0]
                except errors.KittiwakeError as error:
                    if self._stop.is_set():
                        return MAX_SLEEP_SECS  # stopping: its client may have been closed under it
                    log.warning("firing %s at %s: %s", name, tick.isoformat(), error)
                    sleep = min(sleep, 0.5)
                    continue
                self.fired[name] = tick
                if outcome.collapsed:
                    self.collapsed += 1
                else:
                    self.enqueued += 1
                    log.info("fired %s for %s", name, tick.isoformat())
            following = periodic.schedule.next_tick(moment)
            sleep = min(sleep, max(0.0, (following - moment).total_seconds()))
        return sleep

    def start(self) -> None:
        if not self.app.periodics:
            return
        self._thread = threading.Thread(target=self._run, name="kittiwake-beat", daemon=True)
        self._thread.start()

    def stop(self, *, wait: bool = True) -> None:
        """Fire no more; with `wait`, wait (up to 5 s) for a step on its way."""
        self._stop.set()
        if wait and self._thread is not None:
            self._thread.join(5.0)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                sleep = self.fire_due(self.clock())
            except Exception:
                log.exception("periodic scheduler step failed")
                sleep = MAX_SLEEP_SECS
            self._stop.wait(sleep + 0.001)
