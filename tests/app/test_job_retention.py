"""Job records' retention (`kittiwake.app.job_retention`): the app that writes records removes the
ones past `job_retention_secs`, at most once a minute, after a submit — against a real broker, with
the app's clock (which dates the records) moved by hand. `broker` is conftest's (also run on
PostgreSQL when the suite is told to)."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any, Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kittiwake import Client
from kittiwake.app import App
from kittiwake.app.job_records import job_record, new_job_id, record_task
from kittiwake.app.job_retention import (
    PRUNE_EVERY_SECS,
    PRUNE_PAGE,
    PRUNE_PAGES,
    Pruner,
    cutoff_pid,
    validate_retention,
)
from support.auth_users import ROOT, write_auth_file
from support.broker_process import BrokerProcess

DAY = 86_400.0


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def client(broker: BrokerProcess) -> Iterator[Client]:
    with Client(broker.url) as connected:
        yield connected


def app_on(url: str, clock: Clock, registry: str, **options: Any) -> App:
    app = App(url, clock=clock, job_registry=registry, **options)
    app.task(queue=f"{registry}.work", name=f"{registry}.work")(lambda value: value)
    return app


def submit(app: App, registry: str) -> str:
    job = app.job()
    job.add(f"{registry}.work", 1)
    job.submit()
    return job.id


def records(client: Client, registry: str) -> list[str]:
    return [view.pid for view in client.peek(registry, 10_000)]


def test_records_past_their_retention_go_at_the_next_round(broker: BrokerProcess, client: Client) -> None:
    registry = "retained.jobs"
    clock = Clock(time.time() - 10 * DAY)
    app = app_on(broker.url, clock, registry, job_retention_secs=DAY)
    try:
        old = sorted(submit(app, registry) for _ in range(3))  # the first submit's round finds nothing old
        clock.now += DAY - 1
        young = submit(app, registry)  # a round runs (a day since the last), but nothing is a day old yet
        assert records(client, registry) == [*old, young]
        clock.now += PRUNE_EVERY_SECS / 2
        submit(app, registry)  # the old ones are past a day now, but the next round is not due
        assert records(client, registry)[:3] == old
        clock.now += PRUNE_EVERY_SECS / 2
        latest = submit(app, registry)
        remaining = records(client, registry)
        assert remaining[0] == young and remaining[-1] == latest and not set(old) & set(remaining)
        assert len(remaining) == 3
        assert client.stats([f"{registry}.work"], sample=0)[0].size == 6  # the jobs' tasks stay: records only
    finally:
        app.close()


def test_a_backlog_goes_a_round_s_worth_at_a_time(broker: BrokerProcess, client: Client) -> None:
    registry = "backlog.jobs"
    now = time.time()
    backlog = PRUNE_PAGE * PRUNE_PAGES + 50
    written = [new_job_id(now - 30 * DAY + index) for index in range(backlog)]
    for start in range(0, backlog, 500):
        client.enqueue_many([record_task(registry, job_record(job_id, "old", 0.0, [registry], [(registry, "x")]))
                             for job_id in written[start : start + 500]])
    clock = Clock(now)
    app = app_on(broker.url, clock, registry)  # the default retention: 7 days
    try:
        fresh = submit(app, registry)
        assert records(client, registry) == [*written[PRUNE_PAGE * PRUNE_PAGES :], fresh]
        clock.now += PRUNE_EVERY_SECS
        fresher = submit(app, registry)
        assert records(client, registry) == [fresh, fresher]
    finally:
        app.close()


def test_retention_none_keeps_every_record(broker: BrokerProcess, client: Client) -> None:
    registry = "kept.jobs"
    clock = Clock(time.time() - 400 * DAY)
    app = app_on(broker.url, clock, registry, job_retention_secs=None)
    try:
        first = submit(app, registry)
        clock.now += 399 * DAY
        second = submit(app, registry)
        assert records(client, registry) == [first, second]
    finally:
        app.close()


def test_a_submitter_that_may_not_consume_its_registry_still_submits(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    carol = ("carol", "carol-token-0123456789abcdef")
    auth = write_auth_file(tmp_path / "users.json", {carol[0]: (carol[1], {"carol.*": ["produce"]}),
                                                     ROOT[0]: (ROOT[1], {"*": ["all"]})})
    with BrokerProcess(tmp_path / "data", auth_file=auth) as broker:
        clock = Clock(time.time() - 30 * DAY)
        app = app_on(broker.client_url(*carol), clock, "carol.jobs", reply_prefix="carol.replies.")
        try:
            with caplog.at_level(logging.DEBUG, logger="kittiwake.app.job_retention"):
                first = submit(app, "carol.jobs")
                clock.now += 29 * DAY
                second = submit(app, "carol.jobs")  # its round is refused: logged, the submit stands
                clock.now += PRUNE_EVERY_SECS
                third = submit(app, "carol.jobs")
        finally:
            app.close()
        said = [(record.levelno, record.getMessage()) for record in caplog.records
                if record.name == "kittiwake.app.job_retention"]
        assert [level for level, _ in said] == [logging.WARNING, logging.DEBUG, logging.DEBUG]  # warned once
        assert all("could not remove old job records from 'carol.jobs'" in message for _, message in said)
        with Client(broker.client_url(*ROOT)) as root:
            assert records(root, "carol.jobs") == [first, second, third]
            assert root.stats(["carol.jobs.work"], sample=0)[0].size == 3


def test_a_registry_whose_oldest_task_is_not_a_record_is_left_alone(broker: BrokerProcess, client: Client) -> None:
    registry = "mixed.jobs"  # a queue of tasks named as a registry by mistake
    now = time.time()
    client.enqueue(registry, b"a task", pid=None)  # a FIFO pid ("0…") sorts before any record
    old = new_job_id(now - 30 * DAY)
    client.enqueue_many([record_task(registry, job_record(old, "old", 0.0, [registry], [(registry, "x")]))])
    app = app_on(broker.url, Clock(now), registry)
    try:
        fresh = submit(app, registry)
    finally:
        app.close()
    views = client.peek(registry, 10)
    assert [view.pid for view in views][1:] == [old, fresh]
    assert all((view.attempts, view.deliveries) == (0, 0) for view in views)  # nothing was even leased


def test_a_task_of_another_shape_among_old_records_is_handed_back_untouched(
    broker: BrokerProcess, client: Client, caplog: pytest.LogCaptureFixture
) -> None:
    registry = "among.jobs"
    now = time.time()
    old = new_job_id(now - 30 * DAY)
    stranger = old + "-a-user-s"  # sorts after the record, before the cutoff
    client.enqueue_many([record_task(registry, job_record(old, "old", 0.0, [registry], [(registry, "x")])),
                         {"queue": registry, "pid": stranger, "data": b"mine"}])
    app = app_on(broker.url, Clock(now), registry)
    try:
        with caplog.at_level(logging.WARNING, logger="kittiwake.app.job_retention"):
            fresh = submit(app, registry)
    finally:
        app.close()
    views = client.peek(registry, 10)
    assert [view.pid for view in views] == [stranger, fresh]  # the record went, the stranger stayed
    assert (views[0].state, views[0].attempts) == ("available", 0)  # leased a moment, given back: no attempt
    assert "holds tasks that are not job records" in caplog.text  # and the round stopped at it


def test_a_round_is_due_once_a_minute_and_again_after_the_clock_is_set_back() -> None:
    pruner = Pruner()
    assert pruner.due(1_000.0)
    assert not pruner.due(1_000.0 + PRUNE_EVERY_SECS - 1)
    assert pruner.due(1_000.0 + PRUNE_EVERY_SECS)
    assert pruner.due(500.0)  # set back: waiting for the old time would stop pruning for that long
    assert not pruner.due(501.0)


@pytest.mark.parametrize("bad", [0, -1.0, float("inf"), float("nan"), "7d", True])
def test_a_retention_must_be_a_positive_number_of_seconds(bad: object) -> None:
    with pytest.raises(ValueError, match="job_retention_secs"):
        validate_retention(bad)
    with pytest.raises(ValueError, match="job_retention_secs"):
        App(job_retention_secs=bad)  # type: ignore[arg-type]


@given(st.floats(0, 4_000_000_000), st.floats(0, 4_000_000_000))
def test_the_cutoff_falls_between_records_made_before_and_after_it(created: float, before: float) -> None:
    job_id = new_job_id(created)
    if int(created * 1000) < int(before * 1000):
        assert job_id < cutoff_pid(before)
    else:
        assert job_id > cutoff_pid(before)
