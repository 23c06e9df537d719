"""Per-queue operation rates over the last 1 and 5 minutes (TaskMaster §3.5).

Soft state (TaskMaster keeps it out of the data store too): counts of
enqueues, leases and dequeues in 10-second buckets, plus the sum of lease
durations (lease → dequeue) so the average processing time per queue can be
shown. Only buckets that saw activity are kept, so an idle queue costs
nothing. Time is passed in.
"""

from __future__ import annotations

from typing import Iterable

BUCKET_SECS = 10.0
WINDOW_SECS = 300.0
_KEEP = int(WINDOW_SECS / BUCKET_SECS)

ENQUEUE, LEASE, DEQUEUE, LEASE_SECS_SUM = 0, 1, 2, 3


class RateWindow:
    __slots__ = ("_buckets",)

    def __init__(self) -> None:
        # (bucket number, [enqueues, leases, dequeues, sum of lease seconds]); a
        # list, not a deque: at most 30 entries, and an empty deque costs 600 bytes
        self._buckets: list[tuple[int, list[float]]] = []

    def _bucket(self, now: float) -> list[float]:
        number = int(now // BUCKET_SECS)
        buckets = self._buckets
        if buckets and buckets[-1][0] == number:
            return buckets[-1][1]
        stale = 0
        while stale < len(buckets) and buckets[stale][0] <= number - _KEEP:
            stale += 1
        if stale:
            del buckets[:stale]
        counts = [0, 0, 0, 0.0]
        buckets.append((number, counts))
        return counts

    def add(self, kind: int, now: float, count: float = 1) -> None:
        self._bucket(now)[kind] += count

    def add_dequeue(self, now: float, count: int, lease_secs_sum: float) -> None:
        bucket = self._bucket(now)
        bucket[DEQUEUE] += count
        bucket[LEASE_SECS_SUM] += lease_secs_sum

    def totals(self, now: float, window_secs: float) -> list[float]:
        first = int((now - window_secs) // BUCKET_SECS) + 1
        sums = [0, 0, 0, 0.0]
        for number, counts in self._buckets:
            if number >= first:
                for index in range(4):
                    sums[index] += counts[index]
        return sums

    def recent(self, kind: int, now: float, window_secs: float) -> float:
        """The count of `kind` in the window, as `totals` counts it, reading the newest buckets
        only: cheap for a short window, so a view can rank 100K queues by their last minute."""
        first = int((now - window_secs) // BUCKET_SECS) + 1
        total: float = 0
        for number, counts in reversed(self._buckets):
            if number < first:
                break
            total += counts[kind]
        return total

    def rate(self, kind: int, now: float, window_secs: float) -> float:
        return self.totals(now, window_secs)[kind] / window_secs

    def idle_since(self, now: float) -> bool:
        """True when no bucket falls in the 5-minute window any more."""
        return not self._buckets or self._buckets[-1][0] <= int(now // BUCKET_SECS) - _KEEP


def recent_counts(windows: Iterable[RateWindow | None], kind: int, now: float, window_secs: float) -> list[float]:
    """`RateWindow.recent` of each window (0 for None), in one loop: ranking 100K queues by rate
    costs a pass over their newest buckets, not 100K method calls."""
    first = int((now - window_secs) // BUCKET_SECS) + 1
    counts: list[float] = []
    append = counts.append
    for window in windows:
        total: float = 0
        if window is not None:
            buckets = window._buckets
            index = len(buckets) - 1
            while index >= 0 and buckets[index][0] >= first:
                total += buckets[index][1][kind]
                index -= 1
        append(total)
    return counts
