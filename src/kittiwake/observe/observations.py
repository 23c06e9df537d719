"""Everything the broker's passes did since it started, added up for the metrics and the history.

Sans-IO: each committed pass hands its tally of task moves
(`kittiwake.engine.tally.Tally`) and how long its commit took to
`Observations.add_pass`, with `now` (a monotonic clock) passed in.

Theory of operation. A Prometheus series must only ever go up, and a broker
may hold 100K queues, far more series than a scraper wants. So at most
`max_queue_series` queues get series of their own (counters and histograms
labelled with the queue's name), given out in order of first activity; the
moves of every other queue go to the aggregate `other`. A queue's series count
from when it got one: what it did while it had none stays in `other`, so
neither jumps. A queue idle for `idle_secs` (10 minutes) and empty gives its
series up (`evict_idle`): its series disappear from the scrape, which
Prometheus takes as the end of a series, and the next queue to act takes the
place. What a queue counted before giving its series up is kept in `retired`,
for the views that fold queues into `other` (a user who sees only some
queues, `fold`): their `other` then includes it, and never goes down. A queue
named `other` never gets a series of its own: it is counted in the aggregate
of that name.

Histograms have fixed buckets: task waits and runs from 1 ms to an hour
(`TASK_BUCKETS_SECS`), commits from 100 µs to 10 s (`COMMIT_BUCKETS_SECS`).
Broker-wide totals of every move and histogram are kept besides, whatever
queue series come and go: `/api/history` reads those.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass
from typing import Callable

from kittiwake.constants import DEFAULT_METRICS_QUEUE_SERIES, MAX_METRICS_QUEUE_SERIES
from kittiwake.engine.tally import MOVES, Tally

TASK_BUCKETS_SECS = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0,
    1800.0, 3600.0,
)
COMMIT_BUCKETS_SECS = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
)
IDLE_SECS = 600.0
OTHER = "other"


class Histogram:
    """Counts of observations per bucket (`bounds`: the upper bounds, inclusive; one more bucket for
    the rest), and their sum."""

    __slots__ = ("bounds", "buckets", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.buckets = [0] * (len(bounds) + 1)
        self.sum = 0.0

    @property
    def count(self) -> int:
        return sum(self.buckets)

    def observe(self, value: float) -> None:
        self.buckets[bisect_left(self.bounds, value)] += 1
        self.sum += value

    def add(self, other: Histogram) -> None:
        buckets = self.buckets
        for index, count in enumerate(other.buckets):
            buckets[index] += count
        self.sum += other.sum

    def copy(self) -> Histogram:
        copy = Histogram(self.bounds)
        copy.buckets = list(self.buckets)
        copy.sum = self.sum
        return copy

    def cumulative(self) -> list[tuple[str, int]]:
        """(le, observations <= le) per bound, then ("+Inf", all): Prometheus' buckets."""
        running = 0
        pairs: list[tuple[str, int]] = []
        for bound, count in zip((*map(float_text, self.bounds), "+Inf"), self.buckets):
            running += count
            pairs.append((bound, running))
        return pairs


def float_text(value: float) -> str:
    """A bucket bound as Prometheus' clients write it (`0.005`, `1.0`, `3600.0`)."""
    return repr(float(value))


def observe_both(values: list[float], mine: Histogram, total: Histogram) -> None:
    """Observe each value in two histograms of the same bounds (a queue's and the broker's)."""
    bounds, one, two = mine.bounds, mine.buckets, total.buckets
    for value in values:
        index = bisect_left(bounds, value)
        one[index] += 1
        two[index] += 1
    added = sum(values)
    mine.sum += added
    total.sum += added


