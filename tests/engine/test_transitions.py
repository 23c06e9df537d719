"""The task state machine: the table is whole, the docs' diagram is the table, and each edge is one
the engine takes.

The simulation holds every change it sees to `TRANSITIONS` (tests/engine/test_simulation.py);
here each operation is run on purpose from each state it acts on, observed the same way
(`TaskStates`, from the store), over both stores.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import pytest

from kittiwake.engine import Engine
from kittiwake.engine.diagram import state_diagram
from kittiwake.engine.transitions import INITIAL, TRANSITIONS, Operation, next_states
from kittiwake.model import TaskState

from .harness import put, ref, take
from .task_states import TaskStates, reachable

AVAILABLE, LEASED, BLOCKED, DEAD, GONE = (
    TaskState.AVAILABLE, TaskState.LEASED, TaskState.BLOCKED, TaskState.DEAD, TaskState.GONE)
DIAGRAM = Path(__file__).resolve().parents[2] / "docs" / "task-states.md"


# ---------------------------------------------------------------- the table


def test_every_state_has_a_row_and_every_operation_acts_somewhere():
    assert set(TRANSITIONS) == set(TaskState)
    acting = {operation for row in TRANSITIONS.values() for operation in row}
    assert acting == set(Operation)
    for row in TRANSITIONS.values():
        for targets in row.values():
            assert targets and targets <= set(TaskState)


def test_every_state_is_reached_from_the_start_and_can_end():
    assert reachable(INITIAL, Operation) == set(TaskState)
    for state in TaskState:
        assert GONE in reachable(state, Operation), f"{state.value} is a trap"


def test_only_failures_lead_into_dead():
    into_dead = {operation for state, row in TRANSITIONS.items() if state is not DEAD
                 for operation, targets in row.items() if DEAD in targets}
    assert into_dead == {Operation.ENQUEUE, Operation.RELEASE, Operation.EXPIRE, Operation.CANCEL,
                         Operation.PARENT_FAILED}


def test_the_docs_diagram_is_generated_from_the_table():
    assert DIAGRAM.read_text(encoding="utf-8") == state_diagram(), (
        "docs/task-states.md is stale: run `.venv/bin/python -m kittiwake.engine.diagram > docs/task-states.md`")


def test_the_diagram_draws_every_edge():
    text = state_diagram()
    for state, row in TRANSITIONS.items():
        for targets in row.values():
            for target in targets:
                assert f"    {state.value} --> {target.value}: " in text


# ---------------------------------------------------------------- each edge, on the engine

QUEUE = "q"


class Watch:
    """Every task of queue `q` observed from the store as a test runs operations on purpose."""

    def __init__(self, engine: Engine) -> None:
        self.states = TaskStates(lambda: engine.store, [QUEUE])

    def settle(self) -> None:
        """Take in what the test set up, by any operations."""
        self.states.step(Operation, "setting up")

    def around(self, operation: Operation, action: Callable[[], object], key=(QUEUE, "t"),
               by: set[Operation] | None = None) -> tuple[TaskState, TaskState]:
        """(state before, state after) of task `key` around `action`, which runs `operation` on it
        (and `by` on others: a dequeue finishes a parent)."""
        self.settle()
        before = self.states.states.get(key, GONE)
        action()
        self.states.step(by or {operation}, operation.value)
        after = self.states.states.get(key, GONE)
        assert after in next_states(before, operation) or by and after in reachable(before, by)
        return before, after


def observed(engine: Engine, operation: Operation, action: Callable[[], object], key=(QUEUE, "t"),
             by: set[Operation] | None = None) -> tuple[TaskState, TaskState]:
    """(state before, state after) of `key` around `action`, observed from what the store holds now."""
    return Watch(engine).around(operation, action, key, by)


def held(engine, clock, pid="t", **fields):
    put(engine, clock.now, QUEUE, pid, **fields)
    [task] = take(engine, clock.now, QUEUE)
    return task


def died(engine, clock, pid="t"):
    task = held(engine, clock, pid)
    engine.release([ref(task)], "boom", clock.now, bury=True)
    clock.advance(1)


def letter(engine, pid="t"):
    return engine.dead_letters_of(QUEUE + ".dead", pid)[-1]


def test_enqueue(engine, clock):
    assert observed(engine, Operation.ENQUEUE, lambda: put(engine, clock.now, QUEUE, "t")) == (GONE, AVAILABLE)
    assert observed(engine, Operation.ENQUEUE, lambda: put(engine, clock.now, QUEUE, "t")) == (AVAILABLE, AVAILABLE)
    put(engine, clock.now, QUEUE, "parent")
    blocked = lambda: put(engine, clock.now, QUEUE, "c", after=[(QUEUE, "parent")])  # noqa: E731
    assert observed(engine, Operation.ENQUEUE, blocked, (QUEUE, "c")) == (GONE, BLOCKED)
    died(engine, clock, "dead-parent")
    born_dead = lambda: put(engine, clock.now, QUEUE, "d", after=[(QUEUE, "dead-parent")])  # noqa: E731
    assert observed(engine, Operation.ENQUEUE, born_dead, (QUEUE, "d")) == (GONE, DEAD)
    unless = lambda: put(engine, clock.now, QUEUE, "u", unless=[(QUEUE, "t")])  # noqa: E731
    assert observed(engine, Operation.ENQUEUE, unless, (QUEUE, "u")) == (GONE, GONE)
    again = lambda: put(engine, clock.now, QUEUE, "d")  # noqa: E731
    assert observed(engine, Operation.ENQUEUE, again, (QUEUE, "d")) == (DEAD, AVAILABLE)


def test_lease_renew_and_dequeue(engine, clock):
    put(engine, clock.now, QUEUE, "t")
    leased: list = []
    assert observed(engine, Operation.LEASE, lambda: leased.extend(take(engine, clock.now, QUEUE))) == (AVAILABLE, LEASED)
    assert observed(engine, Operation.RENEW, lambda: engine.renew([ref(leased[0])], 60, clock.now)) == (LEASED, LEASED)
    assert observed(engine, Operation.DEQUEUE, lambda: engine.dequeue([ref(leased[0])], clock.now)) == (LEASED, GONE)


def test_release_and_expire_count_a_failed_attempt(engine, clock):
    task = held(engine, clock, max_attempts=3)
    assert observed(engine, Operation.RELEASE, lambda: engine.release([ref(task)], None, clock.now)) == (LEASED, AVAILABLE)
    take(engine, clock.now, QUEUE, lease_secs=5)
    clock.advance(6)
    assert observed(engine, Operation.EXPIRE, lambda: engine.sweep(clock.now)) == (LEASED, AVAILABLE)
    take(engine, clock.now, QUEUE, lease_secs=5)
    clock.advance(6)
    assert observed(engine, Operation.EXPIRE, lambda: engine.sweep(clock.now)) == (LEASED, DEAD)
    task = held(engine, clock, "b")
    bury = lambda: engine.release([ref(task)], None, clock.now, bury=True)  # noqa: E731
    assert observed(engine, Operation.RELEASE, bury, (QUEUE, "b")) == (LEASED, DEAD)


def test_a_late_dequeue_of_a_swept_task(engine, clock):
    task = held(engine, clock)
    clock.advance(31)
    engine.sweep(clock.now)
    assert observed(engine, Operation.DEQUEUE, lambda: engine.dequeue([ref(task)], clock.now)) == (AVAILABLE, GONE)


@pytest.mark.parametrize("state", [AVAILABLE, LEASED, BLOCKED])
def test_cancel_from_every_live_state(engine, clock, state):
    put(engine, clock.now, "elsewhere", "parent")
    if state is LEASED:
        held(engine, clock)
    else:
        put(engine, clock.now, QUEUE, "t", after=[("elsewhere", "parent")] if state is BLOCKED else None)
    cancel = lambda: engine.cancel([(QUEUE, "t")], None, clock.now)  # noqa: E731
    assert observed(engine, Operation.CANCEL, cancel) == (state, DEAD)


def test_parents_finishing_and_failing(engine, clock):
    put(engine, clock.now, QUEUE, "p1", "p2")
    put(engine, clock.now, QUEUE, "t", after=[(QUEUE, "p1"), (QUEUE, "p2")])
    first, second = take(engine, clock.now, QUEUE, max_tasks=2)
    finish = lambda task: lambda: engine.dequeue([ref(task)], clock.now)  # noqa: E731
    by = {Operation.DEQUEUE, Operation.PARENT_FINISHED}
    assert observed(engine, Operation.PARENT_FINISHED, finish(first), by=by) == (BLOCKED, BLOCKED)
    assert observed(engine, Operation.PARENT_FINISHED, finish(second), by=by) == (BLOCKED, AVAILABLE)
    parent = held(engine, clock, "p3")
    put(engine, clock.now, QUEUE, "c", after=[(QUEUE, "p3")])
    fail = lambda: engine.release([ref(parent)], None, clock.now, bury=True)  # noqa: E731
    by = {Operation.RELEASE, Operation.PARENT_FAILED}
    assert observed(engine, Operation.PARENT_FAILED, fail, (QUEUE, "c"), by) == (BLOCKED, DEAD)


def test_requeue_and_purge_of_dead_letters(engine, clock):
    died(engine, clock)
    requeue = lambda: engine.requeue_dead(QUEUE, ["t"], clock.now)  # noqa: E731
    assert observed(engine, Operation.REQUEUE_DEAD, requeue) == (DEAD, AVAILABLE)
    died(engine, clock)  # the requeued task dies again
    died(engine, clock)
    purge_one = lambda: engine.purge_dead(QUEUE, [letter(engine).pid], clock.now)  # noqa: E731
    assert observed(engine, Operation.PURGE_DEAD, purge_one) == (DEAD, DEAD)
    purge_all = lambda: engine.purge_dead(QUEUE, ["t"], clock.now)  # noqa: E731
    assert observed(engine, Operation.PURGE_DEAD, purge_all) == (DEAD, GONE)


def test_a_dead_letter_of_an_earlier_life_can_bring_a_finished_task_back(engine, clock):
    watch = Watch(engine)
    died(engine, clock)
    leased: list = []
    live = lambda: leased.append(held(engine, clock))  # noqa: E731
    assert watch.around(Operation.LEASE, live, by={Operation.ENQUEUE, Operation.LEASE}) == (DEAD, LEASED)
    finish = lambda: engine.dequeue([ref(leased[0])], clock.now)  # noqa: E731
    assert watch.around(Operation.DEQUEUE, finish) == (LEASED, GONE)  # lived again and finished
    requeue = lambda: engine.requeue_dead(QUEUE, ["t"], clock.now)  # noqa: E731
    assert watch.around(Operation.REQUEUE_DEAD, requeue) == (GONE, AVAILABLE)


def test_a_dead_task_s_letter_is_consumed_like_any_task(engine, clock):
    died(engine, clock)
    leased: list = []
    lease = lambda: leased.extend(take(engine, clock.now, QUEUE + ".dead"))  # noqa: E731
    assert observed(engine, Operation.LEASE, lease) == (DEAD, DEAD)
    release = lambda: engine.release([ref(leased[0])], None, clock.now, bury=True)  # noqa: E731
    assert observed(engine, Operation.RELEASE, release) == (DEAD, DEAD)  # never buried further
    [again] = take(engine, clock.now, QUEUE + ".dead")
    assert observed(engine, Operation.DEQUEUE, lambda: engine.dequeue([ref(again)], clock.now)) == (DEAD, GONE)
    died(engine, clock)
    cancel = lambda: engine.cancel([(QUEUE + ".dead", letter(engine).pid)], None, clock.now)  # noqa: E731
    assert observed(engine, Operation.CANCEL, cancel) == (DEAD, GONE)


@pytest.mark.parametrize("state", [AVAILABLE, LEASED, BLOCKED, DEAD])
def test_delete_queue_from_every_state(engine, clock, state):
    put(engine, clock.now, "elsewhere", "parent")
    if state is DEAD:
        died(engine, clock)
    elif state is LEASED:
        held(engine, clock)
    else:
        put(engine, clock.now, QUEUE, "t", after=[("elsewhere", "parent")] if state is BLOCKED else None)
    name = QUEUE + ".dead" if state is DEAD else QUEUE
    assert observed(engine, Operation.DELETE_QUEUE, lambda: engine.delete_queue(name)) == (state, GONE)
