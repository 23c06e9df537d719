"""What became of a run, and how each outcome reaches the broker (atomically where it matters).

The runner decides; this module writes the decision down:

* DONE: one `update` dequeues the task and enqueues its result (and what the
  outcome adds: a join's job its output tokens), named after
  its ``kittiwake-submission``, into the reply queue named in its
  ``kittiwake-reply-to`` header — only if that is a reply queue of the app
  in the task's consistency group (`result_task`; the runner dead-letters
  any other task unrun as REPLY_TO_REFUSED, see `envelope`, "Reply queues
  are the submitter's") — (and, for a periodic run, the tick's marker
  into ``<queue>.ticks-done`` while dequeuing markers too old to matter).
  Results of many tasks in one consistency group go in one update (a
  worker-side group commit); if such a batch is refused because one task is
  no longer ours, each task is retried alone, so one lost lease never costs
  the others their results.
* RETRY: the task stays where it is, under our lease, renewed for the backoff
  with a ``[redeliver N]`` note; when that lease runs out the broker counts
  the failed attempt and offers the task again. Retrying in place keeps the
  task's (queue, pid), so tasks waiting on it keep waiting — a dequeue and
  re-enqueue elsewhere would count as finishing it and release its children.
* FAIL: the last attempt failed (or the task can never run: unknown task,
  undecodable payload, an at-most-once task whose worker was lost). The task
  goes to its dead-letter queue with the reason and an error result goes to
  the reply queue. When the broker would dead-letter it anyway on this
  release (its last attempt), both happen in one update; otherwise
  (at-most-once keeps one spare attempt) `release(bury=True)` comes first
  and the error result second — a crash in between leaves the handle to find
  the task in the dead-letter queue.
* RETURN: handed back unstarted (at shutdown, or waiting behind slots stuck
  on slow runs): noted ``[redeliver N]`` so an at-most-once task may still
  run, then rejected: released without using an attempt. Two requests per
  batch (a renew with the note, a release), whatever its size.
* DROP: nothing to do (the lease was lost; another worker has the task).
* PARK: a gang that did not assemble keeps its lease and runs again after
  `backoff_secs` on the same worker; the worker loop handles it, the settler
  never sees it.

A request whose outcome is unknown (the connection broke) is repeated: an
update that had been applied is then refused because its task is gone, which
is taken as done — until `abandon()` (a worker stopping without its broker):
then nothing is repeated, and outcomes still to settle are dropped (their
tasks come back when their leases run out).
"""

from __future__ import annotations

import enum
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from kittiwake import errors
from kittiwake.app.envelope import is_reply_queue_for, redeliver_note, result_pid
from kittiwake.client import LeasedTask
from kittiwake.client.interfaces import QueueClient
from kittiwake.constants import REPLIES_PREFIX, REPLY_TO_HEADER, TASK_ID_HEADER
from kittiwake.model import Limits, group_of
from kittiwake.worker.heartbeat import Held

log = logging.getLogger("kittiwake.worker.outcomes")

MAX_BATCH_ITEMS = 2000
RETRY_PAUSE_SECS = 0.2
RETRY_FOR_SECS = 60.0
DEFAULT_BROKER_MAX_ATTEMPTS = Limits().default_max_attempts


class Kind(enum.Enum):
    """What happens to a task after a run (or instead of one)."""

    DONE = "done"  # dequeue + result
    RETRY = "retry"  # keep the lease for the backoff, then the broker offers it again
    FAIL = "fail"  # dead-letter + error result
    RETURN = "return"  # unstarted: give back
    DROP = "drop"  # not ours any more
    PARK = "park"  # keep the lease, free the slot, run again after backoff_secs (a gang not yet assembled)


