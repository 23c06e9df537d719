"""Dependencies, cancel, conditional enqueue, progress, bury and rate limits over a real broker."""

from __future__ import annotations

import time

import pytest

from kittiwake import Client, errors
from support.broker_process import BrokerProcess


def test_a_child_is_leased_only_after_its_parents_finish(broker: BrokerProcess) -> None:
    with Client(broker.url) as client:
        parents = [client.enqueue("dag#a", b"p", pid=f"p{n}") for n in range(3)]
        client.enqueue("dag#b", b"c", pid="child", after=parents)
        assert client.get("dag#b", "child").state == "blocked"
        assert client.lease("dag#b") == []
        leased = client.lease("dag#a", max_tasks=3)
        client.dequeue(leased[:2])
        assert client.lease("dag#b") == []
        client.dequeue(leased[2])
        assert [t.pid for t in client.lease("dag#b")] == ["child"]


def test_cancel_fails_the_subtree(broker: BrokerProcess) -> None:
    with Client(broker.url) as client:
        root = client.enqueue("c#q", b"", pid="root")
        client.enqueue("c#q", b"", pid="kid", after=[root])
        outcome = client.cancel(("c#q", "root"))
        assert outcome.ok and outcome.dead
        assert client.get("c#q.dead", "kid").headers["kittiwake-dead-reason"].startswith("PARENT_FAILED")
        with pytest.raises(errors.TaskNotFound):
            client.cancel(("c#q", "root"))


def test_unless_makes_an_enqueue_collapse(broker: BrokerProcess) -> None:
    with Client(broker.url) as client:
        client.enqueue("ticks", b"", pid="nightly@2026-01-01")
        outcome = client.enqueue("jobs", b"", pid="nightly@2026-01-01", unless=[("ticks", "nightly@2026-01-01")])
        assert outcome.collapsed
        assert client.peek("jobs") == []


def test_progress_reported_on_renew_is_visible(broker: BrokerProcess) -> None:
    with Client(broker.url) as client:
        client.enqueue("p", b"", pid="t")
        [task] = client.lease("p")
        client.renew(task, 30, progress=0.4, note="halfway")
        view = client.get("p", "t")
        assert (view.progress, view.note, view.state) == (0.4, "halfway", "leased")


def test_release_with_bury_dead_letters_at_once(broker: BrokerProcess) -> None:
    with Client(broker.url) as client:
        client.enqueue("b", b"", pid="t")
        [task] = client.lease("b")
        assert client.release(task, "WORKER_LOST", bury=True).dead
        assert client.get("b.dead", "t").headers["kittiwake-dead-reason"] == "WORKER_LOST"


def test_a_rate_limit_holds_across_two_clients(broker: BrokerProcess) -> None:
    with Client(broker.url) as first, Client(broker.url) as second:
        first.enqueue_many([{"queue": "limited", "data": b"", "pid": f"{n:04d}"} for n in range(500)])
        started = time.monotonic()
        got = 0
        while time.monotonic() - started < 2.0:
            for client in (first, second):
                got += len(client.lease("limited", max_tasks=50, rate_per_sec=50))
            time.sleep(0.01)
        elapsed = time.monotonic() - started
        # a burst of 50, then 50/s: never more, whoever asks
        assert got <= 50 + 50 * elapsed + 5, (got, elapsed)
        assert got >= 75, (got, elapsed)  # the burst and some refill (loose: the bucket caps savings)
