"""The task state machine as a table: `TRANSITIONS[state][operation]` -> the states it may lead to.

docs/task-states.md is drawn from this table by `kittiwake.engine.diagram`;
run `python -m kittiwake.engine.diagram > docs/task-states.md` after changing
it (a test checks that the two agree).
"""

from __future__ import annotations

from enum import Enum

from kittiwake.model import TaskState

################################################################
# Theory of operation
################################################################
#
# A task is named by its key, (queue, pid), and at any moment it is in exactly
# one state. The engine does not store the state in a field: the state *is*
# the container that holds the task (see `state.EngineState`):
#
#   AVAILABLE  in its queue's head, or in the store above the head's horizon
#   LEASED     in its queue's leased set, under a lease id
#   BLOCKED    in the store with waiting_on > 0, counted by QueueState.blocked
#   DEAD       out of its queue; its record is a dead letter in <queue>.dead
#   GONE       nowhere: never enqueued, finished, or its queue deleted
#
# An operation moves a task from one container to another. Each operation
# module does the moves of its operations, and nothing else moves tasks:
#
#   enqueue                         enqueue.py (and update.py, dead_letters.py's requeue)
#   lease, renew, release, expire,
#   dequeue                         leases.py (update.py does several at once)
#   cancel, and every move to DEAD  failures.py
#   parent finished                 dependencies.py
#   parent failed                   failures.py (fail_descendants)
#   requeue_dead, purge_dead        dead_letters.py
#   join, purge_join                joins.py (a token: a task of a join's port queue)
#   delete_queue                    state.py
#
# The table lists, for each state, the operations that act on a task in that
# state, and every state the task can be left in. An operation missing from a
# state's row is refused there (TASK_NOT_FOUND, LEASE_EXPIRED, ...) or does
# not touch the task, and the task stays where it was. Where an entry has
# more than one target, the data decides, never chance:
#
# * release and expire count a failed attempt: back to AVAILABLE, or DEAD at
#   the task's max_attempts (release with bury: DEAD at once; release with
#   reject counts nothing: AVAILABLE);
# * parent finished frees a child only when it was the last parent;
# * enqueue makes a task AVAILABLE, BLOCKED while it has parents to wait
#   for, DEAD when a parent already failed, and nothing when its `unless`
#   names a task that exists.
#
# Two moves happen to tasks nobody named. A parent that finishes (dequeue)
# fires *parent finished* on each child; a parent that goes DEAD (release,
# expire, cancel, or parent failed itself) fires *parent failed* on each
# child, which goes DEAD too, and so on down the graph.
#
# Expiry is lazy (TaskMaster §5.6): a lease that ran out keeps the task
# LEASED until a sweep (at every lease and stats call, and the broker's
# periodic tick) expires it; until then, and after it until somebody leases
# the task again, the holder may still dequeue it late (AVAILABLE --dequeue->
# GONE). `Task.state_at(now)` already shows a ran-out lease as available.
#
# Dead letters are the DEAD state, not tasks of their own here: a consumer of
# `<queue>.dead` leases, renews, releases and dequeues them like any task,
# which leaves the task DEAD until its last dead letter is dequeued or purged
# (GONE), or one is requeued (AVAILABLE under its own pid). Dead-letter queues
# never bury further, so a failed attempt there leaves the task DEAD; cancel
# of a dead letter moves it to the dead-letter queue's own `.dead`, out of
# reach of `dead_letters_of`, so the task counts as GONE once its last one
# went. A pid that lived again after it died is a new task: its earlier dead
# letters do not make it DEAD when it finishes, and requeue_dead may bring one
# back (GONE --requeue_dead-> AVAILABLE).
#
# The engine does not look this table up as it runs: the containers are the
# state, and a lookup per task would cost the hot paths (enqueue, lease,
# dequeue). The seeded simulation (tests/engine/test_simulation.py) observes
# every task's state before and after every step and fails on any change that
# is not a path through this table over the operations of that step.


class Operation(Enum):
    """What can happen to a task; the value is the wire op or the event's name."""

    ENQUEUE = "enqueue"  # enqueue, the enqueue half of update
    LEASE = "lease"  # lease: a worker takes an available task
    RENEW = "renew"  # renew (or update): the lease runs longer
    RELEASE = "release"  # release (or update): the worker gives it back, a failed attempt
    EXPIRE = "expire"  # a sweep finds its lease ran out: a failed attempt
    DEQUEUE = "dequeue"  # dequeue (or update): finished
    CANCEL = "cancel"  # cancel: withdrawn into the dead-letter queue, whatever its state
    PARENT_FINISHED = "parent finished"  # a task it waits for was dequeued
    PARENT_FAILED = "parent failed"  # a task it waits for went dead
    REQUEUE_DEAD = "requeue_dead"  # its dead letter moved back under its own pid
    PURGE_DEAD = "purge_dead"  # its dead letter deleted
    JOIN = "join"  # a token its join took, with the others of its key, into one job
    PURGE_JOIN = "purge_join"  # a token deleted with the rest of its run
    DELETE_QUEUE = "delete_queue"  # its queue (for a dead task, its dead-letter queue; for a blocked one, a parent's) deleted


