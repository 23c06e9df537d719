"""`EngineReader`: a queue client's reads (`client.interfaces.QueueReads`) answered from the broker's engine for one viewer.

`kittiwake.engine.reads` answers `list_queues`, `peek`, `get` and `stats`
from an engine's state at a `now` and changes nothing; this wraps it for a
view that reads as a client would (the flows view runs `flow.runs` over it):

* each read runs through `on_loop` — from the view's worker thread, on the
  event loop (`loop_calls`); by default, where it is called — and reads the
  engine as it is then (`state_of`);
* each read is charged to `budget` (calls, rows), which raises `BudgetSpent`
  once it is spent;
* the viewer sees what it may: `list_queues`, and `stats` by pattern, list
  the queues the principal administers (`reads.visibility`); a read of one
  queue it may not read raises `Hidden` — `peek` needs `reads.PEEK`, `get`
  `reads.GET`, `stats` of a named queue admin, as on the binary port;
* the loop is held one piece at a time: a listing walks at most
  `NAMES_PER_CALL` names per call, statistics cover at most
  `STATS_PER_CALL` queues per call.

Tasks come back as the client's `TaskView`. A reader offers these reads
only: nothing else is answered.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import partial
from typing import Callable, Protocol, TypeVar

from kittiwake.broker.access import Permission, Principal
from kittiwake.engine import reads
from kittiwake.engine.state import EngineState
from kittiwake.model import QueueInfo, QueueStats
from kittiwake.observe.reads import GET, PEEK, may_read, visibility
from kittiwake.observe.slices import Budget
from kittiwake.protocol.messages import DEFAULT_STATS_SAMPLE
from kittiwake.protocol.replies import TaskView

T = TypeVar("T")

NAMES_PER_CALL = 5_000  # queue names one `list_queues` call walks on the loop before it hands back
STATS_PER_CALL = 1_000  # queues one `stats` call reads on the loop before it hands back
STATS = (Permission.ADMIN,)  # what the statistics of a named queue need


class Hidden(Exception):
    """A read of a queue the viewer may not read: the view shows what it knows without it."""


class OnLoop(Protocol):
    """Runs a read where the engine may be read (the event loop) and hands back its result."""

    def __call__(self, read: Callable[[], T], /) -> T: ...


def _here(read: Callable[[], T]) -> T:
    return read()


class EngineReader:
    """`QueueReads` answered from the engine at `now` for `principal` (None: no auth file), each
    read run through `on_loop`, on the engine as `state_of` gives it then, charged to `budget`."""

    def __init__(self, state_of: Callable[[], EngineState], now: float, principal: Principal | None, budget: Budget,
                 on_loop: OnLoop = _here) -> None:
        self.state_of = state_of
        self.now = now
        self.principal = principal
        self.visible = visibility(principal)
        self.budget = budget
        self.on_loop = on_loop

    def list_queues(
        self, pattern: str | None = None, min_tasks: int = 0, limit: int = 1000, *, start_after: str | None = None
    ) -> list[QueueInfo]:
        """Queues past `start_after` holding at least max(1, min_tasks) tasks whose name matches
        `pattern` and that the principal administers, in name order."""
        asked = reads.listing(pattern, min_tasks, self.visible)
        return self._listed(asked, limit, reads.start_of(asked, start_after))

    def _listed(self, asked: reads.Listing, limit: int | None, start: str | None = None) -> list[QueueInfo]:
        rows: list[QueueInfo] = []
        after: str | None = start
        while limit is None or len(rows) < limit:
            room = None if limit is None else limit - len(rows)
            page, after = self.on_loop(partial(self._names, asked, room, after))
            rows.extend(page)
            if after is None:
                break
        return rows

    def _names(self, asked: reads.Listing, room: int | None, after: str | None) -> tuple[list[QueueInfo], str | None]:
        self.budget.charge()
        return reads.list_queues_page(self.state_of(), asked, room, after, NAMES_PER_CALL)

    def peek(self, queue: str, n: int = 10, from_pid: str | None = None) -> list[TaskView]:
        return self.on_loop(partial(self._peek, queue, n, from_pid))

    def _peek(self, queue: str, n: int, from_pid: str | None) -> list[TaskView]:
        if not may_read(self.principal, queue, PEEK):
            raise Hidden(queue)
        self.budget.charge()
        views = reads.peek(self.state_of(), queue, n, from_pid, self.now)
        self.budget.charge(0, len(views))
        return [TaskView(**view) for view in views]

    def get(self, queue: str, pid: str) -> TaskView:
        return self.on_loop(partial(self._get, queue, pid))

    def _get(self, queue: str, pid: str) -> TaskView:
        if not may_read(self.principal, queue, GET):
            raise Hidden(queue)
        self.budget.charge(1, 1)
        return TaskView(**reads.get(self.state_of(), queue, pid, self.now))

    def stats(
        self, queues: str | Iterable[str] | None = None, pattern: str | None = None, *, sample: int = DEFAULT_STATS_SAMPLE
    ) -> list[QueueStats]:
        """Statistics of the named queues (each needs admin), or of every non-empty queue matching
        `pattern` that the principal administers, with up to `sample` leases each."""
        if queues is None:
            names = [row.queue for row in self._listed(reads.listing(pattern, 1, self.visible), None)]
        else:
            names = list(dict.fromkeys([queues] if isinstance(queues, str) else queues))
            for name in names:
                if not may_read(self.principal, name, STATS):
                    raise Hidden(name)
        found: list[QueueStats] = []
        for start in range(0, len(names), STATS_PER_CALL):
            found += self.on_loop(partial(self._stats, names[start : start + STATS_PER_CALL], sample))
        return found

    def _stats(self, names: list[str], sample: int) -> list[QueueStats]:
        self.budget.charge(1, len(names))
        return reads.stats(self.state_of(), names, sample, self.now)
