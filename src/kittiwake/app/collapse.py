"""Which run a submission with an idempotency key joined, and so whose result its handle gets.

`submit(key=k)` enqueues a task with pid k and a fresh submission id. Two
things can happen at the broker:

* the enqueue creates the task: a new run, whose result is named after this
  submission — the handle already waits for it;
* the enqueue collapses, because a task with pid k still exists (or, for a
  delayed submit, because its ``unless`` key does): this submission joins
  that task's run, and its handle must wait for the result of that run —
  which is named after the submission that created it, an id this app does
  not know yet. It reads it from the live task's headers (one `get`) and
  shares the slot of that submission, with every other handle of the run.

A result only comes here when the live task's reply queue is this app's;
a task submitted by another app (or without a result) leaves the handle to
watch the broker, as before, and it raises `ResultUnavailable` once the task
is gone.

The live task can finish in the round trip between the enqueue and the
`get`. Its result was then posted after this submission collapsed, to the
reply queue named in the task. For that window, a keyed submission captures
every result of its task id from before its enqueue (`ResultCapture`); if
the task is gone, the handle takes the captured result posted last, or the
next one to arrive. That is the result of the run it joined unless another
run of the same key was created and finished within the same round trip.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, Sequence

from kittiwake import errors
from kittiwake.app.envelope import result_pid
from kittiwake.constants import REPLY_TO_HEADER

if TYPE_CHECKING:
    from kittiwake.app.replies import ReplyCollector
    from kittiwake.app.result_slots import ResultCapture, ResultSlot
    from kittiwake.client import Client, EnqueueOutcome


class Handle(Protocol):
    """What following needs of a handle (`handles.Handle`, which calls this module: no import back)."""

    queue: str
    pid: str
    slot: ResultSlot | None
    reply_queue: str | None
    submission: str | None
    capture: ResultCapture | None


class Collecting(Protocol):
    """What following a collapsed submission needs of the `App`: its client and its collector."""

    @property
    def client(self) -> Client: ...

    @property
    def collector(self) -> ReplyCollector: ...


def follow_collapsed(
    app: Collecting, tasks: Sequence[dict[str, Any]], handles: Sequence[Handle], outcomes: Sequence[EnqueueOutcome]
) -> None:
    """Point each handle whose enqueue collapsed at the run it joined; stop capturing for the others."""
    for task, handle, outcome in zip(tasks, handles, outcomes):
        capture = handle.capture
        if capture is None:
            continue
        try:
            if outcome.collapsed:
                _join_live_run(app, task, handle, outcome)
        finally:
            if capture.follower is None:  # else it waits, with the handle, for the next result
                handle.capture = None
                app.collector.release(capture)


def _join_live_run(app: Collecting, task: dict[str, Any], handle: Handle, outcome: EnqueueOutcome) -> None:
    places = [(outcome.queue, outcome.pid), *(tuple(key) for key in task.get("unless", ()))]
    for queue, pid in places:
        try:
            live = app.client.get(queue, pid)
        except errors.TaskNotFound:
            continue
        handle.queue, handle.pid = queue, pid  # status and dead-letter checks look at the live task
        headers = live.headers or {}
        if headers.get(REPLY_TO_HEADER) == handle.reply_queue:
            _follow(app, handle, result_pid(headers, pid))
        return
    _take_latest_captured(handle)


def _follow(app: Collecting, handle: Handle, submission: str) -> None:
    """Wait for the result of `submission` (perhaps already captured)."""
    handle.submission = submission
    handle.slot = app.collector.slot(submission)
    assert handle.capture is not None
    for _, captured, ok, value in handle.capture.results:
        if captured == submission:
            handle.slot.set(ok, value)


def _take_latest_captured(handle: Handle) -> None:
    """The run joined finished before it could be looked up: its result is the last one posted."""
    capture = handle.capture
    assert capture is not None and handle.slot is not None
    if capture.results:
        _, submission, ok, value = max(capture.results, key=lambda result: result[0])
        handle.submission = submission
        handle.slot.set(ok, value)
    else:
        capture.follower = handle.slot
