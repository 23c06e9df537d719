"""How the clients use their connections: concurrency, pipelining, long-polls,
timeouts, and surviving a broker that is killed and restarted."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from typing import Any

import pytest

from kittiwake import AsyncClient, Client, errors
from kittiwake.client.async_pool import AsyncPool
from support.broker_process import BrokerProcess


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# ------------------------------------------------------------- concurrency


def drain_concurrently(clients: list[Client], queue: str) -> tuple[list[tuple[int, str]], list[Any]]:
    """Workers lease, record and dequeue until the queue is dry; returns (worker, pid) deliveries and failures."""
    deliveries: list[tuple[int, str]] = []
    failures: list[Any] = []
    lock = threading.Lock()

    def work(number: int, client: Client) -> None:
        try:
            while True:
                tasks = client.lease(queue, max_tasks=5, lease_secs=60, worker=f"worker-{number}")
                if not tasks:
                    return
                with lock:
                    deliveries.extend((number, task.pid) for task in tasks)
                failures.extend(outcome for outcome in client.dequeue(tasks) if not outcome.ok)
        except Exception as exc:  # noqa: BLE001 - reported by the test
            failures.append(exc)

    threads = [threading.Thread(target=work, args=(n, c)) for n, c in enumerate(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    return deliveries, failures


def test_eight_workers_each_task_delivered_exactly_once(broker: BrokerProcess) -> None:
    with Client(broker.url) as producer:
        for start in range(0, 2000, 500):
            producer.enqueue_many([{"queue": "shared", "data": str(n)} for n in range(start, start + 500)])
        clients = [Client(broker.url) for _ in range(8)]
        try:
            deliveries, failures = drain_concurrently(clients, "shared")
        finally:
            for client in clients:
                client.close()
        assert failures == []
        counts = Counter(pid for _, pid in deliveries)
        assert len(counts) == 2000
        assert max(counts.values()) == 1, "a task was leased by two workers"
        assert len({worker for worker, _ in deliveries}) > 1, "only one worker got tasks"
        assert producer.list_queues(pattern="shared") == []


def test_threads_may_share_one_client(broker: BrokerProcess) -> None:
    with Client(broker.url) as client:
        client.enqueue_many([{"queue": "shared", "data": str(n)} for n in range(400)])
        deliveries, failures = drain_concurrently([client] * 8, "shared")
        assert failures == []
        assert sorted(Counter(pid for _, pid in deliveries).values()) == [1] * 400


def test_async_calls_are_pipelined_on_one_connection(broker: BrokerProcess) -> None:
    async def scenario() -> None:
        async with AsyncClient(broker.url) as client:
            outcomes = await asyncio.gather(*(client.enqueue("many", str(n)) for n in range(300)))
            assert len({o.pid for o in outcomes}) == 300
            leased = await asyncio.gather(*(client.lease("many", max_tasks=10) for _ in range(30)))
            pids = [task.pid for batch in leased for task in batch]
            assert sorted(pids) == sorted(o.pid for o in outcomes)
            channel = client._channel
            assert isinstance(channel, AsyncPool) and channel.in_flight == 0

    asyncio.run(scenario())


# -------------------------------------------------------------- long-poll


def test_an_async_long_poll_is_woken_by_an_enqueue_and_does_not_block_other_calls(broker: BrokerProcess) -> None:
    async def scenario() -> None:
        async with AsyncClient(broker.url) as waiter, AsyncClient(broker.url) as producer:
            started = time.monotonic()
            polling = asyncio.create_task(waiter.lease("wake", wait_secs=10))
            await asyncio.sleep(0.3)
            assert not polling.done()
            await waiter.ping()  # same connection, answered while the lease waits
            await waiter.enqueue("elsewhere", b"x")
            assert time.monotonic() - started < 2
            enqueued_at = time.monotonic()
            await producer.enqueue("wake", b"hello")
            [task] = await asyncio.wait_for(polling, 5)
            assert task.data == b"hello"
            assert time.monotonic() - enqueued_at < 1.0

    asyncio.run(scenario())


def test_a_long_poll_with_nothing_to_lease_returns_empty_after_the_wait(broker: BrokerProcess) -> None:
    with Client(broker.url) as client:
        started = time.monotonic()
        assert client.lease("quiet", wait_secs=0.5) == []
        assert 0.4 <= time.monotonic() - started < 3


def test_a_sync_long_poll_holds_one_pooled_connection_not_the_client(broker: BrokerProcess) -> None:
    with Client(broker.url) as client:
        result: list[Any] = []
        polling = threading.Thread(target=lambda: result.append(client.lease("wake", wait_secs=10)))
        polling.start()
        time.sleep(0.3)
        started = time.monotonic()
        client.ping()
        client.enqueue("wake", b"hello")
        assert time.monotonic() - started < 2
        polling.join(timeout=5)
        assert not polling.is_alive()
        assert [task.data for task in result[0]] == [b"hello"]


# --------------------------------------------------------------- timeouts


def test_no_reply_in_time_is_request_timeout_and_the_client_recovers(broker: BrokerProcess) -> None:
    with Client(broker.url) as client:
        with pytest.raises(errors.RequestTimeout) as caught:
            client.lease("quiet", wait_secs=5, timeout=0.3)
        assert caught.value.code == "TIMEOUT"
        # the timed-out connection was reset, so the broker dropped the parked
        # long-poll: this task goes to the next lease, not to the abandoned one
        client.enqueue("quiet", b"x")
        assert len(client.lease("quiet")) == 1


def test_an_async_request_timeout_leaves_other_calls_on_the_connection_alone(broker: BrokerProcess) -> None:
    async def scenario() -> None:
        async with AsyncClient(broker.url) as client:
            other = asyncio.create_task(client.lease("other", wait_secs=2))
            with pytest.raises(errors.RequestTimeout):
                await client.lease("quiet", wait_secs=1, timeout=0.3)
            await client.enqueue("other", b"x")
            assert [t.data for t in await other] == [b"x"]
            # the abandoned long-poll was withdrawn (cancel_wait): the next
            # task goes to the next lease at once, not to the abandoned reply
            await client.enqueue("quiet", b"y")
            assert len(await client.lease("quiet")) == 1

    asyncio.run(scenario())


def test_a_cancelled_async_long_poll_is_withdrawn_at_the_broker(broker: BrokerProcess) -> None:
    async def scenario() -> None:
        async with AsyncClient(broker.url) as client:
            waiting = asyncio.create_task(client.lease("cancelled", wait_secs=30))
            await asyncio.sleep(0.2)
            waiting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiting
            await client.enqueue("cancelled", b"z")
            leased = await client.lease("cancelled")
            assert [t.data for t in leased] == [b"z"]
            assert leased[0].deliveries == 1  # nobody else was handed it

    asyncio.run(scenario())


@pytest.mark.parametrize("kind", ["Client", "AsyncClient"])
def test_no_broker_is_broker_unreachable_after_the_connect_budget(kind: str) -> None:
    url = f"kw://127.0.0.1:{free_port()}"
    started = time.monotonic()
    with pytest.raises(errors.BrokerUnreachable) as caught:
        if kind == "Client":
            Client(url, connect_timeout=0.5).ping()
        else:
            asyncio.run(AsyncClient(url, connect_timeout=0.5).ping())
    assert caught.value.code == "BROKER_UNREACHABLE"
    assert 0.4 <= time.monotonic() - started < 3


def test_a_closed_client_refuses_calls(broker: BrokerProcess) -> None:
    client = Client(broker.url)
    client.ping()
    client.close()
    with pytest.raises(errors.BrokerUnreachable, match="closed"):
        client.ping()


# -------------------------------------------------------------- reconnect


def test_the_same_client_works_after_the_broker_restarts(broker: BrokerProcess) -> None:
    with Client(broker.url) as client:
        client.enqueue("durable", b"before")
        broker.kill()
        broker.restart()
        assert client.url == broker.url, "the broker came back on another port"
        client.enqueue("durable", b"after")
        assert [t.data for t in client.peek("durable")] == [b"before", b"after"]


def test_the_same_async_client_works_after_the_broker_restarts(broker: BrokerProcess) -> None:
    async def scenario() -> None:
        async with AsyncClient(broker.url) as client:
            await client.enqueue("durable", b"before")
            broker.kill()  # blocks the loop: the client only notices when it next sends
            broker.restart()
            await client.enqueue("durable", b"after")
            assert [t.data for t in await client.peek("durable")] == [b"before", b"after"]

    asyncio.run(scenario())


def test_the_client_reconnects_when_the_broker_comes_back_within_the_budget(broker: BrokerProcess) -> None:
    with Client(broker.url, connect_timeout=10) as client:
        client.ping()
        broker.kill()
        restarting = threading.Timer(0.5, broker.restart)
        restarting.start()
        started = time.monotonic()
        client.ping()  # retried with backoff until the broker is back
        assert time.monotonic() - started >= 0.4
        restarting.join()


@pytest.mark.parametrize("kind", ["Client", "AsyncClient"])
def test_a_request_in_flight_when_the_broker_dies_is_connection_lost(broker: BrokerProcess, kind: str) -> None:
    killer = threading.Timer(0.3, broker.kill)  # started once connected: the lease is in flight by then
    with pytest.raises(errors.ConnectionLost) as caught:
        if kind == "Client":
            with Client(broker.url) as client:
                client.ping()
                killer.start()
                client.lease("quiet", wait_secs=10)
        else:
            async def scenario() -> None:
                async with AsyncClient(broker.url) as client:
                    await client.ping()
                    killer.start()
                    await client.lease("quiet", wait_secs=10)

            asyncio.run(scenario())
    assert caught.value.code == "CONNECTION_LOST"
    killer.join()


def test_enqueues_across_a_broker_crash_are_ok_or_connection_lost_and_none_ok_is_lost(broker: BrokerProcess) -> None:
    acknowledged: list[bytes] = []
    unknown: list[bytes] = []
    unexpected: list[BaseException] = []
    stop = threading.Event()

    def produce() -> None:
        with Client(broker.url, connect_timeout=15) as client:
            n = 0
            while not stop.is_set():
                data = str(n).encode()
                n += 1
                try:
                    client.enqueue("crash", data)
                    acknowledged.append(data)
                except errors.ConnectionLost:
                    unknown.append(data)
                except BaseException as exc:  # noqa: BLE001 - reported by the test
                    unexpected.append(exc)
                    return

    producer = threading.Thread(target=produce)
    producer.start()
    time.sleep(0.5)
    broker.kill()
    broker.restart()
    time.sleep(0.5)
    stop.set()
    producer.join(timeout=30)
    assert unexpected == []
    with Client(broker.url) as client:
        stored = {task.data for task in client.peek("crash", n=10_000)}
    lost = [data for data in acknowledged if data not in stored]
    assert acknowledged and lost == []
    assert stored <= set(acknowledged) | set(unknown)
