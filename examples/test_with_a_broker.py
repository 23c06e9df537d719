"""Integration tests against a real broker: `kittiwake.testing.BrokerProcess` as a pytest fixture.

Run with `pytest examples/test_with_a_broker.py`.
"""

import pytest

from kittiwake import Client
from kittiwake.testing import BrokerProcess


@pytest.fixture
def broker(tmp_path):
    # a fresh data directory per test; --durability os skips fsync: a test needs no power-loss safety
    with BrokerProcess(tmp_path / "data", args=["--durability", "os"]) as broker:
        yield broker  # killed when the test ends


def test_my_worker_finishes_its_task(broker):
    with Client(broker.url) as client:  # kw://127.0.0.1:<a free port>
        client.enqueue("emails", b"hello", pid="welcome-1")
        [task] = client.lease("emails")  # your code, run against broker.url, would do this
        client.dequeue(task)
        assert client.stats("emails")[0].size == 0
