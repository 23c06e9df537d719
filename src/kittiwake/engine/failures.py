"""Every way into the dead state: failed attempts, burial, cancel, and failing descendants.

A task that fails for good is not deleted: it becomes a *new* task of its
queue's dead-letter queue `<queue>.dead` at pid `<pid>~<death time>` (a FIFO
pid of the broker's clock), with the reason in header `kittiwake-dead-reason`
and its pid in `kittiwake-dead-pid` (`bury`). So a pid that dies twice keeps
both failures, a pid's dead letters sit next to each other in the order they
died, and `dead_letters_of` finds them with one range scan. A failed attempt
in a dead-letter queue never buries further (a cancel there does, into
`<queue>.dead.dead`).

The ways in (the →dead edges of `transitions.TRANSITIONS`):

* release or lease expiry counts a failed attempt (`fail_attempt`); at
  `max_attempts` (the task's own or the broker default) the task is buried,
  and at once with `bury` (at-most-once delivery);
* `cancel` withdraws a task whatever its state;
* a parent that is buried or cancelled fails every task waiting on it, and
  theirs in turn (`fail_descendants`, reason `PARENT_FAILED q/pid`);
* a task enqueued after a parent that already failed is born dead
  (`enqueue`, through `dependencies.link_parents`).

Requeue and purge of dead letters are in `dead_letters`.
"""

from __future__ import annotations

from typing import Sequence

from kittiwake.constants import CANCELLED_REASON, JOINS_QUEUE, PARENT_FAILED_REASON
from kittiwake import errors
from kittiwake.engine import join_index
from kittiwake.engine.head_cache import add_available, enforce_cache, find
from kittiwake.engine.ids import next_fifo_pid
from kittiwake.engine.mutations import DeleteEdges, DeleteTask, Mutation, PutTask, SetLease
from kittiwake.engine.queue_state import QueueState
from kittiwake.engine.rates import ENQUEUE
from kittiwake.engine.coherence import claim, claim_open
from kittiwake.engine.state import EngineState, flush, forget_if_empty, rates_of
from kittiwake.engine.tally import DEAD_LETTERED
from kittiwake.model import (
    DEAD_PID_HEADER,
    DEAD_REASON_HEADER,
    DEAD_SUFFIX,
    ItemOutcome,
    Task,
    dead_letter_pid,
    dead_letter_prefix,
    dead_queue_of,
    validate_keys,
)

SCAN_PAGE = 256
AFTER = "\x00"  # appended to a pid: the smallest string that sorts after it (pids have no control characters)


def validate_reason(state: EngineState, reason: object) -> str | None:
    """A reason given with a release, update or cancel: it becomes a header of the dead letter."""
    if reason is None:
        return None
    if not isinstance(reason, str):
        raise errors.BadRequest("reason must be a string")
    try:
        size = len(reason.encode("utf-8"))
    except UnicodeEncodeError:
        # a lone surrogate would pass here and fail in the store at commit
        raise errors.BadRequest("reason is not valid UTF-8") from None
    if size > state.limits.max_header_value_bytes:
        raise errors.BadRequest(f"reason is over {state.limits.max_header_value_bytes} bytes")
    return reason


def fail_attempt(
    state: EngineState,
    queue: QueueState,
    task: Task,
    reason: str,
    now: float,
    mutations: list[Mutation],
    bury_now: bool = False,
) -> bool:
    """Count a failed attempt on a task just taken out of the leased set;
    it goes back to available, or to the dead-letter queue (at max_attempts,
    or at once with `bury_now`), failing its descendants. True if dead."""
    task.attempts += 1
    task.lease_owner = task.lease_peer = None
    task.leased_at = task.lease_expires_at = None
    limit = task.max_attempts or state.limits.default_max_attempts
    if (task.attempts >= limit or bury_now) and not queue.name.endswith(DEAD_SUFFIX):
        queue.size -= 1
        mutations.append(DeleteTask(queue.name, task.pid))
        bury(state, task, reason, now, mutations)
        if task.children:
            fail_descendants(state, task, now, mutations)
        forget_if_empty(state, queue)
        return True
    mutations.append(SetLease.of(task))
    add_available(state, queue, task)
    return False


