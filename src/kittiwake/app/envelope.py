"""How an app task travels through the broker: the queues it uses and the headers it carries.

What the submitter and the worker must agree on; the names themselves are
declared in `kittiwake.constants`:

* a task defined with ``queue="emails"`` is enqueued into ``emails`` with
  pid = its task id (a new id from `new_ids`, or the idempotency key given
  to ``submit(key=...)``), so a second submission with the same key
  collapses into the first (the broker dedupes by pid for as long as the
  task exists); ids that sort by submission time keep a queue in submission
  order and let the store append rows where the last ones went (random ids
  scattered each lease and dequeue over the table's pages: a backlog of
  them drained at less than half the rate);
* a delayed task goes to ``emails.delayed`` (same consistency group) with
  pid = ``pid_at(due) + "-" + task id``: workers lease that queue with
  ``max_pid = pid_at(now)``, so a delayed task is leased only once due and
  runs from there (no mover process);
* results go to the submitter's reply queue ``<group>#_replies.<app id>``
  (``_replies.<app id>`` in the default group), always in the group of the
  task's queue so that the worker finishes a task with one atomic update —
  dequeue the task, enqueue its result (CloudKon §3.2.1 response queue) —
  with pid = the task's submission id, so that each run of a task id (a key
  submitted again after its first run finished) has a result of its own;
* a periodic run's marker goes to ``<queue>.ticks-done`` once it finished,
  so a scheduler that fires a tick late collapses (``unless``) instead of
  running it twice;
* the joins of a gang task (``needs=N``) wait in ``<queue>.gang``
  (`kittiwake.worker.gang`).

Headers (all strings):

* ``kittiwake-task-id``: the task's identity, the same on every delivery
  (and on its result, so a submitter can tell whose result it is);
* ``kittiwake-submission``: this submission's identity (from `new_ids`), new at
  every submit, echoed as the pid of the result: it tells two runs of the
  same key apart;
* ``kittiwake-reply-to``: the reply queue; absent when nobody wants the result
  (who may name which queue: see "Reply queues are the submitter's" below);
* ``kittiwake-submitted-at``: epoch seconds when submitted (for latency);
* ``traceparent`` and ``tracestate``: the W3C Trace Context of the span that
  submitted the task, only when tracing is on (`tracing`);
* the broker adds ``kittiwake-dead-reason`` when it dead-letters a task.

Reply queues are the submitter's. A worker posts a task's result with the
worker's rights, into the queue the task's ``kittiwake-reply-to`` names — a
name its submitter chose. Unchecked, that makes the worker a confused deputy:
a user who may only enqueue into the app's task queue (and a producer may
`get` a task it can name, headers included, so it can read another
submitter's reply queue and pending submission id off a keyed task) could
have the worker write the result of a task it chose, under a pid it chose,
into any queue the worker may write: another submitter's reply queue (a
forged result, taken by that submitter's handle as its own), the worker's
own queues, another user's queues, the worker registry. Two rules close it:

* the broker accepts a task carrying ``kittiwake-reply-to`` only from a user
  who may produce into the queue it names (`broker.access`): the worker then
  writes only where the submitter could have written itself, so a user whose
  rights do not cover another submitter's reply queue cannot forge its
  results. Give each user that submits its own reply prefix and rights on it
  (``reply_prefix="_replies.alice."`` with ``_replies.alice.*``); users who
  may all produce into ``_replies.*`` can forge each other's results, worker
  or not;
* a worker posts a result only into a reply queue of its own app's shape in
  the task's consistency group, ``<group>#<reply prefix><app id>``
  (`is_reply_queue_for`: the worker's app's ``reply_prefix`` followed by
  anything without ``#``, so a submitter may extend the prefix as above),
  whatever the broker let through (a broker without an auth file, a user
  who may write there anyway): results never land in task queues, registries
  or gang mailboxes. A task asking for its result anywhere else is not run:
  the worker dead-letters it with reason ``REPLY_TO_REFUSED`` (its handle
  reads that reason from the dead-letter queue) and logs a warning.

The other names a task carries are held to its own queues likewise: a
periodic run's marker goes to its queue's ``.ticks-done`` only for a tick
already due (`worker.loop`), and a gang join runs only from a ``.gang``
queue and posts only into that queue's own mailboxes (`worker.gang`).

Notes written with `renew(note=...)` are how a worker leaves a word for the
next worker: ``[redeliver N] ...`` says delivery N ended cleanly without
leaving the task half done (it failed and waits for a retry, or was handed
back unstarted at shutdown), so delivery N + 1 of an at-most-once task may
run. Any other redelivery of an at-most-once task means a worker was lost.
"""

from __future__ import annotations

import os
import re
import threading
from datetime import datetime, timezone
from typing import Callable

