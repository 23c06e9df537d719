"""Looking at queues without changing them: peek, get, find by sender, queues
for a receiver (Paštas ch. 3), list_queues and stats (TaskMaster §3.5).

Functions that read the engine's queue states and its store and change
nothing but lazily swept leases (stats sweeps first, so its counts are exact
at `now`). Views stop at the reply data budget. Those that claim a queue first
(`engine.coherence`) run inside a group-commit pass; `scan_page`, `find_view`
and `queue_stats` claim nothing, for readers between passes (the broker's
HTTP views), and show what this broker committed.
"""

from __future__ import annotations

from itertools import islice
from typing import Any, Iterable, Iterator, Sequence

from kittiwake import errors
from kittiwake.engine.failures import dead_letters_of
from kittiwake.engine.head_cache import find
from kittiwake.engine.leases import sweep
from kittiwake.engine.queue_patterns import name_matcher
from kittiwake.engine.queue_state import QueueState
from kittiwake.engine.rates import DEQUEUE, ENQUEUE, LEASE, LEASE_SECS_SUM, RateWindow
from kittiwake.engine.coherence import claim
from kittiwake.engine.state import EngineState
from kittiwake.model import (
    DEAD_SUFFIX,
    LeaseSample,
    QueueInfo,
    QueueStats,
    Task,
    dead_queue_of,
    validate_count,
    validate_name,
    validate_pid,
    validate_queue,
)


def view(task: Task, now: float) -> dict[str, Any]:
    """A task as shown to people and clients by peek, get and find_by_sender."""
    return {
        "queue": task.queue,
        "pid": task.pid,
        "data": task.data,
        "state": task.state_at(now).value,
        "enqueued_at": task.enqueued_at,
        "sender": task.sender,
        "receiver": task.receiver,
        "headers": task.headers,
        "attempts": task.attempts,
        "deliveries": task.deliveries,
        "lease_owner": task.lease_owner,
        "lease_expires_at": task.lease_expires_at,
        "waiting_on": task.waiting_on,
        "children": task.children,
        "progress": task.progress,
        "note": task.note,
    }


def peek(state: EngineState, queue: str, n: int, from_pid: str | None, now: float) -> list[dict[str, Any]]:
    """Look at up to n tasks in pid order without leasing them (Paštas peek)."""
    limits = state.limits
    validate_queue(queue, limits)
    validate_count(n, "n", 1, limits.max_batch)
    if from_pid is not None:
        validate_pid(from_pid, limits, "from_pid", queue)
    if claim(state, queue) is None:
        return []
    return _views(state, state.store.scan(queue, from_pid, n), now)


def scan_page(
    state: EngineState, queue: str, n: int, from_pid: str | None, now: float
) -> tuple[list[dict[str, Any]], str | None]:
    """`peek` without its claim, for readers outside a group-commit pass (the HTTP views): up to
    n views from `from_pid` on, under the reply budget, and the pid the next page starts at
    (None: no more). Reads what this broker committed; locks nothing."""
    limits = state.limits
    validate_queue(queue, limits)
    validate_count(n, "n", 1, limits.max_batch)
    if from_pid is not None:
        validate_pid(from_pid, limits, "from_pid", queue)
    if queue not in state.queues:
        return [], None
    tasks = state.store.scan(queue, from_pid, n + 1)
    views = _views(state, tasks[:n], now)
    return views, tasks[len(views)].pid if len(views) < len(tasks) else None


def _views(state: EngineState, tasks: list[Task], now: float) -> list[dict[str, Any]]:
    """Views of tasks, cut short once their data passes the reply budget (at least one)."""
    budget = state.limits.max_reply_data_bytes
    views: list[dict[str, Any]] = []
    for task in tasks:
        if views and budget < len(task.data):
            break
        budget -= len(task.data)
        views.append(view(task, now))
    return views


def get(state: EngineState, queue: str, pid: str, now: float) -> dict[str, Any]:
    """The task at (queue, pid). In a dead-letter queue the original pid
    also finds its newest dead letter (dead letters live at `<pid>~<time>`)."""
    validate_queue(queue, state.limits)
    validate_pid(pid, state.limits, "pid", queue)
    return _get(state, queue, claim(state, queue), pid, now)


def find_view(state: EngineState, queue: str, pid: str, now: float) -> dict[str, Any]:
    """`get` without its claim, for readers outside a group-commit pass (the HTTP views)."""
    validate_queue(queue, state.limits)
    validate_pid(pid, state.limits, "pid", queue)
    return _get(state, queue, state.queues.get(queue), pid, now)


def _get(state: EngineState, queue: str, queue_state: QueueState | None, pid: str, now: float) -> dict[str, Any]:
    task = find(state, queue_state, pid) if queue_state is not None else None
    if task is None and queue_state is not None and queue.endswith(DEAD_SUFFIX):
        letters = dead_letters_of(state, queue, pid)
        task = letters[-1] if letters else None
    if task is None:
        raise errors.TaskNotFound(f"no task {pid!r} in {queue!r}")
    return view(task, now)


