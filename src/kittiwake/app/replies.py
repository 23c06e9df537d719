"""The submitter's side of CloudKon's response queue: collect results and hand them to handles.

Each `App` instance has an id and one reply queue per consistency group it
submits into (`envelope.reply_queue_for`). A worker finishing a task
enqueues the result there with pid = the submission id the task carries
(`envelope.SUBMISSION_HEADER`), in the same atomic update that dequeues the
task. One collector thread per app long-polls all of the app's reply queues,
leases results in batches, hands each to the `ResultSlot` of its submission,
and dequeues the batch in one request, sent from a second thread
(`bundles.BundleSender`) while the collector leases the next batch: the two
requests meet in one broker pass, and so share its commit.

Slots are keyed by submission, not by task id: an idempotency key names a
task id that can run again once its first run finished, and each run's
result must reach the handles of that run only. A `ResultCapture` keeps the
results of one task id that arrive while a collapsed submission is still
finding out which run it joined (see `app.collapse`). Both live in
`app.result_slots`.

Slots are held weakly: a result whose handles were all dropped (a `map` whose
handles nobody kept) is dequeued and discarded, so the collector's memory is
bounded by the handles alive, not by the tasks submitted. A result is
dequeued after it is handed over; if the collector dies in between, the
result stays in the reply queue (its lease runs out) and an app started with
the same `app_id` receives it again.
"""

from __future__ import annotations

import logging
import threading
import weakref
from typing import Callable

from kittiwake import errors
from kittiwake.app.bundles import BundleSender
from kittiwake.app.result_slots import ResultCapture, ResultSlot
from kittiwake.app.serialization import Serializer
from kittiwake.client import Client
from kittiwake.constants import TASK_ID_HEADER
from kittiwake.protocol.replies import LeasedTask

log = logging.getLogger("kittiwake.app.replies")

WAIT_SECS = 1.0  # long-poll; also how long a newly watched reply queue may wait to be included
BATCH_RESULTS = 1000
LEASE_SECS = 5.0  # a batch is handed over in milliseconds; a lost lease reply costs this long
RETRY_PAUSE_SECS = 0.5
# After a partial batch of several results, wait this long before the next lease: while results
# flow, fewer, larger batches cost the broker (and the workers waiting on it) fewer passes. A lone
# result (one task waited for at a time) never waits.
LINGER_SECS = 0.02
MAX_CAPTURED_TASK_IDS = 1024  # beyond this many, forget task ids whose captures were dropped


