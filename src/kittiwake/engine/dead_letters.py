"""Dead letters: every failure kept, found by the pid that failed, requeued or purged.

A mixin of `Engine`. A task that is dead-lettered (released at its last
attempt, buried, expired too often, cancelled, or failed through a parent)
becomes a *new* task of `<queue>.dead` at pid `<pid>~<death time>` (see
`Engine._bury`), with the reason in header `kittiwake-dead-reason` and the
original pid in `kittiwake-dead-pid`. So a pid that dies twice keeps both
failures, a pid's dead letters sit next to each other in the order they died,
and a lookup by the original pid is one range scan of the dead-letter queue.

* requeue moves a dead letter back to its queue under its original pid, with
  its data, sender, receiver, headers (less the two above) and max_attempts,
  and its attempts counted from zero. If a task with that pid exists again the
  requeue collapses, so the dead letter stays where it is (`TASK_EXISTS`):
  requeueing never destroys a failure record. A dead letter that a consumer
  holds on lease is left alone (`TASK_LEASED`).
* purge deletes dead letters (a held one too: its holder loses the lease).
* Both take a list of pids — a dead letter's own pid, or an original pid,
  meaning all its dead letters, oldest first — or walk the whole dead-letter
  queue a page at a time (`after_pid` is the cursor, `next_pid` the next one),
  so no single request does unbounded work on the broker's loop.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kittiwake import errors
from kittiwake.engine.mutations import DeleteTask, Mutation
from kittiwake.engine.queue_state import QueueState
from kittiwake.model import (
    DEAD_PID_HEADER,
    DEAD_REASON_HEADER,
    DEAD_SUFFIX,
    ItemOutcome,
    NewTask,
    Task,
    dead_letter_prefix,
    dead_queue_of,
    validate_count,
    validate_pid,
    validate_queue,
)

_SCAN_PAGE = 256
_AFTER = "\x00"  # appended to a pid: the smallest string that sorts after it (pids have no control characters)


@dataclass(slots=True)
class DeadLetterPage:
    """What a requeue or purge did to each dead letter, and where the next page starts (None: done)."""

    outcomes: list[ItemOutcome] = field(default_factory=list)
    next_pid: str | None = None


class DeadLetters:
    """Lookup, requeue and purge of dead letters."""

    def dead_letters_of(self, dead_queue: str, pid: str) -> list[Task]:
        """Every dead letter of the original `pid` in `dead_queue`, oldest first."""
        if dead_queue not in self._queues:
            return []
        prefix = dead_letter_prefix(pid)
        found: list[Task] = []
        from_pid = prefix
        while True:
            rows = self.store.scan(dead_queue, from_pid, _SCAN_PAGE)
            for task in rows:
                if not task.pid.startswith(prefix):
                    return found
                if (task.headers or {}).get(DEAD_PID_HEADER) == pid:
                    found.append(task)
            if len(rows) < _SCAN_PAGE:
                return found
            from_pid = rows[-1].pid + _AFTER

    def _dead_queue(self, queue: str) -> tuple[str, str]:
        """(original queue, dead-letter queue) from either name."""
        validate_queue(queue, self.limits)
        if queue.endswith(DEAD_SUFFIX):
            return queue[: -len(DEAD_SUFFIX)], queue
        return queue, dead_queue_of(queue)

    def _select(
        self, dead: str, pids: list[str] | None, after_pid: str | None, limit: int
    ) -> tuple[list[tuple[str, Task | None]], str | None]:
        """The dead letters a requeue or purge names: (asked-for pid, dead letter or None)."""
        if pids is not None:
            if not isinstance(pids, list) or len(pids) > self.limits.max_batch:
                raise errors.BadRequest(f"pids must be a list of at most {self.limits.max_batch} pids")
            for pid in pids:
                validate_pid(pid, self.limits, "pid", dead)
            chosen: list[tuple[str, Task | None]] = []
            for pid in dict.fromkeys(pids):
                exact = self.store.load_task(dead, pid) if dead in self._queues else None
                letters: list[Task | None] = [exact] if exact is not None else list(self.dead_letters_of(dead, pid))
                chosen.extend((pid, task) for task in letters or [None])
            return chosen, None
        validate_count(limit, "limit", 1, self.limits.max_batch)
        if after_pid is not None:
            validate_pid(after_pid, self.limits, "after_pid", dead)
        if dead not in self._queues:
            return [], None
        rows = self.store.scan(dead, after_pid + _AFTER if after_pid is not None else None, limit)
        next_pid = rows[-1].pid if len(rows) == limit else None
        return [(task.pid, task) for task in rows], next_pid

    def _drop_dead_letter(self, dead: QueueState, pid: str, mutations: list[Mutation]) -> None:
        if dead.leased.pop(pid, None) is None:
            removed = dead.remove_available(pid)
            if removed is not None:
                self.memory_bytes -= removed.size_bytes()
        dead.size -= 1
        mutations.append(DeleteTask(dead.name, pid))

    def requeue_dead(
        self, queue: str, pids: list[str] | None, now: float, *, after_pid: str | None = None, limit: int = 1000
    ) -> DeadLetterPage:
        """Move dead letters of `queue` back into it under their original pids."""
        original, dead_name = self._dead_queue(queue)
        chosen, next_pid = self._select(dead_name, pids, after_pid, limit)
        page = DeadLetterPage(next_pid=next_pid)
        mutations: list[Mutation] = []
        for asked, task in chosen:
            dead = self._queues.get(dead_name)
            if task is None or dead is None:
                page.outcomes.append(
                    ItemOutcome(dead_name, asked, False, errors.TaskNotFound.code, f"no dead letter {asked!r} in {dead_name!r}")
                )
                continue
            if task.pid in dead.leased:
                page.outcomes.append(
                    ItemOutcome(dead_name, task.pid, False, errors.TaskLeased.code, f"{dead_name}/{task.pid} is held by a lease")
                )
                continue
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
            back.validate(self.limits)
            outcome = self._enqueue_one(back, now, mutations)
            if outcome.collapsed:
                page.outcomes.append(
                    ItemOutcome(dead_name, task.pid, False, errors.TaskExists.code, f"{original}/{back.pid} exists")
                )
            else:
                self._drop_dead_letter(dead, task.pid, mutations)
                self._forget_if_empty(dead)
                page.outcomes.append(ItemOutcome(dead_name, task.pid, True))
            self._write(mutations)
        self._enforce_cache()
        return page

    def purge_dead(
        self, queue: str, pids: list[str] | None, now: float, *, after_pid: str | None = None, limit: int = 1000
    ) -> DeadLetterPage:
        """Delete dead letters of `queue` (`delete_queue` on `<queue>.dead` drops them all at once)."""
        _, dead_name = self._dead_queue(queue)
        chosen, next_pid = self._select(dead_name, pids, after_pid, limit)
        page = DeadLetterPage(next_pid=next_pid)
        mutations: list[Mutation] = []
        for asked, task in chosen:
            dead = self._queues.get(dead_name)
            if task is None or dead is None:
                page.outcomes.append(
                    ItemOutcome(dead_name, asked, False, errors.TaskNotFound.code, f"no dead letter {asked!r} in {dead_name!r}")
                )
                continue
            self._drop_dead_letter(dead, task.pid, mutations)
            self._forget_if_empty(dead)
            page.outcomes.append(ItemOutcome(dead_name, task.pid, True))
            self._write(mutations)
        self._enforce_cache()
        return page
