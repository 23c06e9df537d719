"""The benchmarks' raw connection against a real broker: replies by callback in order, or by
request id to pipelined calls; error replies and a lost broker reported to the caller."""

from __future__ import annotations

import asyncio

import pytest
from support.broker_process import BrokerProcess

from kittiwake.bench.wire import BlockingConnection, RawConnection, decode_status, lease_refs, open_connection


def test_a_receive_callback_gets_every_reply_in_order(broker: BrokerProcess) -> None:
    async def run() -> list[int]:
        replies: list[int] = []
        everything = asyncio.get_running_loop().create_future()

        def receive(body: bytes) -> None:
            reply = decode_status(body)
            assert reply.ok, reply.error
            replies.append(reply.id)
            if len(replies) == 3:
                everything.set_result(None)

        connection = await open_connection(broker.host, broker.port, receive)
        sent = [connection.send("ping", {}) for _ in range(3)]
        await asyncio.wait_for(everything, 10)
        connection.close()
        assert sent == [1, 2, 3]
        return replies

    assert asyncio.run(run()) == [1, 2, 3]


def test_calls_in_flight_get_their_own_replies_whatever_the_order(broker: BrokerProcess) -> None:
    async def run() -> None:
        connection = await open_connection(broker.host, broker.port)
        parked = connection.call("lease", {"queues": ["wire.q"], "max_tasks": 1, "wait_secs": 10.0})
        ping = connection.call("ping", {})
        assert (await asyncio.wait_for(ping, 10)).ok  # answered while the lease waits
        assert not parked.done()
        enqueued = connection.call("enqueue", {"tasks": [{"queue": "wire.q", "data": b"x"}]})
        (leased,) = (await asyncio.wait_for(parked, 10)).result
        assert (await asyncio.wait_for(enqueued, 10)).ok
        dequeued = await asyncio.wait_for(connection.call("dequeue", {"leases": lease_refs([leased])}), 10)
        assert [item["ok"] for item in dequeued.result] == [True]
        connection.close()

    asyncio.run(run())


def test_a_blocking_call_returns_the_result_and_raises_on_an_error_reply(broker: BrokerProcess) -> None:
    with BlockingConnection(broker.host, broker.port) as link:
        link.request("enqueue", tasks=[{"queue": "wire.blocking", "data": b"x"}])
        assert [row["size"] for row in link.request("list_queues", pattern="^wire")] == [1]
        with pytest.raises(RuntimeError, match="^no_such_op: UNKNOWN_OP: "):
            link.request("no_such_op")


def test_a_lost_broker_fails_the_calls_in_flight_and_tells_the_owner(broker: BrokerProcess) -> None:
    async def run() -> None:
        lost: list[Exception | None] = []
        connection = RawConnection(lost=lost.append)
        await asyncio.get_running_loop().create_connection(lambda: connection, broker.host, broker.port)
        parked = connection.call("lease", {"queues": ["wire.lost"], "max_tasks": 1, "wait_secs": 30.0})
        await asyncio.wait_for(connection.call("ping", {}), 10)  # the lease is parked by now
        broker.kill()
        with pytest.raises(ConnectionError):
            await asyncio.wait_for(parked, 10)
        assert len(lost) == 1
        with pytest.raises(ConnectionError):
            connection.call("ping", {})

    asyncio.run(run())
