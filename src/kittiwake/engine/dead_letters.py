"""Dead letters: every failure kept, requeued or purged.

A task that failed for good is a *new* task of `<queue>.dead` at pid
`<pid>~<death time>`, with the reason in header `kittiwake-dead-reason` and
the original pid in `kittiwake-dead-pid` (made by `failures.bury`, found by
`failures.dead_letters_of`). So a pid that dies twice keeps both failures,
a pid's dead letters sit next to each other in the order they died, and a
lookup by the original pid is one range scan of the dead-letter queue.

* requeue moves a dead letter back to its queue under its original pid, with
  its data, sender, receiver, headers (less the two above) and max_attempts,
  and its attempts counted from zero. If a task with that pid exists again the
  requeue collapses, so the dead letter stays where it is (`TASK_EXISTS`):
  requeueing never destroys a failure record. A dead letter that a consumer
  holds on lease is left alone (`TASK_LEASED`).
* purge deletes dead letters (a held one too: its holder loses the lease).
* Both take a list of pids — a dead letter's own pid, or an original pid,
  meaning all its dead letters, oldest first; each dead letter is acted on
  once however many of the pids name it — or walk the whole dead-letter
  queue a page at a time (`after_pid` is the cursor, `next_pid` the next one),
  so no single request does unbounded work on the broker's loop.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from kittiwake import errors
from kittiwake.engine.enqueue import enqueue_one
from kittiwake.engine.failures import AFTER, dead_letters_of
from kittiwake.engine.head_cache import enforce_cache
from kittiwake.engine.mutations import DeleteTask, Mutation
from kittiwake.engine.queue_state import QueueState
from kittiwake.engine.coherence import claim
from kittiwake.engine.state import EngineState, flush, forget_if_empty
from kittiwake.model import (
    DEAD_PID_HEADER,
    DEAD_REASON_HEADER,
    DEAD_SUFFIX,
    ItemOutcome,
    NewTask,
    Task,
    dead_queue_of,
    validate_count,
    validate_pid,
    validate_queue,
)


@dataclass(slots=True)
class DeadLetterPage:
    """What a requeue or purge did to each dead letter, and where the next page starts (None: done)."""

    outcomes: list[ItemOutcome] = field(default_factory=list)
    next_pid: str | None = None


def _dead_queue(state: EngineState, queue: str) -> tuple[str, str]:
    """(original queue, dead-letter queue) from either name."""
    validate_queue(queue, state.limits)
    if queue.endswith(DEAD_SUFFIX):
        return queue[: -len(DEAD_SUFFIX)], queue
    return queue, dead_queue_of(queue)


def _select(
    state: EngineState, dead: str, pids: list[str] | None, after_pid: str | None, limit: int
) -> tuple[list[tuple[str, Task | None]], str | None]:
    """The dead letters a requeue or purge names: (asked-for pid, dead letter or None). Each
    dead letter once, though its own pid and its original pid may both name it."""
    limits = state.limits
    if pids is not None:
        if not isinstance(pids, list) or len(pids) > limits.max_batch:
            raise errors.BadRequest(f"pids must be a list of at most {limits.max_batch} pids")
        for pid in pids:
            validate_pid(pid, limits, "pid", dead)
        chosen: list[tuple[str, Task | None]] = []
        seen: set[str] = set()
        for pid in dict.fromkeys(pids):
            exact = state.store.load_task(dead, pid) if dead in state.queues else None
            letters = [exact] if exact is not None else dead_letters_of(state, dead, pid)
            if not letters:
                chosen.append((pid, None))
            for task in letters:
                if task.pid not in seen:
                    seen.add(task.pid)
                    chosen.append((pid, task))
        return chosen, None
    validate_count(limit, "limit", 1, limits.max_batch)
    if after_pid is not None:
        validate_pid(after_pid, limits, "after_pid", dead)
    if dead not in state.queues:
        return [], None
    rows = state.store.scan(dead, after_pid + AFTER if after_pid is not None else None, limit)
    next_pid = rows[-1].pid if len(rows) == limit else None
    return [(task.pid, task) for task in rows], next_pid


def _drop_dead_letter(state: EngineState, dead: QueueState, pid: str, mutations: list[Mutation]) -> None:
    if dead.leased.pop(pid, None) is None:
        removed = dead.remove_available(pid)
        if removed is not None:
            state.memory_bytes -= removed.size_bytes()
    dead.size -= 1
    mutations.append(DeleteTask(dead.name, pid))


Act = Callable[[QueueState, Task, list[Mutation]], ItemOutcome]


def _each_dead_letter(
    state: EngineState, dead_name: str, pids: list[str] | None, after_pid: str | None, limit: int, act: Act
) -> DeadLetterPage:
    """Run `act` on each dead letter the request names, one outcome each, handing each one's
    writes to the store before the next."""
    chosen, next_pid = _select(state, dead_name, pids, after_pid, limit)
    page = DeadLetterPage(next_pid=next_pid)
    mutations: list[Mutation] = []
    for asked, task in chosen:
        dead = claim(state, dead_name)
        if task is None or dead is None:
            page.outcomes.append(
                ItemOutcome(dead_name, asked, False, errors.TaskNotFound.code, f"no dead letter {asked!r} in {dead_name!r}")
            )
            continue
        page.outcomes.append(act(dead, task, mutations))
        flush(state, mutations)
    enforce_cache(state)
    return page


def requeue_dead(
    state: EngineState,
    queue: str,
    pids: list[str] | None,
    now: float,
    *,
    after_pid: str | None = None,
    limit: int = 1000,
) -> DeadLetterPage:
    """Move dead letters of `queue` back into it under their original pids."""
    original, dead_name = _dead_queue(state, queue)

    def requeue(dead: QueueState, task: Task, mutations: list[Mutation]) -> ItemOutcome:
        if task.pid in dead.leased:
            return ItemOutcome(dead_name, task.pid, False, errors.TaskLeased.code, f"{dead_name}/{task.pid} is held by a lease")
        headers = {k: v for k, v in (task.headers or {}).items() if k not in (DEAD_REASON_HEADER, DEAD_PID_HEADER)}
        back = NewTask(
            queue=original,
            data=task.data,
            pid=(task.headers or {}).get(DEAD_PID_HEADER, task.pid),
            sender=task.sender,
            receiver=task.receiver,
            headers=headers or None,
            max_attempts=task.max_attempts,
        )
        back.validate(state.limits)
        if enqueue_one(state, back, now, mutations).collapsed:
            return ItemOutcome(dead_name, task.pid, False, errors.TaskExists.code, f"{original}/{back.pid} exists")
        _drop_dead_letter(state, dead, task.pid, mutations)
        forget_if_empty(state, dead)
        return ItemOutcome(dead_name, task.pid, True)

    return _each_dead_letter(state, dead_name, pids, after_pid, limit, requeue)


def purge_dead(
    state: EngineState,
    queue: str,
    pids: list[str] | None,
    now: float,
    *,
    after_pid: str | None = None,
    limit: int = 1000,
) -> DeadLetterPage:
    """Delete dead letters of `queue` (`delete_queue` on `<queue>.dead` drops them all at once)."""
    _, dead_name = _dead_queue(state, queue)

    def purge(dead: QueueState, task: Task, mutations: list[Mutation]) -> ItemOutcome:
        _drop_dead_letter(state, dead, task.pid, mutations)
        forget_if_empty(state, dead)
        return ItemOutcome(dead_name, task.pid, True)

    return _each_dead_letter(state, dead_name, pids, after_pid, limit, purge)
