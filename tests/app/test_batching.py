"""Submitting through a batching producer: `App(batching=...)` and ``with app.batch():``.

Handles come back before their tasks reach the broker; `handle.sent()` waits until they are
durable, and results, keys and parents work as they do without batching.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from kittiwake import errors
from kittiwake.app import App
from kittiwake.client import ProducerSettings
from support.broker_process import BrokerProcess
from worker import apps
from worker.harness import workers


@pytest.fixture
def batching(app: App) -> Iterator[App]:
    """The test app with `batching` on (the test app is a module-level object: restored after)."""
    app.batching = ProducerSettings(linger_ms=1)
    try:
        yield app
    finally:
        app.close()
        app.batching = None


def test_a_batch_block_sends_its_submits_together_and_waits_for_them(broker: BrokerProcess, app: App) -> None:
    with app.batch() as producer:
        handles = [apps.echo.submit(n) for n in range(50)]
        assert all(handle.status().state in ("pending", "running") for handle in handles)
    assert producer.held == 0 and producer.stats.tasks_sent == 50
    assert all(handle.sent() is None and handle.sending is None for handle in handles)
    assert [view.pid for view in app.client.peek("tests", 100)] == [handle.pid for handle in handles]


def test_submits_outside_the_block_are_sent_one_by_one(broker: BrokerProcess, app: App) -> None:
    with app.batch():
        inside = apps.echo.submit(1)
    outside = apps.echo.submit(2)
    assert inside.sending is not None and inside.sending.done()  # durable at the block's end
    assert outside.sending is None  # durable when submit returned
    assert {view.pid for view in app.client.peek("tests", 10)} == {inside.pid, outside.pid}


def test_results_come_back_through_a_batching_app(broker: BrokerProcess, batching: App, tmp_path: Path) -> None:
    handles = [apps.add.submit(n, n) for n in range(30)]
    assert handles[-1].sent(timeout=20) is None
    with workers(broker.url, tmp_path, "--concurrency", "4"):
        assert batching.results(handles, timeout=30) == [n + n for n in range(30)]
    assert batching.producer is not None and batching.producer.stats.tasks_sent == 30


def test_a_key_submitted_twice_through_a_producer_joins_one_run(
    broker: BrokerProcess, batching: App, tmp_path: Path
) -> None:
    runs = tmp_path / "runs"
    first = apps.record.submit(str(runs), "once", key="order-9")
    second = apps.record.submit(str(runs), "twice", key="order-9")
    second.sent(timeout=20)
    assert [view.pid for view in batching.client.peek("tests", 10)] == ["order-9"]
    with workers(broker.url, tmp_path):
        assert first.result(timeout=20) == second.result(timeout=20) == "once"


def test_a_parent_held_by_the_producer_reaches_the_broker_before_a_child_sent_another_way(
    broker: BrokerProcess, app: App, tmp_path: Path
) -> None:
    runs = tmp_path / "runs"
    with app.batch():
        parent = apps.record.submit(str(runs), "parent")
        job = app.job()  # jobs send their own requests: the parent must be durable first
        job.add(apps.record, str(runs), "child", after=[parent])
        job.submit()
        assert parent.sending is None
    child_view = [view for view in app.client.peek("tests", 10) if view.pid != parent.pid]
    assert [view.state for view in child_view] == ["blocked"]


def test_batching_settings_are_checked(app: App) -> None:
    with pytest.raises(errors.BadRequest):
        App(batching={"linger_ms": -1})
    with pytest.raises(errors.BadRequest):
        App(batching={"no_such_setting": 1})
    with pytest.raises(errors.BadRequest):
        App(batching="yes")  # type: ignore[arg-type]
    assert App(batching=True).batching == ProducerSettings()
