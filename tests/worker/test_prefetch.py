"""The prefetch a worker process sizes from the run times it observes (`kittiwake.worker.prefetch`)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kittiwake.worker.prefetch import AHEAD_SECS, FLOOR_SECS, MOST_AHEAD, SLOW_SECS, WINDOW, Prefetch


def ramped(prefetch: Prefetch, leases: int = 20) -> Prefetch:
    """As after `leases` leases the broker filled."""
    for _ in range(leases):
        prefetch.leased(prefetch.total(), prefetch.total())
    return prefetch


def test_before_any_run_it_leases_for_the_slots_only() -> None:
    prefetch = Prefetch(4)
    assert prefetch.ahead() == 0
    assert prefetch.total() == 4


def test_null_tasks_lease_the_most_ahead_after_a_slow_start() -> None:
    prefetch = Prefetch(1)
    prefetch.observe(0.00001)
    reaches = []
    for _ in range(12):
        reaches.append(prefetch.ahead())
        prefetch.leased(prefetch.total(), prefetch.total())
    assert reaches[0] == 1  # the reach starts at the slots and doubles per filled lease
    assert reaches == sorted(reaches)
    assert prefetch.ahead() == MOST_AHEAD


def test_a_lease_the_broker_did_not_fill_does_not_grow_the_reach() -> None:
    prefetch = Prefetch(2)
    prefetch.observe(0.00001)
    prefetch.leased(10, 3)
    assert prefetch.ahead() == 2


def test_long_tasks_are_not_leased_ahead() -> None:
    prefetch = ramped(Prefetch(4))
    prefetch.observe(1.0)
    assert prefetch.ahead() == 0
    assert prefetch.total() == 4


def test_the_prefetch_follows_the_mean_run_time_of_the_window() -> None:
    prefetch = ramped(Prefetch(1))
    prefetch.observe(0.005)  # one null task measured across a thread switch
    for _ in range(WINDOW - 1):
        prefetch.observe(0.00001)
    mean = max((0.005 + (WINDOW - 1) * 0.00001) / WINDOW, FLOOR_SECS)
    assert abs(prefetch.ahead() - AHEAD_SECS / mean) <= 1


def test_tasks_slow_on_average_are_not_leased_ahead() -> None:
    prefetch = ramped(Prefetch(8))
    for _ in range(WINDOW):
        prefetch.observe(SLOW_SECS * 1.01)
    assert prefetch.ahead() == 0  # by time alone it would be 7


def test_work_ahead_is_for_the_slots_not_stuck_on_slow_runs() -> None:
    prefetch = ramped(Prefetch(4))
    prefetch.observe(0.001)
    assert abs(prefetch.ahead() - AHEAD_SECS * 4 / 0.001) <= 1
    assert abs(prefetch.ahead(stuck=3) - AHEAD_SECS * 1 / 0.001) <= 1
    assert prefetch.ahead(stuck=4) == 0
    assert prefetch.total(stuck=4) == 4


def test_work_held_ahead_is_about_ahead_secs_per_slot() -> None:
    prefetch = ramped(Prefetch(4))
    prefetch.observe(0.01)
    assert prefetch.ahead() == int(AHEAD_SECS * 4 / 0.01)


def test_a_fixed_prefetch_ignores_the_run_times() -> None:
    prefetch = Prefetch(2, fixed=7)
    assert prefetch.ahead() == 7
    prefetch.observe(5.0)
    assert prefetch.total() == 9
    assert not prefetch.adaptive


@pytest.mark.parametrize("kwargs", [{"slots": 0}, {"slots": 1, "fixed": -1}, {"slots": 1, "ahead_secs": 0.0},
                                    {"slots": 1, "window": 0}])
def test_bad_settings_are_refused(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        Prefetch(**kwargs)


@given(st.integers(1, 16), st.lists(st.floats(0.0, 10.0), max_size=200), st.lists(st.tuples(st.integers(0, 5000), st.integers(0, 5000)), max_size=40))
def test_the_prefetch_stays_within_its_bounds(slots: int, runs: list[float], leases: list[tuple[int, int]]) -> None:
    prefetch = Prefetch(slots)
    for (asked, got), run in zip(leases, runs):
        prefetch.leased(asked, got)
        prefetch.observe(run)
    ahead = prefetch.ahead()
    assert 0 <= ahead <= MOST_AHEAD
    assert prefetch.total() == slots + ahead
    recent = runs[: min(len(leases), len(runs))][-WINDOW:]
    if recent and sum(recent) / len(recent) > AHEAD_SECS * slots:
        assert ahead == 0
    assert prefetch.ahead(stuck=slots) == 0