@dataclass(slots=True)
class Outcome:
    held: Held
    kind: Kind
    payload: bytes | None = None  # DONE: the result; FAIL: the error result
    reason: str | None = None  # FAIL: dead-letter reason; RETRY: the note
    backoff_secs: float = 0.0  # RETRY: the lease is kept this long; PARK: the pause before running again
    enqueue: list[dict[str, Any]] = field(default_factory=list)  # more tasks for the DONE update
    dequeue: list[LeasedTask] = field(default_factory=list)  # more leases for the DONE update
    settled: Callable[[], None] | None = None  # DONE: called once its update is applied

    @property
    def task(self) -> LeasedTask:
        return self.held.task


def result_task(task: LeasedTask, payload: bytes | None, reply_prefix: str = REPLIES_PREFIX) -> dict[str, Any] | None:
    """The reply-queue task carrying `payload` for `task`, or None when nobody wants it or its
    reply-to is not a reply queue of an app with `reply_prefix` in the task's group (the worker
    writes there with its own rights: see `envelope`)."""
    headers = task.headers or {}
    reply_to = headers.get(REPLY_TO_HEADER)
    if reply_to is None or payload is None:
        return None
    if not is_reply_queue_for(reply_to, task.queue, reply_prefix):
        log.warning("result of %s/%s not posted: %r is not a reply queue of this app", task.queue, task.pid,
                    reply_to[:255])
        return None
    task_id = headers.get(TASK_ID_HEADER, task.pid)
    return {"queue": reply_to, "pid": result_pid(headers, task.pid), "data": payload,
            "headers": {TASK_ID_HEADER: task_id}}


def broker_buries_on_release(task: LeasedTask) -> bool:
    """Whether one more failed attempt reaches the task's max_attempts at the broker."""
    return task.attempts + 1 >= (task.max_attempts or DEFAULT_BROKER_MAX_ATTEMPTS)