AVAILABLE, LEASED, BLOCKED, DEAD, GONE = (
    TaskState.AVAILABLE,
    TaskState.LEASED,
    TaskState.BLOCKED,
    TaskState.DEAD,
    TaskState.GONE,
)
ENQUEUE, LEASE, RENEW, RELEASE = Operation.ENQUEUE, Operation.LEASE, Operation.RENEW, Operation.RELEASE
EXPIRE, DEQUEUE, CANCEL = Operation.EXPIRE, Operation.DEQUEUE, Operation.CANCEL
PARENT_FINISHED, PARENT_FAILED = Operation.PARENT_FINISHED, Operation.PARENT_FAILED
REQUEUE_DEAD, PURGE_DEAD, DELETE_QUEUE = Operation.REQUEUE_DEAD, Operation.PURGE_DEAD, Operation.DELETE_QUEUE
JOIN, PURGE_JOIN = Operation.JOIN, Operation.PURGE_JOIN


def _targets(*states: TaskState) -> frozenset[TaskState]:
    return frozenset(states)


TRANSITIONS: dict[TaskState, dict[Operation, frozenset[TaskState]]] = {
    GONE: {
        ENQUEUE: _targets(AVAILABLE, BLOCKED, DEAD, GONE),  # GONE: `unless` named a task that exists
        REQUEUE_DEAD: _targets(AVAILABLE),  # a dead letter of an earlier life of its pid
    },
    AVAILABLE: {
        ENQUEUE: _targets(AVAILABLE),  # the pid exists: the enqueue collapses
        REQUEUE_DEAD: _targets(AVAILABLE),  # collapses too, and the dead letter stays (TASK_EXISTS)
        LEASE: _targets(LEASED),
        DEQUEUE: _targets(GONE),  # a late dequeue: the lease ran out, nobody leased it since
        CANCEL: _targets(DEAD),
        JOIN: _targets(GONE),  # a token: its data goes on in the job
        PURGE_JOIN: _targets(GONE),
        DELETE_QUEUE: _targets(GONE),
    },
    LEASED: {
        ENQUEUE: _targets(LEASED),
        REQUEUE_DEAD: _targets(LEASED),
        RENEW: _targets(LEASED),
        RELEASE: _targets(AVAILABLE, DEAD),
        EXPIRE: _targets(AVAILABLE, DEAD),
        DEQUEUE: _targets(GONE),
        CANCEL: _targets(DEAD),  # the holder's lease is gone with it
        DELETE_QUEUE: _targets(GONE),
    },
    BLOCKED: {
        ENQUEUE: _targets(BLOCKED),
        REQUEUE_DEAD: _targets(BLOCKED),
        PARENT_FINISHED: _targets(BLOCKED, AVAILABLE),
        PARENT_FAILED: _targets(DEAD),
        CANCEL: _targets(DEAD),
        # its own queue deleted: gone; a parent's queue deleted: that parent counts as finished
        DELETE_QUEUE: _targets(GONE, BLOCKED, AVAILABLE),
    },
    DEAD: {
        ENQUEUE: _targets(AVAILABLE, BLOCKED, DEAD),  # lives again; its dead letters stay
        REQUEUE_DEAD: _targets(AVAILABLE),
        LEASE: _targets(DEAD),  # its dead letter, consumed like any task
        RENEW: _targets(DEAD),
        RELEASE: _targets(DEAD),  # dead-letter queues do not bury further
        EXPIRE: _targets(DEAD),
        DEQUEUE: _targets(DEAD, GONE),  # GONE with its last dead letter
        PURGE_DEAD: _targets(DEAD, GONE),
        CANCEL: _targets(DEAD, GONE),  # its dead letter moves on to `<queue>.dead.dead`
        DELETE_QUEUE: _targets(GONE),  # of `<queue>.dead`
    },
}

INITIAL = GONE


def next_states(state: TaskState, operation: Operation) -> frozenset[TaskState]:
    """Where `operation` may leave a task in `state`; empty if it does not act there."""
    return TRANSITIONS[state].get(operation, frozenset())
