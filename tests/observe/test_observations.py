"""The aggregate behind /metrics (observe/observations.py): bounded queue series that only go up,
`other` for the rest, idle series given up, histograms with inclusive bounds. Pure: `now` is passed in."""

from __future__ import annotations

from pathlib import Path

import pytest

import kittiwake.observe.observations as observations_module
from engine.test_sans_io import imported_modules
from kittiwake.engine.tally import DEAD_LETTERED, DEQUEUED, ENQUEUED, LEASED, MOVES, Tally
from kittiwake.observe.observations import (
    COMMIT_BUCKETS_SECS,
    OTHER,
    TASK_BUCKETS_SECS,
    Histogram,
    Observations,
    Series,
)


def tally(*moves: tuple[str, int, int]) -> Tally:
    made = Tally()
    for queue, move, count in moves:
        made.count(queue, move, count)
    return made


def enqueued(series: Series) -> int:
    return series.counts[ENQUEUED]


def test_the_first_queues_to_act_get_series_and_the_rest_go_to_other() -> None:
    observations = Observations(max_queue_series=2)
    observations.add_pass(tally(("a", ENQUEUED, 1)), None, 0.0)
    observations.add_pass(tally(("b", ENQUEUED, 2), ("c", ENQUEUED, 4)), None, 1.0)
    observations.add_pass(tally(("c", ENQUEUED, 8), ("a", LEASED, 1)), None, 2.0)
    assert list(observations.series) == ["a", "b"]
    assert enqueued(observations.series["a"]) == 1 and enqueued(observations.series["b"]) == 2
    assert enqueued(observations.other) == 12 and observations.series["a"].counts[LEASED] == 1
    assert observations.moves[ENQUEUED] == 15 and observations.passes == 3


def test_a_queue_named_other_is_counted_in_the_aggregate() -> None:
    observations = Observations()
    observations.add_pass(tally((OTHER, DEQUEUED, 3)), None, 0.0)
    assert OTHER not in observations.series and observations.other.counts[DEQUEUED] == 3


def test_an_idle_empty_queue_gives_its_series_up_and_a_new_one_takes_the_place() -> None:
    observations = Observations(max_queue_series=2, idle_secs=600.0)
    observations.add_pass(tally(("a", ENQUEUED, 1), ("b", ENQUEUED, 1)), None, 0.0)
    observations.add_pass(tally(("b", DEQUEUED, 1)), None, 100.0)
    observations.add_pass(tally(("c", ENQUEUED, 5)), None, 200.0)  # no room: other
    holding = {"a"}
    assert observations.evict_idle(599.0, lambda name: name in holding) == []
    assert observations.evict_idle(650.0, lambda name: name in holding) == []  # a holds a task; b acted at 100
    assert observations.evict_idle(700.0, lambda name: name in holding) == ["b"]
    assert list(observations.series) == ["a"]
    assert observations.retired.counts[ENQUEUED] == 1 and observations.retired.counts[DEQUEUED] == 1
    observations.add_pass(tally(("c", ENQUEUED, 1)), None, 701.0)
    assert list(observations.series) == ["a", "c"]
    assert enqueued(observations.series["c"]) == 1  # from when it got its series
    assert enqueued(observations.other) == 5  # what it did before stays in other, which never goes down
    holding.clear()
    assert observations.evict_idle(1300.0, lambda name: False) == ["a"]


def test_a_viewer_who_sees_some_queues_gets_the_rest_in_an_other_that_never_goes_down() -> None:
    observations = Observations(max_queue_series=3)
    observations.add_pass(tally(("mine.a", ENQUEUED, 1), ("theirs", ENQUEUED, 2), ("mine.b", ENQUEUED, 4)), None, 0.0)
    observations.add_pass(tally(("spill", ENQUEUED, 8)), None, 0.0)
    mine = lambda name: name.startswith("mine.")  # noqa: E731
    shown, other = observations.fold(mine)
    assert sorted(shown) == ["mine.a", "mine.b"] and enqueued(other) == 2 + 8
    before = enqueued(other)
    observations.evict_idle(10_000.0, lambda name: name == "mine.a")  # theirs and mine.b give their series up
    shown, other = observations.fold(mine)
    assert sorted(shown) == ["mine.a"]
    assert enqueued(other) == 2 + 8 + 4 >= before  # mine.b's series ended; other grew, theirs moved within it
    everything, other_of_all = observations.fold(lambda name: True)
    assert sorted(everything) == ["mine.a"] and enqueued(other_of_all) == 8 + 2 + 4
    assert enqueued(observations.other) == 8  # the unrestricted view: its own other, as counted


def test_waits_and_runs_go_to_their_queue_and_to_the_broker_totals() -> None:
    observations = Observations(max_queue_series=1)
    made = tally(("a", LEASED, 2), ("a", DEQUEUED, 1), ("b", LEASED, 1))
    made.waited("a", 0.005)  # on a bound: in its bucket (le is inclusive)
    made.waited("a", 7200.0)  # above every bound
    made.ran("a", 0.2)
    made.waited("b", 0.0)
    observations.add_pass(made, 0.003, 0.0)
    wait = observations.series["a"].wait
    assert wait.count == 2 and wait.sum == 7200.005
    cumulative = dict(wait.cumulative())
    assert cumulative["0.0025"] == 0 and cumulative["0.005"] == 1 and cumulative["3600.0"] == 1
    assert cumulative["+Inf"] == 2
    assert observations.other.wait.count == 1 and observations.wait.count == 3
    assert observations.run.count == 1 and observations.series["a"].run.sum == 0.2
    assert observations.commit.count == 1 and dict(observations.commit.cumulative())["0.0025"] == 0
    assert dict(observations.commit.cumulative())["0.005"] == 1


def test_a_pass_that_wrote_nothing_is_not_timed_and_an_empty_tally_changes_nothing() -> None:
    observations = Observations()
    observations.add_pass(Tally(), None, 0.0)
    assert observations.commit.count == 0 and observations.passes == 1 and not observations.series
    snapshot = observations.snapshot()
    assert snapshot.moves == (0,) * len(MOVES) and len(snapshot.commit) == len(COMMIT_BUCKETS_SECS) + 1


def test_histogram_buckets_and_copies() -> None:
    histogram = Histogram(TASK_BUCKETS_SECS)
    for value in (0.0, 0.001, 0.0011, 3600.0, 3600.1):
        histogram.observe(value)
    pairs = histogram.cumulative()
    assert pairs[0] == ("0.001", 2) and pairs[1] == ("0.0025", 3) and pairs[-2] == ("3600.0", 4)
    assert pairs[-1] == ("+Inf", 5)
    copy = histogram.copy()
    copy.observe(1.0)
    assert histogram.count == 5 and copy.count == 6


@pytest.mark.parametrize("bad", [-1, 100_001, 1.5, True, "200"])
def test_the_series_bound_is_checked(bad: object) -> None:
    with pytest.raises(ValueError, match="max_queue_series"):
        Observations(max_queue_series=bad)  # type: ignore[arg-type]


def test_dead_letters_count_on_the_queue_they_came_from() -> None:
    observations = Observations()
    observations.add_pass(tally(("jobs", DEAD_LETTERED, 2)), None, 0.0)
    assert observations.series["jobs"].counts[DEAD_LETTERED] == 2 and "jobs.dead" not in observations.series


def test_the_aggregate_is_sans_io() -> None:
    modules = imported_modules(Path(observations_module.__file__).read_text(encoding="utf-8"))
    io = {"time", "asyncio", "socket", "threading", "os", "sqlite3"}
    assert not {name for name in modules if name.split(".")[0] in io}, modules
