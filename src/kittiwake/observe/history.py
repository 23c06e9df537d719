"""The last hour of the broker, one point per 10 seconds: `GET /api/history`.

Every `STEP_SECS` a timer (`HistorySampler`, started by the `Observer`) takes
a `Snapshot` of the broker-wide totals (`observations.Observations`) and
`History.sample` turns the difference from the one before into a point:

    {"t": unix secs at the end of the step,
     "enqueued", "leased", "dequeued", "released", "dead_lettered", "expired": per second over the step,
     "wait_p50", "wait_p95", "run_p50", "run_p95", "commit_p50", "commit_p95": seconds, or None}

The percentiles are estimated from the histograms' bucket counts added in the
step, as Prometheus' `histogram_quantile` does: linear within the bucket the
rank falls in; the largest finite bound when it falls above every bound; None
when nothing was observed. At most `MAX_POINTS` points (an hour) are kept,
oldest first; the step under way is not one. The first sample only sets the
baseline. Pure but for `HistorySampler`: clocks are passed in.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from typing import Any, Callable, Sequence

from kittiwake.engine.tally import MOVES
from kittiwake.observe.observations import COMMIT_BUCKETS_SECS, TASK_BUCKETS_SECS, Snapshot

log = logging.getLogger("kittiwake.observe")

STEP_SECS = 10.0
MAX_POINTS = 360  # an hour
QUANTILES = (("p50", 0.5), ("p95", 0.95))

Point = dict[str, Any]


def quantile(q: float, bounds: Sequence[float], buckets: Sequence[int]) -> float | None:
    """The q-quantile of observations counted per bucket (`buckets` has one more entry than
    `bounds`: above the last bound), interpolated linearly inside its bucket; None when empty."""
    total = sum(buckets)
    if total <= 0:
        return None
    rank = q * total
    seen = 0
    for index, count in enumerate(buckets):
        if count and seen + count >= rank:
            if index >= len(bounds):
                return float(bounds[-1])  # above every bound: the largest one is all we know
            lower = bounds[index - 1] if index else 0.0
            return lower + (bounds[index] - lower) * ((rank - seen) / count)
        seen += count
    return float(bounds[-1])


def _difference(now: Sequence[int], before: Sequence[int]) -> list[int]:
    return [max(a - b, 0) for a, b in zip(now, before)]


class History:
    """The points of the last hour (see the module docstring)."""

    def __init__(self, step_secs: float = STEP_SECS, max_points: int = MAX_POINTS) -> None:
        self.step_secs = step_secs
        self.points: deque[Point] = deque(maxlen=max_points)
        self._last: tuple[float, Snapshot] | None = None  # (monotonic time, totals) of the last sample
        self._listeners: list[Callable[[Point], None]] = []

    def sample(self, wall_now: float, monotonic_now: float, snapshot: Snapshot) -> Point | None:
        """Close the step ending now: the point it makes (None for the first sample: a baseline)."""
        last, self._last = self._last, (monotonic_now, snapshot)
        if last is None:
            return None
        then, before = last
        elapsed = monotonic_now - then
        if elapsed <= 0:
            self._last = last  # a clock that did not move: the step goes on
            return None
        point: Point = {"t": round(wall_now, 3)}
        for name, now_count, before_count in zip(MOVES, snapshot.moves, before.moves):
            point[name] = max(now_count - before_count, 0) / elapsed
        for name, bounds, now_buckets, before_buckets in (
            ("wait", TASK_BUCKETS_SECS, snapshot.wait, before.wait),
            ("run", TASK_BUCKETS_SECS, snapshot.run, before.run),
            ("commit", COMMIT_BUCKETS_SECS, snapshot.commit, before.commit),
        ):
            added = _difference(now_buckets, before_buckets)
            for suffix, q in QUANTILES:
                point[f"{name}_{suffix}"] = quantile(q, bounds, added)
        self.points.append(point)
        for listener in list(self._listeners):
            listener(point)
        return point

    def view(self) -> dict[str, Any]:
        """`GET /api/history`'s answer."""
        step = self.step_secs
        return {"step_secs": int(step) if float(step).is_integer() else step, "points": list(self.points)}

    def subscribe(self, listener: Callable[[Point], None]) -> Callable[[], None]:
        """Call `listener` with each new point (a stream's `history` event); returns the unsubscribe."""
        self._listeners.append(listener)

        def unsubscribe() -> None:
            if listener in self._listeners:
                self._listeners.remove(listener)

        return unsubscribe


class HistorySampler:
    """The timer behind `History`: samples at each multiple of the step on the wall clock."""

    def __init__(
        self,
        history: History,
        snapshot: Callable[[], Snapshot],
        *,
        also: Callable[[], None] | None = None,
        wall_clock: Callable[[], float] = time.time,
        monotonic_clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.history = history
        self.snapshot = snapshot
        self.also = also  # more upkeep on the same timer (the metrics' idle series)
        self.wall_clock = wall_clock
        self.monotonic_clock = monotonic_clock
        self._handle: asyncio.TimerHandle | None = None

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._tick(loop)

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def sample(self) -> Point | None:
        """Close the step now (what each tick does): the point made, if any."""
        point = self.history.sample(self.wall_clock(), self.monotonic_clock(), self.snapshot())
        if self.also is not None:
            self.also()
        return point

    def _tick(self, loop: asyncio.AbstractEventLoop) -> None:
        step = self.history.step_secs
        delay = step - self.wall_clock() % step
        if delay < step / 2:  # fired on time, or a moment early (a loop runs timers up to its resolution early)
            delay += step
        self._handle = loop.call_later(delay, self._tick, loop)
        try:
            self.sample()
        except Exception:
            log.exception("sampling the history failed; the next step tries again")
