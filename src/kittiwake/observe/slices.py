"""How a view that may read much shares the broker's event loop: slices of work, and a budget per request.

Views run on the event loop that also serves every binary, SQS and HTTP
client, and the views over records users write (the jobs of `job_views`, the
flow runs of `flow_views`) read as much as those records name. Two bounds
keep one request from holding the loop, whatever a user wrote:

* slices: between items of work such a view awaits `Slices.pause()`, which
  yields to the loop (`asyncio.sleep(0)`, so everything ready runs first)
  once `SLICE_SECS` have passed since the last yield; an item is kept small
  (a chunk of a job's sinks, one page of one queue), so no slice holds the
  loop much longer than the binary port's handling of one batch;
* a budget (`Budget`): the reads one request may make in all (engine calls
  and the rows they return). A view charges it as it reads; once it is spent,
  `BudgetSpent` is raised and the view shows what it has, saying it was cut
  short (`truncated`), rather than read on.

After a pause the view reads the engine again through `reads.engine_of`:
passes ran meanwhile (each commits before it returns, so every read sees a
committed state), and the store may have failed (UNAVAILABLE).

Pure but for `asyncio.sleep(0)`: the clock is passed in.
"""

from __future__ import annotations

import asyncio
import time
from typing import Callable

SLICE_SECS = 0.01


class BudgetSpent(Exception):
    """A request's budget of reads is spent: the view shows what it read so far."""


class Budget:
    """At most `max_calls` reads returning at most `max_rows` rows in all, for one request (or part of one)."""

    def __init__(self, max_calls: int, max_rows: int, parent: Budget | None = None) -> None:
        self.max_calls = max_calls
        self.max_rows = max_rows
        self.parent = parent
        self.calls = 0
        self.rows = 0
        self.spent = False  # a charge went over: whatever was read next was not

    def charge(self, calls: int = 1, rows: int = 0) -> None:
        """Count a read; raises `BudgetSpent` once this budget, or the one it is part of, is spent."""
        if self.parent is not None:
            self.parent.charge(calls, rows)
        self.calls += calls
        self.rows += rows
        if self.spent or self.calls > self.max_calls or self.rows > self.max_rows:
            self.spent = True
            raise BudgetSpent(f"more than {self.max_calls} reads or {self.max_rows} rows")

    def part(self, max_calls: int, max_rows: int) -> Budget:
        """A budget for one part of the work (one record), charged to this one too."""
        return Budget(max_calls, max_rows, self)


class Slices:
    """Yields to the event loop once a slice of work has run for `slice_secs`."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, slice_secs: float = SLICE_SECS) -> None:
        self.clock = clock
        self.slice_secs = slice_secs
        self.started_at = clock()
        self.pauses = 0  # times it yielded, for tests

    @property
    def due(self) -> bool:
        return self.clock() - self.started_at >= self.slice_secs

    async def pause(self) -> bool:
        """Yield to the loop if the slice is used up; True when it did (the engine may have moved on)."""
        if not self.due:
            return False
        await asyncio.sleep(0)
        self.pauses += 1
        self.started_at = self.clock()
        return True