def find_by_sender(
    state: EngineState, sender: str, queue: str | None, limit: int, now: float, after: tuple[str, str] | None = None
) -> list[dict[str, Any]]:
    """Tasks of `sender` by queue then pid, in one queue or all; `after` (all queues only) is the
    (queue, pid) the search goes on after, for a caller that walks the sender's tasks in pages."""
    validate_name(sender, state.limits, "sender")
    if queue is not None:
        validate_queue(queue, state.limits)
        if after is not None:
            raise errors.BadRequest("after goes with a search of every queue, not of one")
    validate_count(limit, "limit", 1, state.limits.max_batch)
    return _views(state, state.store.find_by_sender(sender, queue, limit, after), now)


def queues_for_receiver(state: EngineState, receiver: str) -> list[str]:
    validate_name(receiver, state.limits, "receiver")
    return state.store.queues_for_receiver(receiver)


def _matching(state: EngineState, pattern: str | None) -> Iterable[QueueState]:
    if pattern is None:
        names: Iterable[str] = state.names
    else:
        matches = name_matcher(pattern)
        names = [name for name in state.names if matches(name)]
    queues = state.queues
    return (queues[name] for name in names)


def list_queues(
    state: EngineState, pattern: str | None, min_tasks: int, limit: int, start_after: str | None = None
) -> list[QueueInfo]:
    """Queues in name order holding at least max(1, min_tasks) tasks, whose name matches `pattern`
    (searched, not anchored) and sorts after `start_after` (None: from the first).

    A caller pages through every queue by passing the last name of one page as `start_after` of
    the next: the sorted names are entered at that name (O(log n)) and walked lazily, so a page
    costs the names it walks, not a pass from the first. `start_after` need not be a queue that
    exists; it is checked as a queue name (BadRequest otherwise)."""
    validate_count(min_tasks, "min_tasks", 0, 2**62)
    validate_count(limit, "limit", 1, 1_000_000)
    names: Iterator[str]
    if start_after is None:
        names = iter(state.names)
    else:
        validate_queue(start_after, state.limits, "start_after")
        names = state.names.irange(minimum=start_after, inclusive=(False, True))
    if pattern is not None:
        names = filter(name_matcher(pattern), names)
    floor = max(1, min_tasks)
    queues = state.queues
    rows: list[QueueInfo] = []
    for name in names:
        queue = queues[name]
        if queue.size >= floor:
            rows.append(QueueInfo(name, queue.size, len(queue.leased)))
            if len(rows) >= limit:
                break
    return rows


def stats(
    state: EngineState, queues: Sequence[str] | None, pattern: str | None, sample: int, now: float
) -> list[QueueStats]:
    """TaskMaster §3.5 statistics for named queues, or those matching a pattern."""
    validate_count(sample, "sample", 0, 1000)
    sweep(state, now)
    if queues is not None:
        if not isinstance(queues, list) or len(queues) > 10_000:
            raise errors.BadRequest("queues must be a list of at most 10000 names")
        for name in queues:
            validate_queue(name, state.limits)
        names = list(dict.fromkeys(queues))
    else:
        names = [queue.name for queue in _matching(state, pattern) if queue.size > 0]
    return [_stats_of(state, name, sample, now) for name in names]


def _stats_of(state: EngineState, name: str, sample: int, now: float) -> QueueStats:
    queue = claim(state, name)
    dead = claim(state, dead_queue_of(name))
    return queue_stats(name, queue, dead, sample, now)


def queue_stats(name: str, queue: QueueState | None, dead: QueueState | None, sample: int, now: float) -> QueueStats:
    """The statistics of one queue from its state and its dead-letter queue's (None: empty);
    reads memory only, changes nothing."""
    if queue is None:
        return QueueStats(name, 0, 0, 0, dead.size if dead else 0, 0, 0, 0, 0, 0, 0, None, None)
    rates = queue.rates or RateWindow()
    one = rates.totals(now, 60.0)
    five = rates.totals(now, 300.0)
    oldest = queue.oldest_enqueued_at()
    leased_sample = [
        LeaseSample(t.queue, t.pid, t.lease_owner, t.lease_peer, t.leased_at, t.lease_expires_at)
        for t in islice(queue.leased.values(), sample)
    ]
    return QueueStats(
        queue=name,
        size=queue.size,
        available=queue.size - len(queue.leased) - queue.blocked,
        leased=len(queue.leased),
        dead=dead.size if dead else 0,
        blocked=queue.blocked,
        enqueue_rate_1m=one[ENQUEUE] / 60.0,
        enqueue_rate_5m=five[ENQUEUE] / 300.0,
        lease_rate_1m=one[LEASE] / 60.0,
        lease_rate_5m=five[LEASE] / 300.0,
        dequeue_rate_1m=one[DEQUEUE] / 60.0,
        dequeue_rate_5m=five[DEQUEUE] / 300.0,
        avg_lease_secs=(five[LEASE_SECS_SUM] / five[DEQUEUE]) if five[DEQUEUE] else None,
        oldest_task_age_secs=(now - oldest) if oldest is not None else None,
        leased_sample=leased_sample,
    )
