"""A broker on PostgreSQL (`kittiwake broker --store postgresql://…`) serves clients as on SQLite,
and what it committed is there after a restart: tasks, and a running lease, which a restarted
broker neither hands out again nor forgets (its lease id still finishes the task)."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest

from kittiwake import Client
from support.broker_process import BrokerProcess
from support.postgres import fresh_schema


@pytest.fixture
def pg_broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    with fresh_schema() as (dsn, schema):
        separator = "&" if "?" in dsn else "?"
        process = BrokerProcess(tmp_path / "broker", store_url=f"{dsn}{separator}schema={schema}")
        try:
            yield process
        finally:
            process.kill()


def test_enqueue_lease_dequeue_and_a_lease_that_survives_a_restart(pg_broker: BrokerProcess) -> None:
    with Client(pg_broker.url) as client:
        for n in range(5):
            client.enqueue("jobs", f"job {n}".encode(), pid=f"p{n}")
        first = client.lease("jobs", max_tasks=2, lease_secs=600)
        assert [t.pid for t in first] == ["p0", "p1"]
        assert client.dequeue(first[0]).ok

        pg_broker.kill()  # a crash: only what was committed counts
        pg_broker.restart()

        assert [t.pid for t in client.peek("jobs")] == ["p1", "p2", "p3", "p4"]
        again = client.lease("jobs", max_tasks=10, lease_secs=600)
        assert [t.pid for t in again] == ["p2", "p3", "p4"], "the running lease of p1 was handed out again"
        assert client.dequeue(first[1]).ok, pg_broker.log_tail()  # the lease from before the restart
        assert all(outcome.ok for outcome in client.dequeue(again))
        assert client.peek("jobs") == []
    assert "store=postgresql://" in pg_broker.stdout_path.read_text()
