"""Several brokers on one PostgreSQL schema (`?brokers=many`): they serve the same queues as one broker
would — a task leased through one is not handed out by the other, one's lease ids finish tasks through
the other, dedupe and FIFO pids hold across them, a long-poll on one wakes for the other's enqueue —
and when one is SIGKILLed while holding leases, or their database connections drop under load, the
queue checker finds nothing lost."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Iterator

import pytest

from kittiwake import Client, errors
from support.broker_process import BrokerDidNotStart, BrokerProcess
from support.postgres import fresh_schema
from support.queue_load import QueueLoad, drain, hung_or_cut, wait_until_serving


def _url(dsn: str, schema: str, brokers: str = "many") -> str:
    separator = "&" if "?" in dsn else "?"
    return f"{dsn}{separator}schema={schema}&brokers={brokers}"


@pytest.fixture
def shared_schema() -> Iterator[tuple[str, str]]:
    with fresh_schema() as (dsn, schema):
        yield dsn, schema


@pytest.fixture
def two_brokers(tmp_path: Path, shared_schema: tuple[str, str]) -> Iterator[tuple[BrokerProcess, BrokerProcess]]:
    dsn, schema = shared_schema
    first = BrokerProcess(tmp_path / "a", store_url=_url(dsn, schema))
    try:
        second = BrokerProcess(tmp_path / "b", store_url=_url(dsn, schema))
        try:
            yield first, second
        finally:
            second.kill()
    finally:
        first.kill()


def test_two_brokers_serve_the_same_queues(two_brokers: tuple[BrokerProcess, BrokerProcess]) -> None:
    a, b = two_brokers
    with Client(a.url) as left, Client(b.url) as right:
        for n in range(4):
            (left if n % 2 else right).enqueue("jobs", f"job {n}".encode(), pid=f"p{n}")
        assert right.enqueue("jobs", b"again", pid="p1").collapsed, "dedupe across brokers"
        assert [t.pid for t in left.peek("jobs", 10)] == ["p0", "p1", "p2", "p3"]

        held = right.lease("jobs", max_tasks=2, lease_secs=60)
        assert [t.pid for t in held] == ["p0", "p1"]
        rest = left.lease("jobs", max_tasks=10, lease_secs=60)
        assert [t.pid for t in rest] == ["p2", "p3"], "a task leased through one broker was handed out by the other"
        assert left.lease("jobs", max_tasks=10) == [] and right.lease("jobs", max_tasks=10) == []

        # a lease granted by one broker renews and finishes through the other; stale ids are fenced
        assert left.renew(held[0], lease_secs=60).ok
        assert all(outcome.ok for outcome in left.dequeue(held))
        assert all(outcome.ok for outcome in right.dequeue(rest))
        with pytest.raises(errors.TaskNotFound):
            right.dequeue(held[0])
        assert [s.size for s in right.stats(["jobs"])] == [0]

        # FIFO pids from both brokers are unique and every one is served once
        for n in range(50):
            (left if n % 2 else right).enqueue("fifo", str(n).encode())
        pids = [t.pid for t in left.peek("fifo", 100)]
        assert len(pids) == len(set(pids)) == 50
        taken = left.lease("fifo", max_tasks=30, lease_secs=60) + right.lease("fifo", max_tasks=30, lease_secs=60)
        assert sorted(t.pid for t in taken) == sorted(pids)


def test_a_long_poll_on_one_broker_wakes_for_an_enqueue_through_the_other(
    two_brokers: tuple[BrokerProcess, BrokerProcess],
) -> None:
    a, b = two_brokers
    got: list[object] = []
    with Client(a.url) as waiter, Client(b.url) as producer:
        waiter.stats(["wake"])  # the waiting broker has seen the queue, empty
        thread = threading.Thread(target=lambda: got.extend(waiter.lease("wake", wait_secs=20, lease_secs=60)))
        thread.start()
        time.sleep(0.3)  # parked
        producer.enqueue("wake", b"hello", pid="w1")
        thread.join(timeout=30)
    assert [t.pid for t in got] == ["w1"]  # type: ignore[attr-defined]


def test_a_second_broker_must_say_brokers_many(tmp_path: Path, shared_schema: tuple[str, str]) -> None:
    dsn, schema = shared_schema
    alone = BrokerProcess(tmp_path / "alone", store_url=_url(dsn, schema, "one"))
    try:
        with pytest.raises(BrokerDidNotStart, match="exited with status") as refused:
            BrokerProcess(tmp_path / "joiner", store_url=_url(dsn, schema, "many"))
        assert refused.value.returncode != 0
        assert "brokers=many" in refused.value.log_tail.splitlines()[-1], refused.value
        with Client(alone.url) as client:
            assert not client.enqueue("q", b"x").collapsed  # the broker that was there serves on
    finally:
        alone.kill()


def test_sigkill_of_one_of_two_brokers_loses_nothing(two_brokers: tuple[BrokerProcess, BrokerProcess]) -> None:
    a, b = two_brokers
    load = QueueLoad([a.url, b.url], seed=16, producers=2, consumers=2)
    load.start()
    try:
        time.sleep(2.0)
        a.kill()  # SIGKILL while its consumers hold leases
        time.sleep(2.0)
    finally:
        load.finish()
    verdict = load.verify(drain(b.url))
    assert verdict.ok, verdict.format()
    assert verdict.result.counts()["lost"] == 0


def _drop_connections(dsn: str, schema: str) -> int:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as db:
        rows = db.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
            (f"kittiwake {schema}"[:63],),
        ).fetchall()
    return len(rows)


def test_dropped_database_connections_under_load_lose_nothing(
    two_brokers: tuple[BrokerProcess, BrokerProcess], shared_schema: tuple[str, str]
) -> None:
    a, b = two_brokers
    dsn, schema = shared_schema
    load = QueueLoad([a.url, b.url], seed=17, producers=2, consumers=2)
    load.start()
    try:
        time.sleep(1.5)
        for _ in range(3):  # a cut may land mid-commit, leaving a connection in pipeline mode
            assert _drop_connections(dsn, schema) >= 2
            time.sleep(0.7)
        for broker in (a, b):
            wait_until_serving(broker.url, deadline_secs=20.0)
        time.sleep(1.0)
    finally:
        load.finish()
    verdict = load.verify(drain(b.url))
    assert verdict.ok, verdict.format()
    assert not hung_or_cut(verdict.errors), verdict.format()
    assert any(errors.Unavailable.code in key for key in verdict.errors), "no client saw the outage"
