"""Each task's state as seen in the store, and the check that every change of it is in the table.

`TaskStates` reads the rows of the queues it watches and of their dead-letter queues and names each
task's state (`kittiwake.engine.transitions`): a row in its queue is LEASED while it carries a
lease (a lease that ran out counts until a sweep expires it), BLOCKED while it waits for parents,
else AVAILABLE. A task with no row is DEAD when it has just left its queue for a dead letter — a
dead letter of its pid appeared — or was DEAD and still has one; otherwise it is GONE. (So a pid
that died, lived again and finished is GONE, though its old dead letters are still there. To see
that, a test observes at least once while the task lives again: each step of the simulation is
one engine call, and no call both brings a dead task back and finishes it.)

`step(operations)` observes every task after one step of a test and fails unless each task that
changed state got there by a path through `TRANSITIONS` using only the operations that step ran:
a sweep inside a lease, say, may expire a task and lease it again, but nothing may change a task
without an operation that acts on it. The observer reads only the store, which the reference
checks hold to the engine's memory.
"""

from __future__ import annotations

from typing import Callable, Iterable

from kittiwake.engine.transitions import TRANSITIONS, Operation
from kittiwake.model import DEAD_PID_HEADER, DEAD_SUFFIX, TaskState

Key = tuple[str, str]

ALL_ROWS = 1_000_000


def reachable(start: TaskState, operations: Iterable[Operation]) -> set[TaskState]:
    """Every state a path through the table from `start` reaches using only `operations`."""
    operations = set(operations)
    seen = {start}
    frontier = [start]
    while frontier:
        state = frontier.pop()
        for operation, targets in TRANSITIONS[state].items():
            if operation in operations:
                for target in targets - seen:
                    seen.add(target)
                    frontier.append(target)
    return seen


class TaskStates:
    def __init__(self, store: Callable[[], object], queues: Iterable[str]) -> None:
        self.store = store  # the store now (a restart may open a new one)
        self.queues = sorted(queues)
        self.states: dict[Key, TaskState] = {}  # every task not GONE
        self.letters: dict[Key, frozenset[str]] = {}  # the pids of each task's dead letters
        self.changes: dict[tuple[TaskState, TaskState], int] = {}  # what the run saw, for its summary

    def snapshot(self) -> tuple[dict[Key, TaskState], dict[Key, frozenset[str]]]:
        return dict(self.states), dict(self.letters)

    def restore(self, snapshot: tuple[dict[Key, TaskState], dict[Key, frozenset[str]]]) -> None:
        self.states, self.letters = dict(snapshot[0]), dict(snapshot[1])

    def observe(self) -> tuple[dict[Key, TaskState], dict[Key, frozenset[str]]]:
        """(state of every task with a row, dead-letter pids of every task that has some)."""
        store = self.store()
        present: dict[Key, TaskState] = {}
        letters: dict[Key, set[str]] = {}
        for queue in self.queues:
            for row in store.scan(queue, None, ALL_ROWS):
                if row.waiting_on > 0:
                    present[(queue, row.pid)] = TaskState.BLOCKED
                elif row.lease_expires_at is not None:
                    present[(queue, row.pid)] = TaskState.LEASED
                else:
                    present[(queue, row.pid)] = TaskState.AVAILABLE
            for row in store.scan(queue + DEAD_SUFFIX, None, ALL_ROWS):
                original = (row.headers or {}).get(DEAD_PID_HEADER)
                assert original is not None, f"dead letter {row.pid!r} of {queue!r} names no pid"
                letters.setdefault((queue, original), set()).add(row.pid)
        return present, {key: frozenset(pids) for key, pids in letters.items()}

    def step(self, operations: Iterable[Operation], what: str = "") -> None:
        """Observe every task again; each change must be a path through the table over `operations`."""
        operations = frozenset(operations)
        present, letters = self.observe()
        states: dict[Key, TaskState] = {}
        for key in {*self.states, *present, *letters}:
            before = self.states.get(key, TaskState.GONE)
            if key in present:
                after = present[key]
            elif letters.get(key, frozenset()) - self.letters.get(key, frozenset()):
                after = TaskState.DEAD  # left its queue for a new dead letter
            elif before is TaskState.DEAD and key in letters:
                after = TaskState.DEAD
            else:
                after = TaskState.GONE
            if after is not before:
                assert after in reachable(before, operations), (
                    f"{key[0]}/{key[1]} went {before.value} -> {after.value} in {what or 'a step'} "
                    f"({', '.join(sorted(op.value for op in operations)) or 'no operation'}): not in TRANSITIONS"
                )
                self.changes[(before, after)] = self.changes.get((before, after), 0) + 1
            if after is not TaskState.GONE:
                states[key] = after
        self.states = states
        self.letters = letters
