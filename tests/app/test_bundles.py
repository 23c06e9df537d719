"""Bulk submits: the ids they draw, the bundles `map` prepares (the same tasks as one-by-one
`prepare`, byte for byte on the wire) and the sender that keeps one bundle in flight."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from kittiwake.app import App
from kittiwake.app.bundles import BundleSender
from kittiwake.app.envelope import new_ids
from kittiwake.client import calls
from kittiwake.client.wire import encode_call
from kittiwake.constants import SUBMISSION_HEADER
from support.broker_process import BrokerProcess
from worker import apps
from worker.harness import workers


def test_new_ids_sort_in_the_order_drawn_from_one_draw() -> None:
    draws: list[int] = []

    def random_bytes(size: int) -> bytes:
        draws.append(size)
        return bytes(index % 256 for index in range(size))

    now = time.time()
    ids = new_ids(3, now, random_bytes)
    assert ids[0][:14] >= f"{int(now * 1_000_000):014x}"  # the time part: now, or after the last id drawn
    assert draws == [24]
    assert ids[0][14:] == "0001020304050607" and ids[1][14:] == "08090a0b0c0d0e0f"  # the random part as drawn
    assert all(len(value) == 30 and int(value, 16) >= 0 for value in ids)
    assert ids == sorted(ids)
    later = new_ids(1000, 0.0)  # a clock behind: still after every id drawn before
    assert len(set(later)) == 1000 and later == sorted(later) and later[0] > ids[-1]
    assert new_ids(0, 1.0) == []


def test_the_sender_keeps_one_bundle_in_flight_in_order() -> None:
    sent: list[int] = []
    in_flight = 0
    most = 0
    lock = threading.Lock()

    def send(bundle: int) -> None:
        nonlocal in_flight, most
        with lock:
            in_flight += 1
            most = max(most, in_flight)
        time.sleep(0.005)
        sent.append(bundle)
        with lock:
            in_flight -= 1

    with BundleSender(send) as sender:
        for bundle in range(10):
            sender.send(bundle)
    assert sent == list(range(10)) and most == 1


def test_a_failed_bundle_stops_the_ones_after_it() -> None:
    sent: list[int] = []

    def send(bundle: int) -> None:
        if bundle == 2:
            raise ConnectionError("bundle 2")
        sent.append(bundle)

    with pytest.raises(ConnectionError, match="bundle 2"):
        with BundleSender(send) as sender:
            for bundle in range(5):
                sender.send(bundle)
    assert sent == [0, 1]  # 3 waited for 2's answer and was never sent


def test_an_error_while_preparing_lets_the_bundle_in_flight_finish() -> None:
    sent: list[int] = []
    release = threading.Event()

    def send(bundle: int) -> None:
        release.wait(5)
        sent.append(bundle)

    with pytest.raises(ValueError, match="cannot prepare"):
        with BundleSender(send) as sender:
            sender.send(0)
            threading.Timer(0.05, release.set).start()
            raise ValueError("cannot prepare bundle 1")
    assert sent == [0]


def _same_as_prepare(app: App, definition: Any, items: list[Any]) -> None:
    """Each bundled task is what `prepare` makes of the same call with the same ids and clock."""
    bundle, handles = app.prepare_bundle(definition, items)
    assert len(bundle) == len(handles) == len(items)
    one_by_one = []
    for item, task, handle in zip(items, bundle, handles):
        made, one = app.prepare(definition, (item,), {}, task_id=task["pid"])
        if SUBMISSION_HEADER in made["headers"]:  # a fresh submission id each: take the bundle's
            made["headers"][SUBMISSION_HEADER] = task["headers"][SUBMISSION_HEADER]
            assert one.submission != handle.submission
        assert made == task
        assert (handle.id, handle.name, handle.queue, handle.pid, handle.reply_queue) == (
            one.id, one.name, one.queue, one.pid, one.reply_queue)
        assert handle.wants_result is one.wants_result and handle.submission == task["headers"].get(SUBMISSION_HEADER)
        one_by_one.append(made)
    assert encode_call(calls.enqueue_many(bundle), 7) == encode_call(calls.enqueue_many(one_by_one), 7)


def test_a_bundle_holds_the_tasks_prepare_makes_fire_and_forget() -> None:
    app = App("kw://127.0.0.1:1", clock=lambda: 1700000000.25)  # never connects: nothing is sent

    @app.task(queue="bulk", ignore_result=True, max_attempts=5, delivery="at_most_once")
    def quiet(value: Any) -> None:
        return None

    _same_as_prepare(app, quiet, [1, "two", {"three": [3]}, None, b"\x00" * 1024])
    assert app.prepare_bundle(quiet, []) == ([], [])


def test_a_bundle_holds_the_tasks_prepare_makes_with_results(broker: BrokerProcess, app) -> None:
    frozen = app.clock
    app.clock = lambda: 1700000000.5
    try:
        _same_as_prepare(app, apps.echo, list(range(20)))
    finally:
        app.clock = frozen


def test_map_of_a_generator_sends_every_bundle_and_gets_every_result(
    broker: BrokerProcess, app, tmp_path: Path
) -> None:
    handles = apps.echo.map((value for value in range(2500)), chunk=1000)
    assert len({handle.id for handle in handles}) == 2500
    assert [queue.size for queue in app.client.list_queues(pattern="^tests$")] == [2500]
    with workers(broker.url, tmp_path, "--concurrency", "2", "--prefetch", "200"):
        assert app.results(handles, timeout=60) == list(range(2500))
