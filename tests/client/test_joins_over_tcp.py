"""Joins over TCP against a real broker: concurrent producers in random order, reject, access
rules, and SIGKILLs of the broker while tokens arrive (no token lost, no job started twice)."""

from __future__ import annotations

import random
import threading
import time

import msgspec
import pytest

from kittiwake import Client
from kittiwake.errors import BadRequest, KittiwakeError, Transient
from support.broker_process import BrokerProcess

JOB = "flow#jobs"
PORTS = ("a", "b", "c")


def declare(client: Client) -> None:
    assert client.declare_join(
        "flow#three", JOB, required={port: f"flow#in.{port}" for port in PORTS}, max_attempts=2
    ) in ("created", "unchanged")


def tokens_for(keys: list[str], seed: int) -> list[tuple[str, str]]:
    items = [(port, key) for key in keys for port in PORTS]
    random.Random(seed).shuffle(items)
    return items


def produce(url: str, items: list[tuple[str, str]], unknown: set[tuple[str, str]], batch: int = 50) -> None:
    """Enqueue tokens in batches, retrying a batch whose outcome is unknown until it is acknowledged."""
    with Client(url, connect_timeout=60) as client:
        for start in range(0, len(items), batch):
            chunk = items[start : start + batch]
            tasks = [{"queue": f"flow#in.{port}", "pid": key, "data": f"{port}:{key}"} for port, key in chunk]
            while True:
                try:
                    client.enqueue_many(tasks)
                    break
                except Transient:
                    unknown.update(chunk)  # it may have landed: the retry may leave a stray token
                    time.sleep(0.05)


def drain_jobs(client: Client) -> list[dict]:
    jobs = []
    while batch := client.lease(JOB, max_tasks=1000, lease_secs=60):
        jobs.extend(msgspec.msgpack.decode(task.data) for task in batch)
        client.dequeue(batch)
    return jobs


def test_four_producers_in_random_order_start_each_job_once(broker: BrokerProcess) -> None:
    keys = [f"run1/{i:08d}" for i in range(1500)]
    items = tokens_for(keys, seed=1)
    with Client(broker.url) as client:
        declare(client)
        unknown: set = set()
        threads = [threading.Thread(target=produce, args=(broker.url, items[i::4], unknown)) for i in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        jobs = drain_jobs(client)
        assert sorted(job["key"] for job in jobs) == keys
        for job in jobs:
            assert {port: [t["data"] for t in got] for port, got in job["tokens"].items()} == {
                port: [f"{port}:{job['key']}".encode()] for port in PORTS
            }
        assert all(client.peek(f"flow#in.{port}") == [] for port in PORTS)
        (info,) = client.list_joins("^flow#")
        assert (info.name, info.job_queue, info.tokens_waiting) == ("flow#three", JOB, 0)


def test_a_broker_killed_while_tokens_arrive_loses_none_and_starts_no_job_twice(broker: BrokerProcess) -> None:
    keys = [f"run2/{i:08d}" for i in range(3000)]
    items = tokens_for(keys, seed=2)
    with Client(broker.url) as client:
        declare(client)
    unknown: set = set()
    threads = [threading.Thread(target=produce, args=(broker.url, items[i::4], unknown)) for i in range(4)]
    for thread in threads:
        thread.start()
    kills = 0
    rng = random.Random(3)
    while any(thread.is_alive() for thread in threads) and kills < 3:
        time.sleep(rng.uniform(0.2, 0.6))
        broker.kill()
        broker.restart()
        kills += 1
    for thread in threads:
        thread.join(timeout=120)
    assert kills >= 1
    with Client(broker.url) as client:
        jobs = drain_jobs(client)
        started = [job["key"] for job in jobs]
        assert len(started) == len(set(started)), "a job started twice"
        assert sorted(started) == keys, "a key lost its job"
        # a token is left waiting only when its enqueue was retried after its key's job had started
        for port in PORTS:
            for stray in client.peek(f"flow#in.{port}", n=1000):
                assert (port, stray.pid) in unknown


def test_a_rejected_job_goes_back_without_using_an_attempt(broker: BrokerProcess) -> None:
    with Client(broker.url) as client:
        declare(client)
        client.enqueue_many([{"queue": f"flow#in.{port}", "pid": "k", "data": b""} for port in PORTS])
        for _ in range(3):  # max_attempts=2: counted releases would have buried it
            [job] = client.lease(JOB, lease_secs=30)
            assert client.release(job, reject=True).ok
        [job] = client.lease(JOB, lease_secs=30)
        assert job.attempts == 0
        client.dequeue(job)


def test_port_queues_refuse_leases_and_keyless_tokens(broker: BrokerProcess) -> None:
    with Client(broker.url) as client:
        declare(client)
        with pytest.raises(BadRequest, match="port of join"):
            client.lease("flow#in.a")
        with pytest.raises(BadRequest, match="needs a pid"):
            client.enqueue("flow#in.a", b"no key")
        with pytest.raises(BadRequest, match="group"):
            client.declare_join("x", "g#jobs", required={"a": "h#a"})
        with pytest.raises(BadRequest):
            client.declare_join("x", "g#jobs", required={"a": 3})  # type: ignore[dict-item]
        assert client.purge_join("flow#three", "nothing") == 0
        assert client.drop_join("flow#three") is True
        assert client.list_joins() == []


def test_a_token_waiting_when_the_broker_restarts_still_completes_its_job(broker: BrokerProcess) -> None:
    with Client(broker.url) as client:
        client.declare_join("m#merge", "m#jobs", required={"u": "m#users"}, sequence={"p": "m#parts"})
        client.enqueue_many(
            [
                {"queue": "m#parts", "pid": "r/00000000", "data": b"0"},
                {"queue": "m#parts", "pid": "r/00000001", "data": b"1", "headers": {"kittiwake-seq-final": "1"}},
            ]
        )
    broker.kill()
    broker.restart()
    with Client(broker.url) as client:
        client.enqueue("m#users", b"u", pid="r")
        [job] = client.lease("m#jobs")
        payload = msgspec.msgpack.decode(job.data)
        assert [t["data"] for t in payload["tokens"]["p"]] == [b"0", b"1"]
        assert job.headers == {"kittiwake-join": "m#merge"}


def test_join_ops_validate_their_arguments(broker: BrokerProcess) -> None:
    with Client(broker.url) as client:
        for bad in (
            lambda: client.purge_join("j", ""),
            lambda: client.purge_join("j", "k", limit=0),
            lambda: client.drop_join(""),
            lambda: client.list_joins("(a"),
            lambda: client.declare_join("j", "jobs", required={}),
        ):
            with pytest.raises(KittiwakeError) as raised:
                bad()
            assert raised.value.code == "BAD_REQUEST"
