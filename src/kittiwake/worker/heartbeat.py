"""Keeping leases alive: the worker's heartbeat renews every task it holds and carries progress.

A task is leased for its definition's `lease_secs` and must be renewed before
that runs out, or the broker offers it to another worker (TaskMaster §5.6:
that is how a crashed worker's tasks come back). The `LeaseKeeper` thread
renews each held task — waiting for a slot or running — once a third of its
lease has passed, so two renewals can be lost before the lease is; one
`renew` request covers every task due with the same lease length.

Progress: `TaskContext.progress()` stores the latest report on the held task
and wakes the keeper, which sends it with a renew of that task alone
(`renew(progress=..., note=...)` applies to every task of the request), at
most every `PROGRESS_EVERY_SECS` per task.

A renew refused with LEASE_EXPIRED, TASK_NOT_LEASED or TASK_NOT_FOUND means
the task is no longer ours (the lease ran out while the process stalled, or
the task was cancelled): it is marked `lost`; the run goes on, but its
outcome will be refused by the broker and is dropped.

With a `ledger`, every task held and dropped is also told to the supervisor
(`ledger`: what a process that dies held).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

from kittiwake import errors
from kittiwake.app.definitions import TaskDefinition
from kittiwake.client import LeasedTask
from kittiwake.client.interfaces import QueueClient
from kittiwake.worker.ledger import HeldTask, LedgerWriter

log = logging.getLogger("kittiwake.worker.heartbeat")

RENEW_FRACTION = 1 / 3
PROGRESS_EVERY_SECS = 0.2
MAX_TICK_SECS = 0.25


@dataclass(eq=False, slots=True)
class Held:
    """A task this worker holds a lease on, from lease to finish."""

    task: LeasedTask
    lease_secs: float
    renewed_at: float  # monotonic
    definition: TaskDefinition | None = None
    started_at: float | None = None  # monotonic, when a slot began running it
    ended: bool = False  # the run is over; its outcome waits to be settled
    progress: tuple[float, str | None] | None = None  # the latest report not yet sent
    progress_sent_at: float = 0.0
    lost: bool = False
    finishing: bool = False  # its outcome is on its way to the broker: renew errors are expected
    extra: dict[str, object] = field(default_factory=dict)

    @property
    def key(self) -> tuple[str, str]:
        return (self.task.queue, self.task.pid)

    def ledger_entry(self) -> HeldTask:
        task = self.task
        return HeldTask(task.queue, task.pid, task.lease_id, task.deliveries, self.lease_secs)


class LeaseKeeper:
    """Renews the leases of held tasks in a thread; see the module docstring."""

    def __init__(
        self, client: QueueClient, clock: Callable[[], float] = time.monotonic, *, ledger: LedgerWriter | None = None
    ) -> None:
        self.client = client
        self.clock = clock
        self.ledger = ledger
        self._held: dict[tuple[str, str], Held] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.renewals = 0

    # -------------------------------------------------------------- holding

    def hold(self, held: Held) -> None:
        self.hold_all([held])

    def hold_all(self, helds: list[Held]) -> None:
        if self.ledger is not None:  # told first: a task held is never unknown to the supervisor
            self.ledger.held(held.ledger_entry() for held in helds)
        with self._lock:
            for held in helds:
                self._held[held.key] = held

    def drop(self, held: Held) -> None:
        self.drop_all([held])

    def drop_all(self, helds: list[Held]) -> None:
        with self._lock:
            dropped = [held.key for held in helds if self._held.get(held.key) is held]
            for key in dropped:
                del self._held[key]
        if self.ledger is not None:
            self.ledger.dropped(dropped)

    def held(self) -> list[Held]:
        with self._lock:
            return list(self._held.values())

    def __len__(self) -> int:
        return len(self._held)

    def report(self, held: Held, fraction: float, note: str | None) -> None:
        """A progress report from the running task; sent with the next renewal, soon."""
        held.progress = (fraction, note)
        self._wake.set()

    # -------------------------------------------------------------- thread

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="kittiwake-heartbeat", daemon=True)
        self._thread.start()

    def stop(self, *, wait: bool = True) -> None:
        """Stop renewing; with `wait`, wait (up to 5 s) for a renewal on its way."""
        self._stop.set()
        self._wake.set()
        if wait and self._thread is not None:
            self._thread.join(5.0)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                wait = self.renew_due()
            except Exception as error:  # the broker may be away for a moment; try again soon
                if self._stop.is_set():
                    return  # stopping: its client may have been closed under it
                log.warning("renewing leases: %s", error)
                wait = MAX_TICK_SECS
            self._wake.wait(wait)
            self._wake.clear()

    def renew_due(self) -> float:
        """Renew what is due, send pending progress; returns seconds until the next check."""
        now = self.clock()
        due: dict[float, list[Held]] = {}
        reports: list[Held] = []
        next_check = MAX_TICK_SECS
        for held in self.held():
            if held.lost or held.finishing:
                continue
            interval = held.lease_secs * RENEW_FRACTION
            if held.progress is not None and now - held.progress_sent_at >= PROGRESS_EVERY_SECS:
                reports.append(held)
            elif now - held.renewed_at >= interval:
                due.setdefault(held.lease_secs, []).append(held)
            else:
                next_check = min(next_check, interval - (now - held.renewed_at))
        for held in reports:
            report = held.progress
            if report is None:
                continue
            held.progress = None
            held.progress_sent_at = now
            self._renew([held], held.lease_secs, progress=report[0], note=report[1])
        for lease_secs, batch in due.items():
            self._renew(batch, lease_secs)
        if any(held.progress is not None for held in reports):
            next_check = min(next_check, PROGRESS_EVERY_SECS)
        return max(0.01, next_check)

    def _renew(self, batch: list[Held], lease_secs: float, progress: float | None = None, note: str | None = None) -> None:
        sent_at = self.clock()
        try:
            outcomes = self.client.renew([held.task for held in batch], lease_secs, progress=progress, note=note)
        except errors.BadRequest as error:
            log.warning("renew refused: %s", error)
            return
        self.renewals += len(batch)
        for held, outcome in zip(batch, outcomes):
            if outcome.ok:
                held.renewed_at = sent_at
            elif outcome.code in errors.LEASE_LOST_CODES and not held.finishing:
                held.lost = True
                log.warning("lost the lease of %s/%s: %s", held.task.queue, held.task.pid, outcome.message)