from kittiwake.constants import (
    DELAYED_SUFFIX,
    GANG_SUFFIX,
    GROUP_SEPARATOR,
    REPLIES_PREFIX,
    SUBMISSION_HEADER,
    TASK_ID_HEADER,
    TICKS_DONE_SUFFIX,
)
from kittiwake.model import group_of, pid_at

REDELIVER_NOTE = re.compile(r"^\[redeliver (\d+)\] ?")


_ids_lock = threading.Lock()
_last_micros = 0  # the time part of the last id this process drew


def new_ids(count: int, epoch_secs: float, random_bytes: Callable[[int], bytes] = os.urandom) -> list[str]:
    """`count` fresh task or submission ids, each sorting after every id this process drew
    before: 14 hex digits of microseconds (`epoch_secs`, kept strictly increasing in this
    process, so that a bundle sorts in its submission order), then 64 random bits from one
    read of `random_bytes` for the lot. 30 characters: never a broker's FIFO pid (17 digits)."""
    global _last_micros
    with _ids_lock:
        first = max(int(epoch_secs * 1_000_000), _last_micros + 1, 0)
        _last_micros = first + count - 1
    pool = random_bytes(8 * count).hex()
    return [f"{first + index:014x}{pool[16 * index : 16 * index + 16]}" for index in range(count)]


def delayed_queue_of(queue: str) -> str:
    return queue + DELAYED_SUFFIX


def ticks_done_queue_of(queue: str) -> str:
    return queue + TICKS_DONE_SUFFIX


def gang_queue_of(queue: str) -> str:
    """Where the join tasks of gang tasks defined on `queue` wait (`worker.gang`)."""
    return queue + GANG_SUFFIX


def undelayed_queue_of(queue: str) -> str:
    """`<queue>.delayed` → `<queue>` (the inverse of `delayed_queue_of`); other names unchanged."""
    return queue.removesuffix(DELAYED_SUFFIX)


def reply_queue_for(queue: str, app_id: str, prefix: str = REPLIES_PREFIX) -> str:
    """The reply queue of app `app_id` in the consistency group of `queue` (`prefix`: see `App`)."""
    group = group_of(queue)
    return f"{group}{GROUP_SEPARATOR}{prefix}{app_id}" if group else f"{prefix}{app_id}"


def is_reply_queue_for(reply_to: str, queue: str, prefix: str = REPLIES_PREFIX) -> bool:
    """Whether `reply_to` is `reply_queue_for(queue, app_id, prefix)` for some app id (one or more
    characters, no `#`): the only queues a worker posts results of `queue`'s tasks into (see the
    module docstring)."""
    head = reply_queue_for(queue, "", prefix)
    app_id = reply_to[len(head) :]
    return reply_to.startswith(head) and app_id != "" and GROUP_SEPARATOR not in app_id


def result_pid(headers: dict[str, str], pid: str) -> str:
    """The pid of a task's result in its reply queue: its submission id (its task id, or its
    own pid, for a task submitted without one)."""
    return headers.get(SUBMISSION_HEADER) or headers.get(TASK_ID_HEADER) or pid


def delayed_pid(due_epoch_secs: float, task_id: str) -> str:
    """Sorts by due time, then by task id; `max_pid=pid_at(now)` leases exactly the due ones."""
    return f"{pid_at(due_epoch_secs)}-{task_id}"


def redeliver_note(delivery: int, message: str = "") -> str:
    return f"[redeliver {delivery}] {message}".rstrip()


def redelivery_allowed(note: str | None, deliveries: int) -> bool:
    """Whether delivery `deliveries` follows a delivery that ended cleanly (see the module docstring)."""
    if not note:
        return False
    match = REDELIVER_NOTE.match(note)
    return match is not None and int(match.group(1)) == deliveries - 1


def public_note(note: str | None) -> str | None:
    """A worker's note without the redelivery marker, for people."""
    if note is None:
        return None
    return REDELIVER_NOTE.sub("", note, count=1)


def tick_iso(tick: datetime) -> str:
    """A tick time as it appears in pids: UTC, seconds precision, sortable as text."""
    return tick.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def tick_epoch_secs(iso: str) -> float | None:
    """The epoch seconds of a tick time exactly as `tick_iso` writes it; None for any other text."""
    try:
        tick = datetime.strptime(iso, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)
    except ValueError:
        return None
    return tick.timestamp() if tick_iso(tick) == iso else None


def tick_pid(name: str, tick: datetime) -> str:
    """The pid of one periodic run in its task queue: `<name>@<tick iso>`."""
    return f"{name}@{tick_iso(tick)}"


def tick_marker_pid(name: str, tick: datetime) -> str:
    """The pid of a finished tick's marker: time first, so that every marker
    older than a cut-off is one lease with `max_pid` (pruning)."""
    return f"{tick_iso(tick)}@{name}"


def marker_pid_of_tick_pid(pid: str) -> str:
    """`<name>@<iso>` → `<iso>@<name>`."""
    name, _, iso = pid.rpartition("@")
    return f"{iso}@{name}"
