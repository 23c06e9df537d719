"""A submitted task as its submitter holds it: wait for its result, ask its status, cancel it.

A `Handle` names its task in the broker by `.queue` and `.pid` (so handles
can be passed as `after=` parents) and knows its `.id`. Its result arrives in
the app's reply queue and is handed over by the `ReplyCollector`; nothing is
stored anywhere else (CloudKon §3.2.1).

A handle waits for the result of one run: the run its submission started,
or, when the submission collapsed into a task of the same key that was
still there, that task's run (`.submission` names the run awaited). A key
submitted again after its earlier run finished starts a new run, and its
handle gets that run's result, never the earlier one.

`result(timeout)` returns the task's return value, raises `TaskFailed` with
the remote error, or `TimeoutError`. It cannot hang on a task that is gone:
while waiting it looks at the task in the broker from time to time, and a
task found in its dead-letter queue — dead-lettered by a worker, by the
broker after its last lease ran out, because a parent failed, or cancelled —
raises `TaskFailed` with the broker's reason even if no error result was
posted. A task that finished without its result arriving here within
`RESULT_GRACE_SECS`, and whose result is not waiting in this app's reply
queue either (an identical key from another app got there first, and the
result went to that app), raises `ResultUnavailable`; a task submitted with
``ignore_result`` returns None once finished. Brief broker outages while
waiting (a restart) are waited out.

A handle submitted through a batching producer (`App(batching=...)`, or
inside ``with app.batch():``) is returned before its task reaches the
broker: `sent(timeout)` waits until the task is durable (raising the
enqueue's error if it failed, `ConnectionLost` if its outcome is unknown);
`result`, `status` and `cancel` wait for that first. A handle submitted
without one was durable when `submit` returned, and `sent()` returns at once.

`status()` is ``(state, progress, note)``; state is one of

* ``pending``: waiting to be leased (or waiting for its delay, or for a retry);
* ``blocked``: waiting for parents to finish;
* ``running``: a worker holds it;
* ``done`` / ``failed``: finished (failed: in the dead-letter queue, or an
  error result arrived).
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any, Iterable, NamedTuple, Protocol

from kittiwake import errors
from kittiwake.app.collapse import follow_collapsed
from kittiwake.app.envelope import public_note, redelivery_allowed
from kittiwake.app.result_slots import ResultCapture, ResultSlot
from kittiwake.app.serialization import RemoteError
from kittiwake.constants import CANCELLED_REASON, DEAD_REASON_HEADER, SUBMISSION_HEADER
from kittiwake.errors import ResultUnavailable, TaskFailed
from kittiwake.model import dead_queue_of

if TYPE_CHECKING:
    from kittiwake.client import Client, Sending

FIRST_CHECK_SECS = 1.0
MAX_CHECK_SECS = 5.0
RESULT_GRACE_SECS = 10.0  # a finished task's result may still be on its way to the collector
_following = threading.Lock()  # a keyed handle learns once which run it joined, whichever thread asks


class BrokerAccess(Protocol):
    """What a handle needs of its `App`: the client that reaches the task's broker."""

    @property
    def client(self) -> Client: ...


class TaskStatus(NamedTuple):
    """Where a task stands: ``state, progress, note = handle.status()``."""

    state: str  # pending, blocked, running, done, failed
    progress: float | None = None
    note: str | None = None


