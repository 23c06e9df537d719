"""Fencing after release and kept dead letters, over TCP against a real broker, and the
`kittiwake dead` commands."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from kittiwake import Client
from kittiwake.errors import TaskNotLeased
from support.broker_process import BrokerProcess


def test_a_released_lease_can_no_longer_dequeue_its_task(broker: BrokerProcess) -> None:
    with Client(broker.url) as c:
        c.enqueue("q", b"x", pid="p")
        [t] = c.lease("q", lease_secs=60)
        c.release(t)
        with pytest.raises(TaskNotLeased):
            c.dequeue(t)
        [retry] = c.lease("q", lease_secs=60)
        assert (retry.pid, retry.attempts) == ("p", 1)
        c.dequeue(retry)


def test_the_lease_id_high_water_mark_survives_a_restart(broker: BrokerProcess) -> None:
    with Client(broker.url) as c:
        c.enqueue("q", b"x", pid="p")
        [first] = c.lease("q")
        c.dequeue(first)
    broker.restart()
    with Client(broker.url) as c:
        c.enqueue("q", b"x", pid="p")
        [second] = c.lease("q")
        assert second.lease_id > first.lease_id


def kittiwake(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kittiwake", "--url", url, *args],
                          capture_output=True, text=True, timeout=60)


def test_dead_letters_are_all_kept_and_requeued_or_purged_by_command(broker: BrokerProcess) -> None:
    with Client(broker.url) as c:
        for reason in ("boom 1", "boom 2"):
            c.enqueue("jobs", reason.encode(), pid="p")
            [t] = c.lease("jobs")
            c.release(t, reason, bury=True)
        c.enqueue("jobs", b"other", pid="q", max_attempts=1)
        [t] = c.lease("jobs")
        c.release(t)
        assert c.stats("jobs")[0].dead == 3

    listed = json.loads(kittiwake(broker.url, "--json", "dead", "list", "jobs").stdout)
    assert [(v["headers"]["kittiwake-dead-pid"], v["headers"]["kittiwake-dead-reason"]) for v in listed] == [
        ("p", "boom 1"), ("p", "boom 2"), ("q", "RELEASED")]

    done = kittiwake(broker.url, "dead", "requeue", "jobs", "--all")
    assert done.returncode == 0, done.stderr
    assert "requeued 2 dead letters of jobs" in done.stdout  # "p" once, "q"; the second "p" stays
    assert "TASK_EXISTS" in done.stdout
    with Client(broker.url) as c:
        assert sorted(v.pid for v in c.peek("jobs", 10)) == ["p", "q"]
        assert c.get("jobs", "p").data == b"boom 1" and c.get("jobs", "p").attempts == 0
        [left] = c.peek("jobs.dead", 10)
        assert left.data == b"boom 2"

    done = kittiwake(broker.url, "dead", "purge", "jobs", "p")
    assert done.returncode == 0 and "purged 1 dead letter of jobs" in done.stdout, done.stdout + done.stderr
    assert kittiwake(broker.url, "dead", "requeue", "jobs").returncode == 2  # PIDs or --all
    assert kittiwake(broker.url, "dead", "purge", "jobs", "--all").returncode == 0