class Settler:
    """Applies outcomes to the broker; `settle` takes a batch (see the module docstring)."""

    def __init__(
        self, client: QueueClient, clock: Callable[[], float] = time.monotonic, reply_prefix: str = REPLIES_PREFIX
    ) -> None:
        self.client = client
        self.clock = clock
        self.reply_prefix = reply_prefix  # the app's: results go only to its reply queues
        self.done = 0
        self.failed = 0
        self.retried = 0
        self.dropped = 0
        self._abandoned = threading.Event()

    def abandon(self) -> None:
        """The broker is gone and the worker stops without it: settle nothing more, retry nothing."""
        self._abandoned.set()

    def settle(self, outcomes: list[Outcome]) -> None:
        if self._abandoned.is_set():
            self.dropped += len(outcomes)
            return
        by_group: dict[str, list[Outcome]] = {}
        returned: dict[tuple[float, int], list[Outcome]] = {}
        for outcome in outcomes:
            outcome.held.finishing = True
            if outcome.kind is Kind.DONE:  # even with a lost renewal: a late dequeue may still finish it
                by_group.setdefault(group_of(outcome.task.queue), []).append(outcome)
            elif outcome.kind is Kind.RETURN and not outcome.held.lost:
                returned.setdefault((outcome.held.lease_secs, outcome.task.deliveries), []).append(outcome)
            else:
                self._settle_one(outcome)
        for batch in by_group.values():
            for start in range(0, len(batch), MAX_BATCH_ITEMS // 2):
                self._finish_batch(batch[start : start + MAX_BATCH_ITEMS // 2])
        for (lease_secs, deliveries), batch in returned.items():
            for start in range(0, len(batch), MAX_BATCH_ITEMS):
                self._return_batch(batch[start : start + MAX_BATCH_ITEMS], lease_secs, deliveries)

    # ------------------------------------------------------------------ done

    def _done_items(self, outcomes: list[Outcome]) -> tuple[list[Any], list[dict[str, Any]]]:
        dequeue: list[Any] = []
        enqueue: list[dict[str, Any]] = []
        for outcome in outcomes:
            dequeue.append(outcome.task)
            dequeue.extend(outcome.dequeue)
            result = result_task(outcome.task, outcome.payload, self.reply_prefix)
            if result is not None:
                enqueue.append(result)
            enqueue.extend(outcome.enqueue)
        return dequeue, enqueue

    def _finish_batch(self, outcomes: list[Outcome]) -> None:
        dequeue, enqueue = self._done_items(outcomes)
        try:
            self._update(dequeue=dequeue, enqueue=enqueue)
            self.done += len(outcomes)
            _call_settled(outcomes)
            return
        except errors.KittiwakeError as error:
            if len(outcomes) == 1:
                self._gone(outcomes[0], error)
                return
        for outcome in outcomes:  # one of them is no longer ours: finish the others alone
            dequeue, enqueue = self._done_items([outcome])
            try:
                self._update(dequeue=dequeue, enqueue=enqueue)
                self.done += 1
                _call_settled([outcome])
            except errors.KittiwakeError as error:
                self._gone(outcome, error)

    def _gone(self, outcome: Outcome, error: errors.KittiwakeError) -> None:
        self.dropped += 1
        log.warning("could not finish %s/%s: %s", outcome.task.queue, outcome.task.pid, error)

    def _update(self, **items: Any) -> None:
        """An update, repeated while its outcome is unknown. A refusal for a lost lease after an
        unknown outcome means the first one was applied — when the update holds one lease: in a
        batch the refusal may be one task's lease lost while nothing was applied, so it is raised
        and the batch's outcomes are settled one by one (`_finish_batch`)."""
        leases = sum(len(items.get(field) or ()) for field in ("dequeue", "renew", "release"))
        deadline = self.clock() + RETRY_FOR_SECS
        uncertain = False
        while True:
            try:
                self.client.update(**items)
                return
            except errors.Transient as error:
                if self.clock() > deadline or self._abandoned.is_set():
                    raise
                uncertain = uncertain or not isinstance(error, errors.BrokerUnreachable)
                if self._abandoned.wait(RETRY_PAUSE_SECS):
                    raise
            except errors.KittiwakeError as error:
                if uncertain and leases <= 1 and error.code in errors.LEASE_LOST_CODES:
                    return
                raise

    # ---------------------------------------------------------------- return

    def _return_batch(self, outcomes: list[Outcome], lease_secs: float, deliveries: int) -> None:
        """Tasks never started, given back: a clean note (an at-most-once task may run again),
        then a reject (no attempt used) — two requests for the whole batch."""
        tasks = [outcome.task for outcome in outcomes]
        try:
            renewed = self.client.renew(tasks, lease_secs, note=redeliver_note(deliveries, "returned"))
            still_ours = [task for task, result in zip(tasks, renewed) if result.ok]
            if still_ours:
                self.client.release(still_ours, "RETURNED", reject=True)
            self.dropped += len(tasks) - len(still_ours)
        except errors.KittiwakeError as error:
            for outcome in outcomes:
                self._gone(outcome, error)

    # ----------------------------------------------------------------- others

    def _settle_one(self, outcome: Outcome) -> None:
        task = outcome.task
        try:
            if outcome.kind is Kind.DROP or (outcome.held.lost and outcome.kind is not Kind.FAIL):
                self.dropped += 1
            elif outcome.kind is Kind.RETRY:
                self.client.renew(task, max(0.01, outcome.backoff_secs), note=outcome.reason)
                self.retried += 1
            elif outcome.kind is Kind.FAIL:
                self._fail(outcome)
                self.failed += 1
            else:
                raise AssertionError(outcome.kind)
        except errors.KittiwakeError as error:
            self._gone(outcome, error)

    def _fail(self, outcome: Outcome) -> None:
        task = outcome.task
        reason = outcome.reason or "ERROR"
        result = result_task(task, outcome.payload, self.reply_prefix)
        if broker_buries_on_release(task):
            self._update(release=[task], reason=reason, enqueue=[result] if result else [])
            return
        self.client.release(task, reason, bury=True)
        if result is not None:
            self.client.enqueue_many([result])


def _call_settled(outcomes: list[Outcome]) -> None:
    for outcome in outcomes:
        if outcome.settled is not None:
            try:
                outcome.settled()
            except Exception:  # a hook's bug must not stop the settler
                log.exception("after settling %s/%s", outcome.task.queue, outcome.task.pid)
