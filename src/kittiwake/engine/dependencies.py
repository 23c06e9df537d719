"""Dependencies kept in the broker (Albatross §5.2.2), cancel, and `unless`.

A mixin of `Engine`. A task enqueued with `after` parents holds a count of
unfinished parents (`Task.waiting_on`) and each parent a count of children;
the parent → child edges are rows in the store, read back only when a parent
finishes or fails, so memory does not grow with the size of a DAG. Finishing
a parent decrements each child atomically with the dequeue; a child reaching
zero becomes available. A parent that is dead-lettered or cancelled fails
its whole subtree into the dead-letter queues (`PARENT_FAILED q/pid`). A
parent that no longer exists has finished — unless it sits in its
dead-letter queue, and then the new child is born dead.
"""

from __future__ import annotations

from typing import Sequence

from kittiwake import errors
from kittiwake.engine.mutations import DeleteEdges, DeleteTask, Mutation, PutEdge, SetWaiting
from kittiwake.model import ItemOutcome, Task, dead_queue_of, validate_keys


class Dependencies:
    """Parent counts, children, cancel and conditional enqueue."""

    def _key_exists(self, name: str, pid: str) -> bool:
        queue = self._queues.get(name)
        return queue is not None and self._exists(queue, pid)

    def _link_parents(
        self, task: Task, parents: list[tuple[str, str]], edges: list[Mutation]
    ) -> tuple[str, str] | None:
        """Count the parents still to finish and write their edges (Albatross
        §5.2.2). A parent that is gone has finished, unless it sits in its
        dead-letter queue: then it failed, and that parent is returned."""
        for parent_queue, parent_pid in parents:
            state = self._queues.get(parent_queue)
            parent = self._find(state, parent_pid) if state is not None else None
            if parent is None:
                if self.dead_letters_of(dead_queue_of(parent_queue), parent_pid):
                    return (parent_queue, parent_pid)
                continue
            task.waiting_on += 1
            parent.children += 1
            edges.append(PutEdge(parent_queue, parent_pid, task.queue, task.pid))
            edges.append(SetWaiting(parent_queue, parent_pid, parent.waiting_on, parent.children))
        return None

    def _finish_parent(self, parent: Task, mutations: list[Mutation]) -> None:
        """A parent finished: each child has one parent fewer to wait for, and
        a child with none left becomes available."""
        for child_queue, child_pid in self.store.children_of(parent.queue, parent.pid):
            queue = self._queues.get(child_queue)
            child = self.store.load_task(child_queue, child_pid) if queue is not None else None
            if child is None or child.waiting_on <= 0:
                continue
            child.waiting_on -= 1
            mutations.append(SetWaiting(child_queue, child_pid, child.waiting_on, child.children))
            if child.waiting_on == 0:
                queue.blocked -= 1
                self._add_available(queue, child)
        mutations.append(DeleteEdges(parent.queue, parent.pid))

    def _fail_descendants(self, parent: Task, now: float, mutations: list[Mutation]) -> int:
        """A parent failed or was cancelled: every task waiting on it, and theirs
        in turn, moves to its dead-letter queue with the reason. Returns how many."""
        failed = 0
        reason = f"PARENT_FAILED {parent.queue}/{parent.pid}"
        stack = [(parent.queue, parent.pid)]
        while stack:
            parent_key = stack.pop()
            self._write(mutations)
            for child_queue, child_pid in self.store.children_of(*parent_key):
                queue = self._queues.get(child_queue)
                child = self.store.load_task(child_queue, child_pid) if queue is not None else None
                if child is None or child.waiting_on <= 0:
                    continue  # already failed through another parent
                assert queue is not None
                queue.blocked -= 1
                queue.size -= 1
                mutations.append(DeleteTask(child_queue, child_pid))
                child.waiting_on = 0
                self._bury(child, reason, now, mutations)
                self._forget_if_empty(queue)
                failed += 1
                if child.children:
                    stack.append((child_queue, child_pid))
            mutations.append(DeleteEdges(*parent_key))
        return failed

    def cancel(self, keys: Sequence[tuple[str, str]], reason: str | None, now: float) -> list[ItemOutcome]:
        """Withdraw tasks, whatever their state, into their dead-letter queues
        with reason CANCELLED (or the one given), failing their descendants. A
        worker holding one of them loses its lease: its renew, release or
        dequeue is refused with TASK_NOT_FOUND. Per-item outcomes."""
        keys = validate_keys(list(keys), self.limits, "tasks")
        reason = self._validate_reason(reason) or "CANCELLED"
        mutations: list[Mutation] = []
        outcomes: list[ItemOutcome] = []
        for name, pid in keys:
            queue = self._queues.get(name)
            task = self._find(queue, pid) if queue is not None else None
            if task is None or queue is None:
                outcomes.append(ItemOutcome(name, pid, False, errors.TaskNotFound.code, f"no task {pid!r} in {name!r}"))
                continue
            if queue.leased.pop(pid, None) is None:
                if task.waiting_on > 0:
                    queue.blocked -= 1
                elif queue.remove_available(pid) is not None:
                    self.memory_bytes -= task.size_bytes()
            queue.size -= 1
            mutations.append(DeleteTask(name, pid))
            task.waiting_on = 0
            self._bury(task, reason, now, mutations)
            if task.children:
                self._fail_descendants(task, now, mutations)
            self._forget_if_empty(queue)
            outcomes.append(ItemOutcome(name, pid, True, dead=True))
            self._write(mutations)
        self._enforce_cache()
        return outcomes