class Series:
    """What one queue (or the aggregate `other`) did: a count per move, waits and runs."""

    __slots__ = ("counts", "wait", "run", "active_at")

    def __init__(self, now: float = 0.0) -> None:
        self.counts = [0] * len(MOVES)
        self.wait = Histogram(TASK_BUCKETS_SECS)
        self.run = Histogram(TASK_BUCKETS_SECS)
        self.active_at = now

    def add(self, other: Series) -> None:
        for index, count in enumerate(other.counts):
            self.counts[index] += count
        self.wait.add(other.wait)
        self.run.add(other.run)

    def copy(self) -> Series:
        copy = Series(self.active_at)
        copy.add(self)
        return copy


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The broker-wide totals at one moment, for the history's differences."""

    moves: tuple[int, ...]
    wait: tuple[int, ...]  # bucket counts (not cumulative)
    run: tuple[int, ...]
    commit: tuple[int, ...]


class Observations:
    """The broker-wide aggregate of committed passes (see the module docstring)."""

    def __init__(self, max_queue_series: int = DEFAULT_METRICS_QUEUE_SERIES, idle_secs: float = IDLE_SECS) -> None:
        if isinstance(max_queue_series, bool) or not isinstance(max_queue_series, int) or not (
            0 <= max_queue_series <= MAX_METRICS_QUEUE_SERIES
        ):
            raise ValueError(
                f"max_queue_series must be an integer in [0, {MAX_METRICS_QUEUE_SERIES}], got {max_queue_series!r}"
            )
        if not idle_secs > 0:
            raise ValueError(f"idle_secs must be above 0, got {idle_secs!r}")
        self.max_queue_series = max_queue_series
        self.idle_secs = idle_secs
        self.series: dict[str, Series] = {}  # queue → its series, in the order they were given out
        self.other = Series()
        self.retired = Series()  # what queues counted before they gave their series up
        self.moves = [0] * len(MOVES)  # broker-wide
        self.wait = Histogram(TASK_BUCKETS_SECS)
        self.run = Histogram(TASK_BUCKETS_SECS)
        self.commit = Histogram(COMMIT_BUCKETS_SECS)
        self.passes = 0  # committed passes added

    def add_pass(self, tally: Tally, commit_secs: float | None, now: float) -> None:
        """A pass committed: add what it did (`commit_secs` None: it wrote nothing, its commit is not timed)."""
        self.passes += 1
        if commit_secs is not None:
            self.commit.observe(max(commit_secs, 0.0))
        if not tally:
            return
        moves = self.moves
        for queue, row in tally.counts.items():
            series = self._series_of(queue, now)
            series.active_at = now
            counts = series.counts
            for index, count in enumerate(row):
                if count:
                    counts[index] += count
                    moves[index] += count
        series_of = self.series.get
        other = self.other
        for queue, values in tally.wait_secs.items():
            observe_both(values, (series_of(queue) or other).wait, self.wait)
        for queue, values in tally.run_secs.items():
            observe_both(values, (series_of(queue) or other).run, self.run)

    def _series_of(self, queue: str, now: float) -> Series:
        series = self.series.get(queue)
        if series is not None:
            return series
        if len(self.series) < self.max_queue_series and queue != OTHER:
            series = self.series[queue] = Series(now)
            return series
        return self.other

    def evict_idle(self, now: float, holds_tasks: Callable[[str], bool]) -> list[str]:
        """Give up the series of queues idle for `idle_secs` that hold no task; returns their names."""
        idle = [
            name for name, series in self.series.items()
            if now - series.active_at >= self.idle_secs and not holds_tasks(name)
        ]
        for name in idle:
            self.retired.add(self.series.pop(name))
        return idle

    def fold(self, visible: Callable[[str], bool]) -> tuple[dict[str, Series], Series]:
        """The series a viewer who sees only the queues `visible` accepts is shown: its queues' own,
        and `other` with everything else folded in (the queues it does not see, and every queue
        that gave its series up, so that its `other` never goes down)."""
        shown: dict[str, Series] = {}
        other = self.other.copy()
        other.add(self.retired)
        for name, series in self.series.items():
            if visible(name):
                shown[name] = series
            else:
                other.add(series)
        return shown, other

    def snapshot(self) -> Snapshot:
        return Snapshot(
            tuple(self.moves), tuple(self.wait.buckets), tuple(self.run.buckets), tuple(self.commit.buckets)
        )

