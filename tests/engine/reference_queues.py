"""A tiny reference model of Kittiwake's queues, and the checker that holds an engine to it.

The model is the engine's specification in its plainest form: a dict of queues, each a dict
pid → task, with no head cache, no store, no heap and no generations. It keeps the engine's
laziness exactly (TaskMaster §5.6): a lease that ran out stays held until a sweep (which the engine
runs at every lease, stats and maintain call) counts its failed attempt, and may be dequeued late
until then or until somebody leases the task again.

A released lease fences nothing: release clears the task's lease id, so only a lease that ran
out may still dequeue late. Every dead letter is kept as a new task of the dead-letter queue at
`<pid>~<death time>`; the death time comes from the engine's clock, so the model learns each dead
letter's pid from the store right after the engine made it (as tests learn FIFO pids from enqueue
outcomes) and checks its shape: the original pid, `~`, and 17 digits larger than any before.

Dependencies are kept as the engine keeps them: a count of unfinished parents per task, a count
of children linked per parent, and parent → child edges by task key, read when the parent
finishes (each child waiting has one parent fewer) or fails (each child waiting dies, and theirs).
Deleting a queue finishes its tasks for the tasks waiting on them and drops their edges (a parent
that no longer exists counts as finished). Should an edge of an earlier task at a key still be
there when a new task at that key finishes, whether the engine reads it depends on a count of
children it holds in memory, which a model cannot see, so that case — no edge of the task's own,
an earlier task's left — is learned from the store (are the edges gone?).

Cancel, requeue and purge of dead letters follow `failures` and `dead_letters`; every dead letter
records the pid it came from.

`check_engine` compares an engine and its store with the model after every step of the
model-based and simulation tests: sizes, leases, the rows in the store, and the head cache's
invariant (TaskMaster §5.4: memory holds every available task up to the horizon, and no more than
a bounded number of them).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence

from kittiwake.engine import DEAD_REASON_HEADER, Engine
from kittiwake.model import DEAD_PID_HEADER, DEAD_SUFFIX, FIFO_PID_DIGITS, Limits, dead_letter_prefix, group_of

DEFAULT_MAX_ATTEMPTS = Limits().default_max_attempts
REFILLS_PER_LEASE = 8  # head_cache.ensure_head: at most this many refills in one lease call

NOT_FOUND = "TASK_NOT_FOUND"
NOT_LEASED = "TASK_NOT_LEASED"
EXPIRED = "LEASE_EXPIRED"
EXISTS = "TASK_EXISTS"
LEASED = "TASK_LEASED"
BAD_REQUEST = "BAD_REQUEST"
CROSS_GROUP = "CROSS_GROUP_UPDATE"


@dataclass
class ModelTask:
    data: bytes
    receiver: str | None = None
    max_attempts: int | None = None
    attempts: int = 0
    deliveries: int = 0
    lease_id: int = 0  # the last lease granted; 0: never leased
    expires_at: float | None = None  # set while the lease is held, until released or swept
    fifo: bool = False  # its pid was assigned by the broker
    dead_reason: str | None = None  # set on tasks in a dead-letter queue
    dead_pid: str | None = None  # set on tasks in a dead-letter queue: the pid that died
    waiting_on: int = 0  # parents still to finish
    children: int = 0  # tasks linked to wait for this one

    def held(self) -> bool:
        return self.expires_at is not None

    def running(self, now: float) -> bool:
        return self.expires_at is not None and self.expires_at > now


@dataclass(frozen=True)
class Ref:
    """A lease as a worker holds it."""

    queue: str
    pid: str
    lease_id: int


class ModelQueues:
    def __init__(self, store: Callable[[], Any]) -> None:
        self.queues: dict[str, dict[str, ModelTask]] = {}
        self.store = store  # the engine's store now: where dead letters' pids are learned
        self.last_death = ""  # the largest death time of a dead letter so far
        self.edges: dict[tuple[str, str], list[tuple[str, str]]] = {}  # parent key -> child keys

    def copy(self) -> ModelQueues:
        return copy.deepcopy(self)

    # ------------------------------------------------------------ reading

    def tasks(self, queue: str) -> dict[str, ModelTask]:
        return self.queues.get(queue, {})

    def get(self, queue: str, pid: str) -> ModelTask | None:
        return self.queues.get(queue, {}).get(pid)

    def size(self, queue: str) -> int:
        return len(self.queues.get(queue, {}))

    def held(self, queue: str) -> list[str]:
        return sorted(pid for pid, task in self.tasks(queue).items() if task.held())

    def available(self, queue: str) -> list[str]:
        return sorted(pid for pid, task in self.tasks(queue).items() if not task.held() and not task.waiting_on)

    def blocked(self, queue: str) -> list[str]:
        return sorted(pid for pid, task in self.tasks(queue).items() if task.waiting_on)

    def dead_letters(self, dead: str, pid: str) -> list[str]:
        """Pids of the dead letters of `pid` in the dead-letter queue `dead`, oldest first."""
        return sorted(letter for letter, task in self.tasks(dead).items() if task.dead_pid == pid)

    def names(self) -> list[str]:
        return sorted(name for name, tasks in self.queues.items() if tasks)

    # ------------------------------------------------------------ changes

    def _remove(self, queue: str, pid: str) -> None:
        tasks = self.queues[queue]
        del tasks[pid]
        if not tasks:
            del self.queues[queue]

    def enqueue(
        self,
        queue: str,
        pid: str,
        data: bytes,
        *,
        receiver: str | None = None,
        max_attempts: int | None = None,
        fifo: bool = False,
        after: Sequence[tuple[str, str]] = (),
    ) -> bool:
        """Add a task; True if the pid exists and the enqueue collapses into it. With `after`, it
        waits for the parents that exist; a parent that is gone but has a dead letter failed, and
        the task is born dead."""
        if pid in self.tasks(queue):
            return True
        task = ModelTask(data, receiver=receiver, max_attempts=max_attempts, fifo=fifo)
        linked = []
        for parent in dict.fromkeys(after):
            if self.get(*parent) is not None:
                linked.append(parent)
            elif self.dead_letters(parent[0] + DEAD_SUFFIX, parent[1]):
                self._bury(queue, pid, task, f"PARENT_FAILED {parent[0]}/{parent[1]}")
                return False
        for parent in linked:
            self.queues[parent[0]][parent[1]].children += 1
            children = self.edges.setdefault(parent, [])
            if (queue, pid) not in children:
                children.append((queue, pid))
            task.waiting_on += 1
        self.queues.setdefault(queue, {})[pid] = task
        return False

    def fail_attempt(self, queue: str, pid: str, reason: str, released: bool = False) -> bool:
        """Count a failed attempt; True if the task went to the dead-letter queue."""
        task = self.queues[queue][pid]
        task.attempts += 1
        task.expires_at = None
        if released:
            task.lease_id = 0
        if task.attempts < (task.max_attempts or DEFAULT_MAX_ATTEMPTS) or queue.endswith(DEAD_SUFFIX):
            return False
        self._remove(queue, pid)
        self._bury(queue, pid, task, reason)
        if self._fires(queue, pid, task):
            self._fail_descendants(queue, pid)
        return True

    def _bury(self, queue: str, pid: str, task: ModelTask, reason: str) -> None:
        """A task that left its queue becomes a dead letter."""
        dead = queue + DEAD_SUFFIX
        self.queues.setdefault(dead, {})[self._dead_letter_pid(dead, pid)] = ModelTask(
            task.data,
            receiver=task.receiver,
            max_attempts=task.max_attempts,
            attempts=task.attempts,
            deliveries=task.deliveries,
            dead_reason=reason,
            dead_pid=pid,
        )

    def _fires(self, queue: str, pid: str, task: ModelTask) -> bool:
        """Whether the engine read the edges of (queue, pid) as its task finished or failed: when
        the task has children, always; when no edge is there, never; when only edges of an earlier
        task at that key are left, as the store shows (see the module's docstring)."""
        if task.children:
            return True
        if (queue, pid) not in self.edges:
            return False
        return not self.store().children_of(queue, pid)

    def _fail_descendants(self, queue: str, pid: str) -> None:
        """Every task waiting on a failed one dies, and theirs in turn, in the engine's order."""
        reason = f"PARENT_FAILED {queue}/{pid}"
        stack = [(queue, pid)]
        while stack:
            parent = stack.pop()
            for child_queue, child_pid in sorted(self.edges.pop(parent, ())):
                child = self.get(child_queue, child_pid)
                if child is None or not child.waiting_on:
                    continue  # failed through another parent already, or an earlier task's edge
                self._remove(child_queue, child_pid)
                child.waiting_on = 0
                self._bury(child_queue, child_pid, child, reason)
                if child.children:
                    stack.append((child_queue, child_pid))

    def _finish_parent(self, queue: str, pid: str) -> None:
        """Each task waiting on a finished one has one parent fewer."""
        for child_queue, child_pid in sorted(self.edges.pop((queue, pid), ())):
            child = self.get(child_queue, child_pid)
            if child is not None and child.waiting_on:
                child.waiting_on -= 1

    def _dead_letter_pid(self, dead: str, pid: str) -> str:
        """The pid the engine gave the dead letter of `pid` it has just made: the oldest of the
        store's dead letters of `pid` the model does not know yet."""
        known = self.queues.get(dead, {})
        prefix = dead_letter_prefix(pid)
        for row in self.store().scan(dead, prefix, 1_000_000):
            if not row.pid.startswith(prefix):
                break
            if row.pid in known or (row.headers or {}).get(DEAD_PID_HEADER) != pid:
                continue
            death = row.pid[len(prefix):]
            assert len(death) == FIFO_PID_DIGITS and death.isdigit(), f"dead letter pid {row.pid!r}"
            assert death > self.last_death, f"dead letter {row.pid!r} died before {self.last_death}"
            self.last_death = death
            return row.pid
        raise AssertionError(f"the engine made no dead letter of {pid!r} in {dead!r}")

    def sweep(self, now: float) -> None:
        """Expired leases give their tasks back, counting a failed attempt."""
        expired = sorted(
            (task.expires_at, task.lease_id, queue, pid)
            for queue, tasks in self.queues.items()
            for pid, task in tasks.items()
            if task.expires_at is not None and task.expires_at <= now
        )
        for _, _, queue, pid in expired:  # in the engine's order, which is the order of death times
            self.fail_attempt(queue, pid, "LEASE_EXPIRED")

    def eligible(
        self, queues: Sequence[str], max_pid: str | None, receiver: str | None
    ) -> list[tuple[str, str]]:
        """(queue, pid) of every task a lease could take, in the order it must take them."""
        order = list(dict.fromkeys(queues))
        found = []
        for index, queue in enumerate(order):
            for pid, task in self.tasks(queue).items():
                if task.held() or task.waiting_on:
                    continue
                if task.receiver is not None and task.receiver != receiver:
                    continue
                if max_pid is not None and pid > max_pid:
                    continue
                found.append((pid, index, queue))
        found.sort()
        return [(queue, pid) for pid, _, queue in found]

    def grant(self, queue: str, pid: str, lease_id: int, expires_at: float) -> None:
        task = self.queues[queue][pid]
        task.lease_id = lease_id
        task.expires_at = expires_at
        task.deliveries += 1

    def resolve(self, ref: Ref, op: str, now: float) -> str | None:
        """The error code of renew / release / dequeue of `ref` now, or None if allowed."""
        task = self.get(ref.queue, ref.pid)
        if task is None:
            return NOT_FOUND
        if task.lease_id != ref.lease_id:
            return NOT_LEASED
        if task.running(now) or op == "dequeue":
            return None  # a late dequeue: the lease ran out and nobody leased the task since
        return EXPIRED

    def dequeue(self, ref: Ref) -> None:
        task = self.queues[ref.queue][ref.pid]
        self._remove(ref.queue, ref.pid)
        if self._fires(ref.queue, ref.pid, task):
            self._finish_parent(ref.queue, ref.pid)

    def renew(self, ref: Ref, expires_at: float) -> None:
        self.queues[ref.queue][ref.pid].expires_at = expires_at

    def release(self, ref: Ref, reason: str | None) -> bool:
        return self.fail_attempt(ref.queue, ref.pid, reason or "RELEASED", released=True)

    def update_error(
        self,
        *,
        enqueue_queues: Sequence[str],
        dequeue: Sequence[Ref],
        release: Sequence[Ref],
        renew: Sequence[Ref],
        now: float,
    ) -> str | None:
        """Why an update of valid items must be refused as a whole, or None."""
        groups = {group_of(queue) for queue in enqueue_queues}
        groups.update(group_of(ref.queue) for ref in (*dequeue, *release, *renew))
        if len(groups) > 1:
            return CROSS_GROUP
        seen: set[tuple[str, str]] = set()
        for op, refs in (("dequeue", dequeue), ("release", release), ("renew", renew)):
            for ref in refs:
                if (ref.queue, ref.pid) in seen:
                    return BAD_REQUEST
                seen.add((ref.queue, ref.pid))
                code = self.resolve(ref, op, now)
                if code is not None:
                    return code
        return None

    def delete_queue(self, queue: str) -> int:
        """The queue's tasks no longer exist: each counts as finished for the tasks waiting on it."""
        if queue not in self.queues:
            return 0
        for parent_queue, parent_pid in sorted(key for key in self.edges if key[0] == queue):
            self._finish_parent(parent_queue, parent_pid)
        return len(self.queues.pop(queue, {}))

    def cancel(self, keys: Sequence[tuple[str, str]], reason: str | None) -> list[str | None]:
        """Withdraw tasks into their dead-letter queues; the error code of each, or None."""
        codes: list[str | None] = []
        for queue, pid in dict.fromkeys(keys):
            task = self.get(queue, pid)
            if task is None:
                codes.append(NOT_FOUND)
                continue
            self._remove(queue, pid)
            task.waiting_on = 0
            self._bury(queue, pid, task, reason or "CANCELLED")
            if self._fires(queue, pid, task):
                self._fail_descendants(queue, pid)
            codes.append(None)
        return codes

    def _chosen(
        self, dead: str, pids: Sequence[str] | None, after_pid: str | None, limit: int
    ) -> tuple[list[tuple[str, str | None]], str | None]:
        """The dead letters a requeue or purge names, each once: (asked-for pid, dead letter or None)."""
        if pids is None:
            rows = [pid for pid in sorted(self.tasks(dead)) if after_pid is None or pid > after_pid][:limit]
            return [(pid, pid) for pid in rows], (rows[-1] if len(rows) == limit else None)
        # in pid order: each dead letter once, a pid naming none at its own place (within one page:
        # the paging of named pids is tested on its own, tests/engine/test_dead_letters.py)
        assert after_pid is None and limit >= len(self.tasks(dead)), "the model pages only the whole queue"
        letters: dict[str, str] = {}
        missing: list[str] = []
        for pid in dict.fromkeys(pids):
            named = [pid] if pid in self.tasks(dead) else self.dead_letters(dead, pid)
            if not named:
                missing.append(pid)
            for letter in named:
                letters.setdefault(letter, pid)
        chosen: list[tuple[str, str | None]] = [(pid, letter) for letter, pid in letters.items()]
        chosen += [(pid, None) for pid in missing]
        chosen.sort(key=lambda entry: entry[1] if entry[1] is not None else entry[0])
        return chosen, None

    def requeue_dead(
        self, queue: str, pids: Sequence[str] | None, after_pid: str | None = None, limit: int = 1000
    ) -> tuple[list[tuple[str, str | None]], str | None]:
        """Dead letters back under their own pids: ([(dead-letter pid, error code or None)], next pid)."""
        original = queue.removesuffix(DEAD_SUFFIX)
        dead = original + DEAD_SUFFIX
        chosen, next_pid = self._chosen(dead, pids, after_pid, limit)
        outcomes: list[tuple[str, str | None]] = []
        for asked, letter in chosen:
            task = self.get(dead, letter) if letter is not None else None
            if task is None or letter is None:
                outcomes.append((asked, NOT_FOUND))
            elif task.held():
                outcomes.append((letter, LEASED))
            elif self.enqueue(original, task.dead_pid or letter, task.data, receiver=task.receiver,
                              max_attempts=task.max_attempts):
                outcomes.append((letter, EXISTS))
            else:
                self._remove(dead, letter)
                outcomes.append((letter, None))
        return outcomes, next_pid

    def purge_dead(
        self, queue: str, pids: Sequence[str] | None, after_pid: str | None = None, limit: int = 1000
    ) -> tuple[list[tuple[str, str | None]], str | None]:
        """Dead letters deleted, held or not: ([(dead-letter pid, error code or None)], next pid)."""
        dead = queue.removesuffix(DEAD_SUFFIX) + DEAD_SUFFIX
        chosen, next_pid = self._chosen(dead, pids, after_pid, limit)
        outcomes: list[tuple[str, str | None]] = []
        for asked, letter in chosen:
            if letter is None or self.get(dead, letter) is None:
                outcomes.append((asked, NOT_FOUND))
            else:
                self._remove(dead, letter)
                outcomes.append((letter, None))
        return outcomes, next_pid


# ---------------------------------------------------------------- checking


def _rows(model: ModelQueues, queue: str) -> list[tuple]:
    return [
        (pid, task.data, task.receiver, task.attempts, task.deliveries, task.lease_id, task.expires_at,
         task.dead_reason, task.dead_pid, task.waiting_on)
        for pid, task in sorted(model.tasks(queue).items())
    ]


def _store_rows(engine: Engine, queue: str) -> list[tuple]:
    return [
        (t.pid, t.data, t.receiver, t.attempts, t.deliveries, t.lease_id, t.lease_expires_at,
         (t.headers or {}).get(DEAD_REASON_HEADER), (t.headers or {}).get(DEAD_PID_HEADER), t.waiting_on)
        for t in engine.store.scan(queue, None, 1_000_000)
    ]


def head_bound(head_tasks: int, max_tasks: int) -> int:
    """How many available tasks one queue may hold in memory: twice the head setting, or what a
    lease of `max_tasks` had to load to serve itself (one refill more than it asked for)."""
    return max(2 * head_tasks, max_tasks + head_tasks - 1)


def check_engine(engine: Engine, model: ModelQueues, *, max_tasks: int, extra_queues: Iterable[str] = ()) -> None:
    """Everything the engine and its store show must equal the model. `max_tasks`: the largest
    lease the test asks for."""
    names = model.names()
    listed = [(info.queue, info.size, info.leased) for info in engine.list_queues(None, 0, 1_000_000)]
    assert listed == [(name, model.size(name), len(model.held(name))) for name in names]

    for name in sorted({*names, *extra_queues}):
        assert _store_rows(engine, name) == _rows(model, name), f"store rows of {name!r}"

    receivers = {task.receiver for tasks in model.queues.values() for task in tasks.values() if task.receiver}
    for receiver in sorted(receivers):
        expected = [name for name in names if any(t.receiver == receiver for t in model.tasks(name).values())]
        assert engine.queues_for_receiver(receiver) == expected, f"queues for receiver {receiver!r}"

    memory_bytes = 0
    for name, queue in engine.state.queues.items():
        assert queue.size == model.size(name), f"size of {name!r}"
        assert sorted(queue.leased) == model.held(name), f"leased set of {name!r}"
        assert queue.blocked == len(model.blocked(name)), f"blocked count of {name!r}"
        for pid, task in queue.leased.items():
            expected = model.get(name, pid)
            assert expected is not None
            assert (task.lease_id, task.lease_expires_at) == (expected.lease_id, expected.expires_at)
        available = model.available(name)
        if not queue.complete:
            available = [pid for pid in available if pid <= queue.horizon]
        assert list(queue.available) == available, f"head of {name!r} (horizon {queue.horizon!r})"
        for pid, task in queue.available.items():
            expected = model.get(name, pid)
            assert expected is not None
            assert (task.data, task.attempts) == (expected.data, expected.attempts)
        assert list(queue.open) == [pid for pid in available if model.tasks(name)[pid].receiver is None]
        assert sum(len(bucket) for bucket in queue.directed.values()) + len(queue.open) == len(available)
        if not any(task.receiver for task in model.tasks(name).values()):
            # tasks directed to other receivers can make a lease refill past this (see test_head_cache)
            assert len(queue.available) <= head_bound(engine.head_tasks, max_tasks), f"head of {name!r} is unbounded"
        assert max([queue.max_pid, *model.tasks(name)]) == queue.max_pid, f"max_pid of {name!r}"
        assert queue.memory_bytes == sum(task.size_bytes() for task in queue.available.values())
        memory_bytes += queue.memory_bytes
    for name in names:
        assert name in engine.state.queues, f"queue {name!r} holds tasks but the engine forgot it"
    assert engine.memory_bytes == memory_bytes
