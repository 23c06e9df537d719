"""Enqueue (TaskMaster §3.2, Program 1): new tasks, FIFO pids, dedupe by pid.

A task without a pid gets a FIFO pid from the broker-wide monotonic
microsecond clock (`ids.next_fifo_pid`), so FIFO pids grow in every queue
even when the wall clock steps back. A pid that exists (available, leased or
blocked) collapses: the existing task is kept and the outcome says
`collapsed`; so does a task whose `unless` names a task that exists. A task
with `after` parents is born blocked, or dead if a parent already failed
(`dependencies`); any other is born available. These are the *enqueue* edges
of `transitions` out of gone and dead, and its self-loops on the live states.
A new task in a join's port queue is a token: `joins.arrived` may start the
join's job in the same pass.

Each item is handed to the store before the next is looked at (see
`state.flush`), so a later item's dedupe sees an earlier one.
"""

from __future__ import annotations

from typing import Sequence

from kittiwake.constants import PARENT_FAILED_REASON
from kittiwake import errors
from kittiwake.engine import join_index, joins
from kittiwake.engine.dependencies import key_exists, link_parents
from kittiwake.engine.failures import bury
from kittiwake.engine.head_cache import add_available, enforce_cache, exists, touch
from kittiwake.engine.ids import next_fifo_pid
from kittiwake.engine.mutations import Mutation, PutTask
from kittiwake.engine.rates import ENQUEUE
from kittiwake.engine.coherence import claim_open
from kittiwake.engine.state import EngineState, flush, forget_if_empty, rates_of
from kittiwake.engine.tally import ENQUEUED
from kittiwake.model import EnqueueOutcome, NewTask, Task


def enqueue(state: EngineState, tasks: Sequence[NewTask], now: float) -> list[EnqueueOutcome]:
    """Add tasks, each checked before any is added; one outcome per task."""
    limits = state.limits
    if not tasks:
        return []
    if len(tasks) > limits.max_batch:
        raise errors.BadRequest(f"more than {limits.max_batch} tasks in one request")
    for task in tasks:
        task.validate(limits)
    join_index.check_tokens(state, tasks)
    mutations: list[Mutation] = []
    outcomes: list[EnqueueOutcome] = []
    for task in tasks:
        outcomes.append(enqueue_one(state, task, now, mutations))
        flush(state, mutations)
    enforce_cache(state)
    return outcomes


def enqueue_one(state: EngineState, new: NewTask, now: float, mutations: list[Mutation]) -> EnqueueOutcome:
    """Add one validated task (enqueue, update, requeue of a dead letter)."""
    queue = claim_open(state, new.queue)
    touch(state, queue)
    if new.pid is None:
        pid = next_fifo_pid(state, now, mutations)
        # an explicit pid may sit where the clock now is (a delayed task at
        # pid_at(t)): step past it rather than overwrite it
        while pid <= queue.max_fifo_pid and exists(state, queue, pid):
            pid = next_fifo_pid(state, now, mutations)
    else:
        pid = new.pid
        tokens = state.join_tokens.get(new.queue)  # a join's port: its pids are all in memory
        if pid in tokens if tokens is not None else exists(state, queue, pid):
            return EnqueueOutcome(new.queue, pid, True)
    if new.unless and any(key_exists(state, q, p) for q, p in new.unless):
        return EnqueueOutcome(new.queue, pid, True)
    task = Task(
        queue=new.queue,
        pid=pid,
        data=bytes(new.data),
        enqueued_at=now,
        sender=new.sender,
        receiver=new.receiver,
        headers=new.headers or None,
        max_attempts=new.max_attempts,
    )
    edges: list[Mutation] = []
    if new.after:
        # a pid that waits for itself was refused with the request (NewTask.validate); a FIFO
        # pid an `after` guessed is a parent that does not exist yet, so it counts as finished
        failed = link_parents(state, task, new.after, edges)
        if failed is not None:
            # a parent already failed: the task is born dead, like its
            # siblings that were waiting when the parent failed
            rates_of(queue).add(ENQUEUE, now)
            state.tally.count(queue.name, ENQUEUED)
            bury(state, task, f"{PARENT_FAILED_REASON} {failed[0]}/{failed[1]}", now, mutations)
            forget_if_empty(state, queue)
            return EnqueueOutcome(new.queue, pid, False)
    queue.size += 1
    queue.note_pid(pid)
    if task.waiting_on:
        queue.blocked += 1
    else:
        add_available(state, queue, task)
    rates_of(queue).add(ENQUEUE, now)
    state.tally.count(queue.name, ENQUEUED)
    mutations.append(PutTask(task))
    mutations.extend(edges)
    if new.queue in state.join_ports:
        joins.arrived(state, task, now, mutations)
    return EnqueueOutcome(new.queue, pid, False)
