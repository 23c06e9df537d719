"""Dependencies kept in the broker (Albatross §5.2.2), and the `unless` of an enqueue.

A task enqueued with `after` parents holds a count of unfinished parents
(`Task.waiting_on`) and each parent a count of children; the parent → child
edges are rows in the store, read back only when a parent finishes or fails,
so memory does not grow with the size of a DAG. Finishing a parent
decrements each child atomically with the dequeue; a child reaching zero
becomes available (the *parent finished* edge of `transitions`). A parent
that no longer exists has finished — unless it sits in its dead-letter
queue, and then the new child is born dead. The failing half — a parent
buried or cancelled fails its whole subtree — is `failures.fail_descendants`.

Changes `QueueState.blocked` and, through `head_cache`, the heads.
"""

from __future__ import annotations

from kittiwake.engine.failures import dead_letters_of
from kittiwake.engine.head_cache import add_available, exists, find
from kittiwake.engine.mutations import DeleteEdges, Mutation, PutEdge, SetWaiting
from kittiwake.engine.coherence import claim
from kittiwake.engine.state import EngineState, flush
from kittiwake.model import Task, dead_queue_of


def key_exists(state: EngineState, name: str, pid: str) -> bool:
    """Whether task (name, pid) exists: what `unless` asks."""
    queue = claim(state, name)
    return queue is not None and exists(state, queue, pid)


def link_parents(
    state: EngineState, task: Task, parents: list[tuple[str, str]], edges: list[Mutation]
) -> tuple[str, str] | None:
    """Count the parents still to finish and write their edges (Albatross
    §5.2.2). A parent that is gone has finished, unless it sits in its
    dead-letter queue: then it failed, and that parent is returned."""
    for parent_queue, parent_pid in parents:
        queue = claim(state, parent_queue)
        parent = find(state, queue, parent_pid) if queue is not None else None
        if parent is None:
            claim(state, dead_queue_of(parent_queue))
            if dead_letters_of(state, dead_queue_of(parent_queue), parent_pid):
                return (parent_queue, parent_pid)
            continue
        task.waiting_on += 1
        parent.children += 1
        edges.append(PutEdge(parent_queue, parent_pid, task.queue, task.pid))
        edges.append(SetWaiting(parent_queue, parent_pid, parent.waiting_on, parent.children))
    return None


def finish_parent(state: EngineState, parent: Task, mutations: list[Mutation]) -> None:
    """A parent finished: each child has one parent fewer to wait for, and
    a child with none left becomes available."""
    _finish_parent_at(state, parent.queue, parent.pid, mutations)


def finish_parents_of_deleted_queue(state: EngineState, name: str) -> None:
    """`delete_queue` of `name`: its tasks no longer exist, so they count as finished for the
    tasks waiting on them (a parent that no longer exists counts as finished), and their edges
    go, so a task enqueued later at the same pid frees or fails nobody. Costs one indexed read
    of the queue's parents with children, not a scan of its tasks."""
    mutations: list[Mutation] = []
    for pid in state.store.parents_in(name):
        _finish_parent_at(state, name, pid, mutations)
        flush(state, mutations)


def _finish_parent_at(state: EngineState, parent_queue: str, parent_pid: str, mutations: list[Mutation]) -> None:
    for child_queue, child_pid in state.store.children_of(parent_queue, parent_pid):
        queue = claim(state, child_queue)
        child = state.store.load_task(child_queue, child_pid) if queue is not None else None
        if child is None or child.waiting_on <= 0:
            continue
        assert queue is not None
        child.waiting_on -= 1
        mutations.append(SetWaiting(child_queue, child_pid, child.waiting_on, child.children))
        if child.waiting_on == 0:
            queue.blocked -= 1
            add_available(state, queue, child)
    mutations.append(DeleteEdges(parent_queue, parent_pid))
