"""A worker process's capacity: how many tasks it may hold at once, running or waiting for a slot.

The leasers of `loop` take free units before they lease (one per task asked
for) and give back what the broker did not fill; settling a task gives its unit
back. A parked gang task coming back to run claims a unit ahead of the leasers
(`claim`), or a leaser that keeps asking after empty long-polls would win the
unit every time and the parked task would never run again.
"""

from __future__ import annotations

import threading
import time
from typing import Callable


class Capacity:
    """Slots for held tasks (running + waiting); leasers take what is free, after parked tasks
    waiting to come back (`claim`), which go first."""

    def __init__(self, total: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.total = total
        self.clock = clock
        self.free = total
        self._claims = 0
        self._condition = threading.Condition()

    def take(self, most: int, timeout: float) -> int:
        with self._condition:
            if self.free - self._claims <= 0:
                self._condition.wait(timeout)
            taken = min(most, self.free - self._claims)
            self.free -= max(0, taken)
            return max(0, taken)

    def claim(self, timeout: float) -> bool:
        """One unit for a task already held, ahead of the leasers; False after `timeout`."""
        deadline = self.clock() + timeout
        with self._condition:
            self._claims += 1
            try:
                while self.free <= 0:
                    remaining = deadline - self.clock()
                    if remaining <= 0:
                        return False
                    self._condition.wait(remaining)
                self.free -= 1
                return True
            finally:
                self._claims -= 1

    def give(self, count: int) -> None:
        if count:
            with self._condition:
                self.free += count
                self._condition.notify_all()
