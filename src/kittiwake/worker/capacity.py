"""A worker process's capacity: how many tasks it may hold at once, running or waiting for a slot.

The leasers of `loop` take free units before they lease (one per task asked
for) and give back what the broker did not fill; the end of a task's run
gives its unit back (its outcome then goes to the broker without holding a
unit, so a slow update never idles the slots). The total follows the
prefetch (`prefetch.Prefetch`): `resize` changes it, and units taken above a
smaller total come back as tasks end. A leaser waits for at least `least`
free units (`take`), so that it leases in bundles rather than a task at a
time. A parked gang task coming back to run claims a unit ahead of the leasers
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
        self._needs: list[int] = []  # the `least` of each leaser waiting in `take`
        self._condition = threading.Condition()

    def take(self, most: int, timeout: float, least: int = 1) -> int:
        """Up to `most` free units, once at least `least` are free; 0 after `timeout`, or at
        once when the total shrinks meanwhile (the leaser has tasks to give back)."""
        least = max(1, min(least, most))
        deadline = self.clock() + timeout
        with self._condition:
            total = self.total
            if self.free - self._claims < least:
                self._needs.append(least)
                try:
                    while self.free - self._claims < least:
                        remaining = deadline - self.clock()
                        if remaining <= 0 or self.total < total:
                            return 0
                        self._condition.wait(remaining)
                finally:
                    self._needs.remove(least)
            taken = min(most, self.free - self._claims)
            self.free -= taken
            return taken

    def resize(self, total: int) -> None:
        """A new total (the prefetch changed): free units follow; taken ones stay taken."""
        with self._condition:
            if total != self.total:
                self.free += total - self.total
                self.total = total
                self._condition.notify_all()

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
        """Units back; waiters are woken only once one of them can go on (not at every task's end)."""
        if count:
            with self._condition:
                self.free += count
                available = self.free - self._claims
                if self._claims or any(available >= need for need in self._needs):
                    self._condition.notify_all()
