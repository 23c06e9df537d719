"""The worker registry: which workers are alive and what they are doing (CloudKon's monitoring).

Each worker process keeps one record in the registry queue (``_workers``, or
``--registry-queue``: a broker user whose rights cover only its own prefix
names one there, e.g. ``alice.workers``): pid = worker
id, data = what does not change (host, process id, queues, slots, start
time), directed at the worker itself (receiver = worker id) so that only it
leases its record. It holds the record under a lease of `ttl` seconds and
renews it every `every_secs` with a note carrying what changes (tasks held
and running, slot utilisation since the last beat). Liveness is the lease:
a worker that dies stops renewing, its record's lease runs out and the
record shows as available — `live_workers` lists only leased records. No
clock comparison between hosts is needed; the broker's clock decides.

A stopping worker dequeues its record. Records of dead workers are removed
by the next worker that starts (`prune_dead`), and by ``kittiwake workers --prune``.
A record counts as dead once its lease ran out (its attempts count it); one
never leased is a worker registering right now (between its enqueue and its
lease) and is left alone unless it is older than `UNLEASED_GRACE_SECS` (its
worker died in between).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

from kittiwake import errors
from kittiwake.client import LeasedTask
from kittiwake.client.interfaces import QueueClient
from kittiwake.constants import WORKERS_QUEUE

log = logging.getLogger("kittiwake.worker.registry")

TTL_BEATS = 3  # a record outlives two missed beats
UNLEASED_GRACE_SECS = 60.0  # a record never leased this long after its enqueue: its worker died registering


@dataclass(slots=True)
class WorkerRecord:
    """One worker as `kittiwake workers` shows it."""

    id: str
    alive: bool
    info: dict[str, Any]
    status: dict[str, Any]
    expires_at: float | None

    @property
    def running(self) -> list[str]:
        return list(self.status.get("running", []))

    @property
    def utilisation(self) -> float | None:
        return self.status.get("utilisation")

    @property
    def last_beat_at(self) -> float | None:
        """When the broker last renewed the record (its clock): the deadline less the time to live."""
        beat_secs = self.info.get("beat_secs")
        if self.expires_at is None or not isinstance(beat_secs, (int, float)) or isinstance(beat_secs, bool):
            return None
        return self.expires_at - beat_secs * TTL_BEATS

    def to_dict(self) -> dict[str, Any]:
        """The record as `kittiwake workers --json` and the broker's HTTP API show it."""
        return {
            "id": self.id,
            "alive": self.alive,
            "host": self.info.get("host"),
            "pid": self.info.get("pid"),
            "queues": self.info.get("queues", []),
            "concurrency": self.info.get("concurrency"),
            "started_at": self.info.get("started_at"),
            "running": self.running,
            "held": self.status.get("held", 0),
            "utilisation": self.utilisation,
            "finished": self.status.get("finished", 0),
            "stopping": self.status.get("stopping", False),
            "last_beat_at": self.last_beat_at,
            "expires_at": self.expires_at,
            **({"routing": self.status["routing"]} if "routing" in self.status else {}),
        }


class WorkerRegistry:
    """This process's record in ``_workers``, renewed by a thread."""

    def __init__(self, client: QueueClient, worker_id: str, every_secs: float = 2.0, queue: str = WORKERS_QUEUE) -> None:
        self.client = client
        self.queue = queue
        self.worker_id = worker_id
        self.every_secs = every_secs
        self.ttl_secs = every_secs * TTL_BEATS
        self._record: LeasedTask | None = None
        self._info: dict[str, Any] = {}
        self._status: Callable[[], dict[str, Any]] = dict
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, info: dict[str, Any], status: Callable[[], dict[str, Any]]) -> None:
        # with the beat, a reader tells when the record was last renewed (`WorkerRecord.last_beat_at`)
        self._info, self._status = {**info, "beat_secs": self.every_secs}, status
        try:
            prune_dead(self.client, self.queue)
        except errors.KittiwakeError as error:
            log.warning("pruning dead workers' records: %s", error)
        self._thread = threading.Thread(target=self._run, name="kittiwake-registry", daemon=True)
        self._thread.start()

    def stop(self, *, wait: bool = True) -> None:
        """Stop beating and dequeue the record; without `wait`, only stop beating (a later `stop()`
        dequeues it)."""
        self._stop.set()
        if not wait:
            return
        if self._thread is not None:
            self._thread.join(5.0)
        record, self._record = self._record, None
        if record is not None:
            try:
                self.client.dequeue(record, timeout=5.0)
            except errors.KittiwakeError:
                pass  # its lease runs out: it shows as dead, the next worker prunes it

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.beat()
            except errors.KittiwakeError as error:
                if self._stop.is_set():
                    return  # stopping: its client may have been closed under it
                log.warning("worker heartbeat: %s", error)
            self._stop.wait(self.every_secs)

    def beat(self) -> None:
        """Register if needed, then renew the record with the current status as its note."""
        note = json.dumps(self._status(), separators=(",", ":"))[:4000]
        if self._record is not None:
            try:
                self.client.renew(self._record, self.ttl_secs, note=note)
                return
            except (errors.LeaseExpired, errors.TaskNotLeased, errors.TaskNotFound):
                self._record = None  # we stalled past the lease: take the record again
        self.client.enqueue(
            self.queue, json.dumps(self._info), pid=self.worker_id, receiver=self.worker_id,
            max_attempts=1_000_000,
        )
        leased = self.client.lease(self.queue, receiver=self.worker_id, lease_secs=self.ttl_secs,
                                   worker=self.worker_id, max_tasks=10)
        for task in leased:
            if task.pid == self.worker_id:
                self._record = task
            else:  # not ours (undirected by mistake): give it back
                self.client.release(task)
        if self._record is not None:
            self.client.renew(self._record, self.ttl_secs, note=note)


def record_of(view: Any) -> WorkerRecord:
    """A record from its task as peek shows it (anything with pid, data, state, note, lease_expires_at)."""
    try:
        info = json.loads(view.data)
    except ValueError:
        info = {}
    try:
        status = json.loads(view.note) if view.note else {}
    except ValueError:
        status = {}
    return WorkerRecord(view.pid, view.state == "leased", info, status, view.lease_expires_at)


def all_workers(client: QueueClient, limit: int = 1000, queue: str = WORKERS_QUEUE) -> list[WorkerRecord]:
    """Every record in the registry, alive or not, by worker id."""
    return [record_of(view) for view in client.peek(queue, min(limit, 10_000))]


def live_workers(client: QueueClient, limit: int = 1000, queue: str = WORKERS_QUEUE) -> list[WorkerRecord]:
    """Workers whose record is held: they renewed it within its time to live."""
    return [record for record in all_workers(client, limit, queue) if record.alive]


def prune_dead(client: QueueClient, queue: str = WORKERS_QUEUE) -> int:
    """Remove the records of workers that stopped renewing them; returns how many."""
    removed = 0
    now = time.time()
    for view in client.peek(queue, 10_000):
        record = record_of(view)
        if record.alive or (view.attempts == 0 and now - view.enqueued_at < UNLEASED_GRACE_SECS):
            continue
        try:
            for task in client.lease(queue, receiver=record.id, lease_secs=5.0, max_tasks=10):
                if task.pid == record.id:
                    client.dequeue(task)
                    removed += 1
                else:
                    client.release(task)
        except errors.KittiwakeError:
            continue
    return removed