class Handle:
    """One submitted task. `.id` is its task id; `.queue` and `.pid` name it in the broker."""

    __slots__ = ("app", "id", "name", "queue", "pid", "slot", "wants_result", "reply_queue", "submission",
                 "capture", "sending", "task", "__weakref__")

    def __init__(
        self, app: BrokerAccess, task_id: str, name: str, queue: str, pid: str, slot: ResultSlot | None,
        reply_queue: str | None = None, submission: str | None = None,
    ) -> None:
        self.app = app
        self.id = task_id
        self.name = name
        self.queue = queue
        self.pid = pid
        self.slot = slot
        self.wants_result = slot is not None
        self.reply_queue = reply_queue
        self.submission = submission  # the run whose result this handle waits for
        self.capture: ResultCapture | None = None  # this task id's results, kept until the run joined is known
        self.sending: Sending | None = None  # its enqueue, while a batching producer holds it
        self.task: dict[str, Any] | None = None  # the task sent, kept while a keyed enqueue is pending

    # ------------------------------------------------------------ enqueue

    def sent(self, timeout: float | None = None) -> None:
        """Wait until the task is durable in the broker (at once when it was submitted without
        batching); raises the enqueue's error, or `RequestTimeout` after `timeout` s."""
        sending = self.sending
        if sending is None:
            return
        outcome = sending.sent(timeout)
        with _following:
            if self.sending is None:
                return
            task, self.task = self.task, None
            if task is not None:
                follow_collapsed(self.app, [task], [self], [outcome])  # type: ignore[arg-type]
            self.sending = None

    def __repr__(self) -> str:
        return f"<Handle {self.name} id={self.id} queue={self.queue}>"

    # -------------------------------------------------------------- result

    def done(self) -> bool:
        """Whether the result has arrived (it does not ask the broker)."""
        return self.slot is not None and self.slot.is_set()

    def result(self, timeout: float | None = None) -> Any:
        """The task's return value; raises TaskFailed, ResultUnavailable, or TimeoutError after `timeout` s."""
        deadline = None if timeout is None else time.monotonic() + timeout
        if self.sending is not None:
            try:
                self.sent(timeout)
            except errors.RequestTimeout:
                raise TimeoutError(f"task {self.id} not even enqueued within {timeout} s") from None
        check_every = FIRST_CHECK_SECS
        gone_since: float | None = None
        while True:
            if self.slot is not None and self.slot.is_set():
                return self._outcome()
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                raise TimeoutError(f"no result for task {self.id} within {timeout} s")
            wait = check_every if deadline is None else min(check_every, deadline - now)
            if self.slot is not None and self.slot.wait(wait):
                return self._outcome()
            if self.slot is None:
                time.sleep(wait)
            try:
                state = self._broker_state()
            except errors.Transient:
                continue  # the broker is away for a moment (restarting?): keep waiting
            if isinstance(state, RemoteError):
                if self.slot is not None and self.slot.is_set():
                    return self._outcome()  # an error result beat the check
                raise TaskFailed.for_task(self.id, state)
            if state is None:
                if not self.wants_result:
                    return None  # finished; nobody asked for its result
                gone_since = gone_since or time.monotonic()
                if time.monotonic() - gone_since > RESULT_GRACE_SECS and not self._result_on_its_way():
                    raise ResultUnavailable(
                        f"task {self.id} finished but its result did not come to this app "
                        "(an identical key submitted elsewhere got there first?)"
                    )
            else:
                gone_since = None
            check_every = min(MAX_CHECK_SECS, check_every * 1.5)

    def _result_on_its_way(self) -> bool:
        """Whether our reply queue holds the result (a collector's lease on it was lost and
        has yet to run out, say): then it will come, however long the task has been gone."""
        if self.reply_queue is None:
            return False
        try:
            self.app.client.get(self.reply_queue, self.submission or self.id)
            return True
        except errors.TaskNotFound:
            return False
        except errors.Transient:
            return True

    def _outcome(self) -> Any:
        assert self.slot is not None
        if self.slot.ok:
            return self.slot.value
        raise TaskFailed.for_task(self.id, self.slot.value)

    def _broker_state(self) -> Any:
        """The task's view if it still waits or runs; a RemoteError if dead-lettered; None if gone."""
        client = self.app.client
        try:
            return client.get(self.queue, self.pid)
        except errors.TaskNotFound:
            pass
        try:
            dead = client.get(dead_queue_of(self.queue), self.pid)  # the newest dead letter of this pid
        except errors.TaskNotFound:
            return None
        headers = dead.headers or {}
        if self.submission is not None and headers.get(SUBMISSION_HEADER, self.submission) != self.submission:
            return None  # an earlier run of the same key died; this handle's run is not that one
        reason = headers.get(DEAD_REASON_HEADER, "DEAD")
        return RemoteError("", "", reason=reason)

    # -------------------------------------------------------------- status

    def status(self) -> TaskStatus:
        """(state, progress, note) as the broker and the reply queue tell it now (``pending`` while a
        batching producer still holds it; the enqueue's error if that failed)."""
        sending = self.sending
        if sending is not None:
            if not sending.done():
                return TaskStatus("pending", None, None)
            self.sent()
        if self.slot is not None and self.slot.is_set():
            if self.slot.ok:
                return TaskStatus("done", 1.0, None)
            error: RemoteError = self.slot.value
            return TaskStatus("failed", None, f"{error.reason}: {error.type}: {error.message}".rstrip(": "))
        state = self._broker_state()
        if state is None:
            return TaskStatus("done", 1.0, None)
        if isinstance(state, RemoteError):
            return TaskStatus("failed", None, state.reason)
        note = public_note(state.note)
        if state.state == "blocked":
            return TaskStatus("blocked", state.progress, note)
        if state.state == "leased":
            if redelivery_allowed(state.note, state.deliveries + 1):
                return TaskStatus("pending", state.progress, note)  # held back for its retry's backoff
            return TaskStatus("running", state.progress, note)
        return TaskStatus("pending", state.progress, note)

    def cancel(self, reason: str | None = None) -> bool:
        """Withdraw the task (whatever its state) into its dead-letter queue, failing every
        task that waits on it. True if it was withdrawn, False if it had already finished.
        A worker running it is not interrupted, but it can no longer finish it."""
        self.sent()
        try:
            self.app.client.cancel((self.queue, self.pid), reason)
        except errors.TaskNotFound:
            return False
        if self.slot is not None:
            self.slot.set(False, RemoteError("Cancelled", reason or "cancelled", reason=CANCELLED_REASON))
        return True


def results_of(handles: Iterable[Handle], timeout: float | None = None) -> list[Any]:
    """The results of many handles in order; raises the first failure (or TimeoutError once
    `timeout` seconds passed in all)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    values = []
    for handle in handles:
        remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
        values.append(handle.result(remaining))
    return values
