"""The reconnect schedule both pools follow (`client/backoff.py`), read under a fake clock."""

from __future__ import annotations

import pytest

from kittiwake.client.backoff import (
    MAX_CONNECT_ATTEMPT_SECS,
    MAX_DELAY_SECS,
    MIN_CONNECT_ATTEMPT_SECS,
    Attempt,
    connect_attempts,
)


class FakeClock:
    """Seconds that pass only when told to."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def run(budget_secs: float, attempt_cost_secs: float, limit: int = 1000) -> list[Attempt]:
    """Every attempt of a schedule whose pauses are slept in full and whose attempts each fail after
    `attempt_cost_secs`."""
    clock = FakeClock()
    made: list[Attempt] = []
    for attempt in connect_attempts(budget_secs, clock):
        clock.now += attempt.pause_secs
        made.append(attempt)
        clock.now += min(attempt_cost_secs, attempt.timeout_secs)
        assert len(made) < limit, "the schedule did not end"
    return made


def test_the_first_attempt_comes_at_once_then_the_pauses_double_to_the_ceiling() -> None:
    made = run(budget_secs=10.0, attempt_cost_secs=0.0)
    assert [a.number for a in made] == list(range(len(made)))
    assert made[0].pause_secs == 0.0
    assert [a.pause_secs for a in made[1:8]] == [0.05, 0.1, 0.2, 0.4, 0.8, 1.6, MAX_DELAY_SECS]
    assert sum(a.pause_secs for a in made) == pytest.approx(10.0)  # the last pause is clipped to the budget
    assert made[-1].timeout_secs == MIN_CONNECT_ATTEMPT_SECS  # a last try at the deadline


def test_each_attempt_is_bounded_by_the_cap_and_by_what_is_left() -> None:
    made = run(budget_secs=5.0, attempt_cost_secs=10.0)  # a black-holed address: every attempt times out
    assert made[0].timeout_secs == MAX_CONNECT_ATTEMPT_SECS
    assert all(MIN_CONNECT_ATTEMPT_SECS <= a.timeout_secs <= MAX_CONNECT_ATTEMPT_SECS for a in made)
    assert len(made) >= 3, "several attempts within the budget"
    spent = sum(a.pause_secs + a.timeout_secs for a in made)
    assert spent <= 5.0 + MIN_CONNECT_ATTEMPT_SECS + 1e-9


def test_a_spent_budget_still_makes_one_attempt() -> None:
    made = run(budget_secs=0.0, attempt_cost_secs=0.0)
    assert made == [Attempt(0, 0.0, MIN_CONNECT_ATTEMPT_SECS)]


def test_the_clock_is_read_when_the_next_attempt_is_asked_for() -> None:
    clock = FakeClock()
    schedule = connect_attempts(1.0, clock)
    assert next(schedule).pause_secs == 0.0  # the budget starts here
    clock.now += 0.98  # the attempt took most of it
    following = next(schedule)
    assert following.pause_secs == pytest.approx(0.02)  # 50 ms would overrun: clipped
    assert following.timeout_secs == MIN_CONNECT_ATTEMPT_SECS
    clock.now += 0.02
    assert list(schedule) == []
