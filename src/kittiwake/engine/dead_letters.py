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
  meaning all its dead letters — or walk the whole dead-letter queue. Either
  way one request reaches the dead letters in pid order after its cursor
  `after_pid`, each once however many of the pids name it, and reads at most
  `limit` rows; when it stops short, `next_pid` is the cursor of the next
  (`dead_letter_walk`). So no single request does unbounded work on the
  broker's loop, however many dead letters one pid has.
* Every dead letter a request reaches is checked before any moves. One that
  cannot go back as stored (its original-pid header is not a pid, its data or
  headers are over the limits — limits lowered since it died, say) stays
  where it is with the outcome BAD_DEAD_LETTER, naming why; the others go
  back. Like TASK_EXISTS, TASK_LEASED and TASK_NOT_FOUND, that outcome says
  what stayed, not that the request failed, so one such letter never holds
  up the pages after it (`kittiwake dead requeue --all`, a flow's retry).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from kittiwake import errors
from kittiwake.engine.dead_letter_walk import Reached, select_named, select_page
from kittiwake.engine.enqueue import enqueue_one
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

Act = Callable[[QueueState, Task, list[Mutation]], ItemOutcome]


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


def _select(state: EngineState, dead: str, pids: list[str] | None, after_pid: str | None, limit: int) -> Reached:
    """The dead letters a requeue or purge reaches (`dead_letter_walk`), its arguments checked."""
    limits = state.limits
    validate_count(limit, "limit", 1, limits.max_batch)
    if after_pid is not None:
        validate_pid(after_pid, limits, "after_pid", dead)
    if pids is None:
        return select_page(state, dead, after_pid, limit)
    if not isinstance(pids, list) or len(pids) > limits.max_batch:
        raise errors.BadRequest(f"pids must be a list of at most {limits.max_batch} pids")
    for pid in pids:
        validate_pid(pid, limits, "pid", dead)
    return select_named(state, dead, pids, after_pid, limit)


def _drop_dead_letter(state: EngineState, dead: QueueState, pid: str, mutations: list[Mutation]) -> None:
    if dead.leased.pop(pid, None) is None:
        removed = dead.remove_available(pid)
        if removed is not None:
            state.memory_bytes -= removed.size_bytes()
    dead.size -= 1
    mutations.append(DeleteTask(dead.name, pid))


def _each_dead_letter(state: EngineState, dead_name: str, reached: Reached, act: Act) -> DeadLetterPage:
    """Run `act` on each dead letter reached, one outcome each, handing each one's writes to the
    store before the next."""
    page = DeadLetterPage(next_pid=reached.next_pid)
    mutations: list[Mutation] = []
    for asked, task in reached.chosen:
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


def _requeued(state: EngineState, original: str, dead_name: str, task: Task) -> NewTask | errors.BadDeadLetter:
    """The task a dead letter goes back as; BAD_DEAD_LETTER (returned) if it cannot as it is stored."""
    headers = {k: v for k, v in (task.headers or {}).items() if k not in (DEAD_REASON_HEADER, DEAD_PID_HEADER)}
    back = NewTask(
        queue=original,
        data=task.data,
        sender=task.sender,
        receiver=task.receiver,
        headers=headers or None,
        max_attempts=task.max_attempts,
    )
    pid = (task.headers or {}).get(DEAD_PID_HEADER, task.pid)
    try:
        back.validate(state.limits)
        # a dead letter of `q.dead` goes back there under its own dead-letter pid, longer than others
        back.pid = validate_pid(pid, state.limits, DEAD_PID_HEADER, original)
    except errors.BadRequest as exc:
        return errors.BadDeadLetter(
            f"dead letter {dead_name}/{task.pid} cannot go back to {original!r} as stored ({exc.message}): "
            "it stays; purge it, or enqueue what it holds yourself"
        )
    return back


def requeue_dead(
    state: EngineState,
    queue: str,
    pids: list[str] | None,
    now: float,
    *,
    after_pid: str | None = None,
    limit: int = 1000,
) -> DeadLetterPage:
    """Move dead letters of `queue` back into it under their original pids: all the request reaches,
    checked first; one that cannot go back as stored stays (outcome BAD_DEAD_LETTER)."""
    original, dead_name = _dead_queue(state, queue)
    reached = _select(state, dead_name, pids, after_pid, limit)
    backs = {task.pid: _requeued(state, original, dead_name, task) for _, task in reached.chosen if task is not None}

    def requeue(dead: QueueState, task: Task, mutations: list[Mutation]) -> ItemOutcome:
        if task.pid in dead.leased:
            return ItemOutcome(dead_name, task.pid, False, errors.TaskLeased.code, f"{dead_name}/{task.pid} is held by a lease")
        back = backs[task.pid]
        if isinstance(back, errors.BadDeadLetter):
            return ItemOutcome(dead_name, task.pid, False, back.code, back.message)
        if enqueue_one(state, back, now, mutations).collapsed:
            return ItemOutcome(dead_name, task.pid, False, errors.TaskExists.code, f"{original}/{back.pid} exists")
        _drop_dead_letter(state, dead, task.pid, mutations)
        forget_if_empty(state, dead)
        return ItemOutcome(dead_name, task.pid, True)

    return _each_dead_letter(state, dead_name, reached, requeue)


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
    reached = _select(state, dead_name, pids, after_pid, limit)

    def purge(dead: QueueState, task: Task, mutations: list[Mutation]) -> ItemOutcome:
        _drop_dead_letter(state, dead, task.pid, mutations)
        forget_if_empty(state, dead)
        return ItemOutcome(dead_name, task.pid, True)

    return _each_dead_letter(state, dead_name, reached, purge)
