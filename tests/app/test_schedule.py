"""Periodic ticks as pure functions of a time: fixed intervals and cron expressions, in UTC."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from kittiwake.app.envelope import marker_pid_of_tick_pid, tick_marker_pid, tick_pid
from kittiwake.app.schedule import Cron, Every, make_schedule


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=timezone.utc)


def test_every_is_aligned_to_the_epoch_so_every_scheduler_agrees() -> None:
    every = Every(60)
    assert every.last_tick(at("2024-05-01T12:00:59")) == at("2024-05-01T12:00:00")
    assert every.last_tick(at("2024-05-01T12:00:00")) == at("2024-05-01T12:00:00")
    assert every.next_tick(at("2024-05-01T12:00:00")) == at("2024-05-01T12:01:00")
    assert Every(7).last_tick(at("1970-01-01T00:00:20")) == at("1970-01-01T00:00:14")


@pytest.mark.parametrize(
    ("expression", "now", "last", "following"),
    [
        ("*/15 * * * *", "2024-05-01T12:07:30", "2024-05-01T12:00:00", "2024-05-01T12:15:00"),
        ("30 9 * * mon-fri", "2024-05-04T10:00:00", "2024-05-03T09:30:00", "2024-05-06T09:30:00"),  # a Saturday
        ("0 0 1 * *", "2024-03-15T00:00:00", "2024-03-01T00:00:00", "2024-04-01T00:00:00"),
        ("0 12 29 2 *", "2024-03-01T00:00:00", "2024-02-29T12:00:00", "2028-02-29T12:00:00"),
        ("@hourly", "2024-05-01T12:59:59", "2024-05-01T12:00:00", "2024-05-01T13:00:00"),
        ("0 6 13 * 5", "2024-09-14T00:00:00", "2024-09-13T06:00:00", "2024-09-20T06:00:00"),  # 13th or a Friday
        ("5,10-12 0 * jan,jul 0", "2024-07-07T00:11:00", "2024-07-07T00:11:00", "2024-07-07T00:12:00"),
        ("0 0 * * 7", "2024-05-06T00:00:00", "2024-05-05T00:00:00", "2024-05-12T00:00:00"),  # 7 is Sunday
    ],
)
def test_cron(expression: str, now: str, last: str, following: str) -> None:
    cron = Cron.parse(expression)
    assert cron.last_tick(at(now)) == at(last)
    assert cron.next_tick(at(now)) == at(following)


@pytest.mark.parametrize("expression", ["* * * *", "60 * * * *", "* 24 * * *", "*/0 * * * *", "5-1 * * * *", "x * * * *"])
def test_bad_cron_is_refused(expression: str) -> None:
    with pytest.raises(ValueError):
        Cron.parse(expression)


def test_make_schedule_takes_exactly_one_of_every_and_cron() -> None:
    with pytest.raises(ValueError):
        make_schedule()
    with pytest.raises(ValueError):
        make_schedule(every=5, cron="* * * * *")
    with pytest.raises(ValueError):
        make_schedule(every=0.5)
    assert make_schedule(every=5) == Every(5)


def test_tick_pids_and_markers() -> None:
    tick = at("2024-05-01T12:00:00")
    assert tick_pid("reports.daily", tick) == "reports.daily@2024-05-01T12:00:00Z"
    assert tick_marker_pid("reports.daily", tick) == "2024-05-01T12:00:00Z@reports.daily"
    assert marker_pid_of_tick_pid(tick_pid("reports.daily", tick)) == tick_marker_pid("reports.daily", tick)
