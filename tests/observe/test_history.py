"""The last hour (observe/history.py): a point per step from the differences of the broker's totals,
rates per second over the step and percentiles estimated from the histograms' buckets. Fake clocks."""

from __future__ import annotations

from typing import Any

import pytest

from kittiwake.engine.tally import DEQUEUED, ENQUEUED, LEASED, Tally
from kittiwake.observe.history import MAX_POINTS, History, HistorySampler, quantile
from kittiwake.observe.observations import Observations

WALL = 1_700_000_000.0


class Clock:
    def __init__(self) -> None:
        self.wall = WALL
        self.monotonic = 50.0

    def advance(self, secs: float) -> None:
        self.wall += secs
        self.monotonic += secs


def moves(queue: str, **counts: int) -> Tally:
    tally = Tally()
    for move, count in counts.items():
        tally.count(queue, {"enqueued": ENQUEUED, "leased": LEASED, "dequeued": DEQUEUED}[move], count)
    return tally


def test_the_first_sample_is_a_baseline_and_each_next_one_a_point_of_rates() -> None:
    clock, history, observations = Clock(), History(), Observations()
    assert history.sample(clock.wall, clock.monotonic, observations.snapshot()) is None
    observations.add_pass(moves("q", enqueued=50, leased=20), None, 0.0)
    clock.advance(10.0)
    point = history.sample(clock.wall, clock.monotonic, observations.snapshot())
    assert point is not None and point["t"] == WALL + 10.0
    assert (point["enqueued"], point["leased"], point["dequeued"]) == (5.0, 2.0, 0.0)
    assert point["wait_p50"] is None and point["commit_p95"] is None  # nothing observed in the step
    observations.add_pass(moves("q", dequeued=30), None, 0.0)
    clock.advance(15.0)  # a late tick: the rate is over the time that passed
    point = history.sample(clock.wall, clock.monotonic, observations.snapshot())
    assert point is not None and (point["enqueued"], point["dequeued"]) == (0.0, 2.0)
    assert [p["t"] for p in history.view()["points"]] == [WALL + 10.0, WALL + 25.0]
    assert history.view()["step_secs"] == 10


def test_percentiles_come_from_the_step_only() -> None:
    clock, history, observations = Clock(), History(), Observations()
    slow = Tally()
    for _ in range(100):
        slow.waited("q", 100.0)  # in the (60, 120] bucket
    slow.count("q", LEASED, 100)
    observations.add_pass(slow, 0.5, 0.0)
    history.sample(clock.wall, clock.monotonic, observations.snapshot())
    fast = Tally()
    for index in range(100):
        fast.waited("q", 0.001 if index < 90 else 0.3)  # 90 in the first bucket, 10 in (0.25, 0.5]
    fast.count("q", LEASED, 100)
    observations.add_pass(fast, 0.0002, 0.0)
    clock.advance(10.0)
    point = history.sample(clock.wall, clock.monotonic, observations.snapshot())
    assert point is not None
    assert point["wait_p50"] == pytest.approx(0.001 * 50 / 90)  # within [0, 1 ms], by linear interpolation
    assert point["wait_p95"] == pytest.approx(0.25 + 0.25 * 0.5)  # rank 95: half way through (0.25, 0.5]
    assert point["commit_p50"] == pytest.approx(0.00025 - 0.00015 * 0.5)
    assert point["run_p50"] is None


def test_quantile_estimates() -> None:
    bounds = (1.0, 2.0, 4.0)
    assert quantile(0.5, bounds, [0, 0, 0, 0]) is None
    assert quantile(0.5, bounds, [0, 4, 0, 0]) == 1.5
    assert quantile(1.0, bounds, [0, 0, 2, 0]) == 4.0
    assert quantile(0.5, bounds, [0, 0, 0, 3]) == 4.0  # above every bound: the largest bound
    assert quantile(0.25, bounds, [1, 0, 0, 3]) == 1.0


def test_an_hour_of_points_at_most_oldest_first() -> None:
    clock, history, observations = Clock(), History(), Observations()
    history.sample(clock.wall, clock.monotonic, observations.snapshot())
    for _ in range(MAX_POINTS + 5):
        clock.advance(10.0)
        history.sample(clock.wall, clock.monotonic, observations.snapshot())
    times = [point["t"] for point in history.view()["points"]]
    assert len(times) == MAX_POINTS and times == sorted(times) and times[-1] == clock.wall


def test_a_clock_that_did_not_move_makes_no_point() -> None:
    clock, history, observations = Clock(), History(), Observations()
    history.sample(clock.wall, clock.monotonic, observations.snapshot())
    observations.add_pass(moves("q", enqueued=7), None, 0.0)
    assert history.sample(clock.wall, clock.monotonic, observations.snapshot()) is None
    clock.advance(1.0)
    point = history.sample(clock.wall, clock.monotonic, observations.snapshot())
    assert point is not None and point["enqueued"] == 7.0


def test_listeners_get_each_new_point_until_they_leave() -> None:
    clock, history, observations = Clock(), History(), Observations()
    seen: list[dict[str, Any]] = []
    unsubscribe = history.subscribe(seen.append)
    history.sample(clock.wall, clock.monotonic, observations.snapshot())
    clock.advance(10.0)
    history.sample(clock.wall, clock.monotonic, observations.snapshot())
    unsubscribe()
    clock.advance(10.0)
    history.sample(clock.wall, clock.monotonic, observations.snapshot())
    assert len(seen) == 1 and seen[0]["t"] == WALL + 10.0


class Handle:
    cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class RecordingLoop:
    """Records what the sampler asks for; the test runs the ticks."""

    def __init__(self) -> None:
        self.delays: list[float] = []
        self.handles: list[Handle] = []

    def call_later(self, delay: float, callback: Any, *args: Any) -> Handle:
        self.delays.append(delay)
        self.handles.append(Handle())
        return self.handles[-1]


def test_the_sampler_ticks_at_multiples_of_the_step_and_does_its_upkeep() -> None:
    clock, history, observations = Clock(), History(), Observations()
    clock.advance(3.25)
    upkeep: list[int] = []
    sampler = HistorySampler(history, observations.snapshot, also=lambda: upkeep.append(1),
                             wall_clock=lambda: clock.wall, monotonic_clock=lambda: clock.monotonic)
    loop = RecordingLoop()
    sampler.start(loop)  # type: ignore[arg-type]
    assert loop.delays == [pytest.approx(6.75)] and upkeep == [1]
    clock.advance(6.75)
    sampler._tick(loop)  # type: ignore[arg-type]
    assert loop.delays[-1] == 10.0 and len(history.points) == 1
    sampler.stop()
    assert loop.handles[-1].cancelled and not loop.handles[0].cancelled


def test_a_timer_that_fires_a_moment_early_does_not_make_a_second_point() -> None:
    """The event loop may run a timer up to its clock's resolution early: just before a multiple of
    the step. The next tick is then the multiple after, not a millisecond later (which made a
    burst of points a millisecond apart, drawn as drops to zero)."""
    clock, history, observations = Clock(), History(), Observations()
    sampler = HistorySampler(history, observations.snapshot,
                             wall_clock=lambda: clock.wall, monotonic_clock=lambda: clock.monotonic)
    loop = RecordingLoop()
    clock.advance(5.0 - clock.wall % 10.0 + 10.0)  # mid-step
    sampler.start(loop)  # type: ignore[arg-type]
    clock.advance(loop.delays[-1] - 0.0005)  # fired half a millisecond early
    sampler._tick(loop)  # type: ignore[arg-type]
    assert loop.delays[-1] == pytest.approx(10.0005)
    assert len(history.points) == 1