def bury(state: EngineState, task: Task, reason: str, now: float, mutations: list[Mutation]) -> None:
    """Put a task that left its queue into the dead-letter queue as a new dead
    letter: at `<pid>~<death time>`, so a pid that dies twice keeps both failures."""
    dead = claim_open(state, dead_queue_of(task.queue))
    headers = dict(task.headers or {})
    headers[DEAD_REASON_HEADER] = reason[: state.limits.max_header_value_bytes]
    headers[DEAD_PID_HEADER] = task.pid
    buried = Task(
        queue=dead.name,
        pid=dead_letter_pid(task.pid, next_fifo_pid(state, now, mutations)),
        data=task.data,
        enqueued_at=now,
        sender=task.sender,
        receiver=task.receiver,
        headers=headers,
        max_attempts=task.max_attempts,
        attempts=task.attempts,
        deliveries=task.deliveries,
    )
    dead.size += 1
    dead.note_pid(buried.pid)
    add_available(state, dead, buried)
    rates_of(dead).add(ENQUEUE, now)
    state.tally.count(task.queue, DEAD_LETTERED)
    mutations.append(PutTask(buried))


def dead_letters_of(state: EngineState, dead_queue: str, pid: str) -> list[Task]:
    """Every dead letter of the original `pid` in `dead_queue`, oldest first."""
    if dead_queue not in state.queues:
        return []
    prefix = dead_letter_prefix(pid)
    found: list[Task] = []
    from_pid = prefix
    while True:
        rows = state.store.scan(dead_queue, from_pid, SCAN_PAGE)
        for task in rows:
            if not task.pid.startswith(prefix):
                return found
            if (task.headers or {}).get(DEAD_PID_HEADER) == pid:
                found.append(task)
        if len(rows) < SCAN_PAGE:
            return found
        from_pid = rows[-1].pid + AFTER


def fail_descendants(state: EngineState, parent: Task, now: float, mutations: list[Mutation]) -> int:
    """A parent failed or was cancelled: every task waiting on it, and theirs
    in turn, moves to its dead-letter queue with the reason. Returns how many."""
    failed = 0
    reason = f"{PARENT_FAILED_REASON} {parent.queue}/{parent.pid}"
    stack = [(parent.queue, parent.pid)]
    while stack:
        parent_key = stack.pop()
        flush(state, mutations)
        for child_queue, child_pid in state.store.children_of(*parent_key):
            queue = claim(state, child_queue)
            child = state.store.load_task(child_queue, child_pid) if queue is not None else None
            if child is None or child.waiting_on <= 0:
                continue  # already failed through another parent
            assert queue is not None
            queue.blocked -= 1
            queue.size -= 1
            mutations.append(DeleteTask(child_queue, child_pid))
            child.waiting_on = 0
            bury(state, child, reason, now, mutations)
            forget_if_empty(state, queue)
            failed += 1
            if child.children:
                stack.append((child_queue, child_pid))
        mutations.append(DeleteEdges(*parent_key))
    return failed


def cancel(state: EngineState, keys: Sequence[tuple[str, str]], reason: str | None, now: float) -> list[ItemOutcome]:
    """Withdraw tasks, whatever their state, into their dead-letter queues
    with reason CANCELLED (or the one given), failing their descendants. A
    worker holding one of them loses its lease: its renew, release or
    dequeue is refused with TASK_NOT_FOUND. Per-item outcomes."""
    keys = validate_keys(list(keys), state.limits, "tasks")
    reason = validate_reason(state, reason) or CANCELLED_REASON
    mutations: list[Mutation] = []
    outcomes: list[ItemOutcome] = []
    for name, pid in keys:
        if name == JOINS_QUEUE:
            outcomes.append(ItemOutcome(name, pid, False, errors.BadRequest.code, "drop_join withdraws a join"))
            continue
        queue = claim(state, name)
        task = find(state, queue, pid) if queue is not None else None
        if task is None or queue is None:
            outcomes.append(ItemOutcome(name, pid, False, errors.TaskNotFound.code, f"no task {pid!r} in {name!r}"))
            continue
        if queue.leased.pop(pid, None) is None:
            if task.waiting_on > 0:
                queue.blocked -= 1
            elif queue.remove_available(pid) is not None:
                state.memory_bytes -= task.size_bytes()
        queue.size -= 1
        mutations.append(DeleteTask(name, pid))
        if name in state.join_ports:
            join_index.token_left(state, name, pid)
        task.waiting_on = 0
        bury(state, task, reason, now, mutations)
        if task.children:
            fail_descendants(state, task, now, mutations)
        forget_if_empty(state, queue)
        outcomes.append(ItemOutcome(name, pid, True, dead=True))
        flush(state, mutations)
    enforce_cache(state)
    return outcomes