class ReplyCollector:
    """A thread that drains an app's reply queues into result slots."""

    def __init__(self, client: Callable[[], Client], serializer: Serializer, app_id: str) -> None:
        self._client = client
        self._serializer = serializer
        self._app_id = app_id
        self._slots: weakref.WeakValueDictionary[str, ResultSlot] = weakref.WeakValueDictionary()
        self._captures: dict[str, weakref.WeakSet[ResultCapture]] = {}
        self._queues: dict[str, None] = {}
        self._lock = threading.Lock()
        self._arrivals = threading.Condition(threading.Lock())  # shared by every slot: see ResultSlot
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.received = 0

    @property
    def queues(self) -> list[str]:
        with self._lock:
            return list(self._queues)

    def slot(self, submission: str) -> ResultSlot:
        """The slot for a submission id (shared by every handle of that run); hold it to keep the result."""
        with self._lock:
            slot = self._slots.get(submission)
            if slot is None:
                slot = ResultSlot(self._arrivals)
                self._slots[submission] = slot
            return slot

    def slots(self, submissions: list[str]) -> list[ResultSlot]:
        """`slot` of each submission, under one hold of the lock."""
        made = []
        with self._lock:
            for submission in submissions:
                slot = self._slots.get(submission)
                if slot is None:
                    slot = ResultSlot(self._arrivals)
                    self._slots[submission] = slot
                made.append(slot)
        return made

    def capture(self, task_id: str) -> ResultCapture:
        """Start keeping the results of `task_id` that arrive from now on (held weakly: keep it)."""
        capture = ResultCapture(task_id)
        with self._lock:
            if len(self._captures) >= MAX_CAPTURED_TASK_IDS:  # captures dropped without release
                for stale in [key for key, captures in self._captures.items() if not captures]:
                    del self._captures[stale]
            self._captures.setdefault(task_id, weakref.WeakSet()).add(capture)
        return capture

    def release(self, capture: ResultCapture) -> None:
        """Stop feeding `capture`."""
        with self._lock:
            captures = self._captures.get(capture.task_id)
            if captures is not None:
                captures.discard(capture)
                if not captures:
                    del self._captures[capture.task_id]

    def watch(self, reply_queue: str) -> None:
        """Collect from this reply queue too; starts the thread on first use."""
        with self._lock:
            if reply_queue not in self._queues:
                self._queues[reply_queue] = None
                self._wake.set()
            if self._thread is None and not self._stop.is_set():
                self._thread = threading.Thread(target=self._run, name=f"kittiwake-replies-{self._app_id}", daemon=True)
                self._thread.start()

    def close(self, timeout: float = 0.2) -> None:
        """Stop collecting. A long-poll in flight is not waited for: its answer is ignored
        (results it leased return to the reply queue when their lease runs out)."""
        self._stop.set()
        self._wake.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    def _run(self) -> None:
        dequeuer: BundleSender[list[LeasedTask]] = BundleSender(
            self._dequeue, name=f"kittiwake-replies-done-{self._app_id}")
        try:
            self._collect(dequeuer)
        finally:
            try:
                dequeuer.close()  # the last batch's dequeue; if it fails, its leases run out
            except Exception as error:
                log.debug("dequeuing the last results on stopping: %s", error)

    def _collect(self, dequeuer: BundleSender[list[LeasedTask]]) -> None:
        while not self._stop.is_set():
            queues = self.queues
            if not queues:
                self._wake.wait(WAIT_SECS)
                self._wake.clear()
                continue
            try:
                received = self.collect_once(queues, WAIT_SECS, dequeuer.send)
                if 1 < received < BATCH_RESULTS:
                    self._stop.wait(LINGER_SECS)  # results are flowing: let more gather for the next lease
            except errors.Transient as error:
                if self._stop.is_set():
                    return
                log.warning("collecting results: %s; retrying", error)
                self._stop.wait(RETRY_PAUSE_SECS)
            except Exception:  # never let the collector die: handles would hang
                if self._stop.is_set():
                    return
                log.exception("collecting results failed; retrying")
                self._stop.wait(RETRY_PAUSE_SECS)

    def _dequeue(self, tasks: list[LeasedTask]) -> None:
        self._client().dequeue(tasks)

    def collect_once(
        self, queues: list[str], wait_secs: float, dequeue: Callable[[list[LeasedTask]], None] | None = None
    ) -> int:
        """Lease one batch of results, hand them over, dequeue them; returns how many.

        `dequeue` (default: at once, in this thread) finishes the batch; the collector's own
        loop passes a `BundleSender`'s, so that the batch is dequeued while the next is leased."""
        client = self._client()
        tasks = client.lease(
            queues, max_tasks=BATCH_RESULTS, lease_secs=LEASE_SECS, wait_secs=wait_secs,
            worker=f"replies:{self._app_id}",
        )
        if not tasks or self._stop.is_set():
            return 0
        load_result = self._serializer.load_result
        outcomes = [(task, *load_result(task.data)) for task in tasks]
        with self._lock, self._arrivals:
            slots = self._slots
            for task, ok, value in outcomes:
                slot = slots.get(task.pid)
                if slot is not None:
                    slot.fill(ok, value)
            self._arrivals.notify_all()
            captured = []
            for task, ok, value in outcomes if self._captures else ():
                task_id = (task.headers or {}).get(TASK_ID_HEADER)
                for capture in self._captures.get(task_id, ()) if task_id is not None else ():
                    captured.append((capture, task, ok, value))
        for capture, task, ok, value in captured:
            capture.offer(task.enqueued_at, task.pid, ok, value)
        self.received += len(tasks)
        if dequeue is None:
            client.dequeue(tasks)
        else:
            dequeue(tasks)
        return len(tasks)
