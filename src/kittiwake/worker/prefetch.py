"""How far ahead of its slots a worker process leases, sized from the run times it observes.

CloudKon bundles tasks so that a worker pays one broker round trip for many
tasks; Albatross warns that a worker holding tasks it cannot start yet
starves its peers. A fixed prefetch gets one of the two wrong: 4 per slot
leaves null tasks waiting on round trips, and is 4 seconds of work a peer
could have started for a 1 s task. So the default is sized from the work:

* hold about `AHEAD_SECS` of work per slot beyond the tasks running, at the
  mean of the last `WINDOW` run times (a mean below `FLOOR_SECS` counts as
  that, so null tasks lease `MOST_AHEAD` at a time). The mean, not the
  slowest: a null task's run measured across a thread switch takes
  milliseconds now and then, which would shrink the prefetch for nothing;
* tasks whose mean run time is `SLOW_SECS` or more are not leased ahead at
  all: a lease round trip is a small part of each run, and a task waiting
  behind one would wait for a whole run;
* in a mix, a slot whose run has lasted `SLOW_SECS` or more is *stuck*: it
  will not take from the prefetch soon, so the work held ahead is sized for
  the other slots only, and with every slot stuck nothing is held ahead —
  the worker loop then hands the tasks waiting back to the broker
  unstarted, where another worker's free slot takes them (a slow task
  queued behind slow runs would otherwise start a slow run late, and the
  mix's end would wait for it);
* before the first run is seen, lease for the slots only (a queue of long
  tasks is not grabbed on a guess), then at most double the reach after
  each lease the broker filled (slow start);
* `--prefetch N` fixes it at N.

Pure: the worker loop feeds it run times and lease outcomes and asks how
many tasks it may hold.
"""

from __future__ import annotations

import threading
from collections import deque

AHEAD_SECS = 0.1  # work held per slot beyond the running tasks
WINDOW = 64  # runs the estimate looks back over
FLOOR_SECS = 50e-6  # a shorter mean run time counts as this long
SLOW_SECS = 0.1  # a slot running this long is stuck: it takes nothing from the prefetch soon
MOST_AHEAD = 2000  # tasks leased ahead at most, per process


class Prefetch:
    """Tasks a worker process leases ahead of its `slots`; see the module docstring."""

    def __init__(
        self,
        slots: int,
        fixed: int | None = None,
        *,
        ahead_secs: float = AHEAD_SECS,
        most: int = MOST_AHEAD,
        window: int = WINDOW,
    ) -> None:
        if slots < 1:
            raise ValueError(f"slots must be at least 1, not {slots}")
        if fixed is not None and fixed < 0:
            raise ValueError(f"a fixed prefetch must be 0 or more, not {fixed}")
        if ahead_secs <= 0 or most < 0 or window < 1:
            raise ValueError("ahead_secs must be positive, most 0 or more, window at least 1")
        self.slots = slots
        self.fixed = fixed
        self.ahead_secs = ahead_secs
        self.most = most
        self._runs: deque[float] = deque(maxlen=window)
        self._reach = slots
        self._lock = threading.Lock()

    @property
    def adaptive(self) -> bool:
        return self.fixed is None

    def observe(self, run_secs: float) -> None:
        """A task ran this long (slot threads call this)."""
        with self._lock:
            self._runs.append(max(0.0, run_secs))

    def leased(self, asked: int, got: int) -> None:
        """A lease asked for `asked` tasks and got `got`: a full one lets the reach double."""
        if got >= asked > 0:
            with self._lock:
                self._reach = min(max(self.most, 1), self._reach * 2)

    def ahead(self, stuck: int = 0) -> int:
        """Tasks to hold beyond the running ones while `stuck` slots have run `SLOW_SECS` or more."""
        if self.fixed is not None:
            return self.fixed
        taking = self.slots - max(0, stuck)
        with self._lock:
            if not self._runs or taking <= 0:
                return 0
            mean = max(sum(self._runs) / len(self._runs), FLOOR_SECS)
            reach = self._reach
        if mean >= SLOW_SECS:
            return 0  # slow tasks: a lease round trip is a small part of a run; hold nothing they would wait on
        by_time = int(self.ahead_secs * taking / mean)
        return max(0, min(by_time, self.most, reach))

    def total(self, stuck: int = 0) -> int:
        """Tasks this process may hold that have not finished running: its slots and what waits for them."""
        return self.slots + self.ahead(stuck)
