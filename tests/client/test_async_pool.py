"""`AsyncPool`, the asyncio channel of `kw://`: pipelining, withdrawing abandoned long-polls,
connecting within the budget, and a close() that ends a reconnect at once — against a real broker."""

from __future__ import annotations

import asyncio
import socket
import threading
from typing import Any

import pytest

from kittiwake import Client, errors
from kittiwake.client import calls
from kittiwake.client.async_pool import AsyncPool
from kittiwake.client.url import parse_url
from support.broker_process import BrokerProcess

# far above how long a closed pool may take to end a call, far below the connect budget
ENDS_WITHIN_SECS = 3.0
CONNECT_BUDGET_SECS = 10.0


def pool_of(url: str, connect_timeout_secs: float = CONNECT_BUDGET_SECS) -> AsyncPool:
    return AsyncPool(parse_url(url), connect_timeout_secs=connect_timeout_secs, max_reply_bytes=1 << 20)


def free_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"kw://127.0.0.1:{sock.getsockname()[1]}"


def test_calls_are_pipelined_on_one_connection(broker: BrokerProcess) -> None:
    async def scenario() -> None:
        pool = pool_of(broker.url)
        try:
            polling = asyncio.create_task(pool.request(calls.lease("pooled", wait_secs=10), 15))
            await asyncio.sleep(0.2)
            assert pool.in_flight == 1  # the long-poll waits at the broker
            outcomes = await asyncio.gather(*(pool.request(calls.enqueue("other", b"%d" % n), 10) for n in range(50)))
            assert len({outcome.pid for outcome in outcomes}) == 50
            await pool.request(calls.enqueue("pooled", b"wake"), 10)
            [task] = await asyncio.wait_for(polling, 5)
            assert task.data == b"wake" and pool.in_flight == 0
        finally:
            await pool.close()

    asyncio.run(scenario())


@pytest.mark.parametrize("how", ["timed out", "cancelled"])
def test_an_abandoned_long_poll_is_withdrawn_at_the_broker(broker: BrokerProcess, how: str) -> None:
    async def scenario() -> None:
        pool = pool_of(broker.url)
        try:
            if how == "timed out":
                with pytest.raises(errors.RequestTimeout):
                    await pool.request(calls.lease("abandoned", wait_secs=30), 0.3)
            else:
                waiting = asyncio.create_task(pool.request(calls.lease("abandoned", wait_secs=30), None))
                await asyncio.sleep(0.2)
                waiting.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await waiting
            await pool.request(calls.enqueue("abandoned", b"z"), 10)
            # withdrawn: the task goes to the next lease, not to the reply nobody reads
            [task] = await pool.request(calls.lease("abandoned"), 10)
            assert task.data == b"z" and task.deliveries == 1
        finally:
            await pool.close()

    asyncio.run(scenario())


def test_no_broker_is_broker_unreachable_after_the_budget() -> None:
    async def scenario() -> None:
        pool = pool_of(free_url(), connect_timeout_secs=0.5)
        with pytest.raises(errors.BrokerUnreachable, match=r"no broker at .* after \d+ attempts"):
            await pool.request(calls.ping(), None)

    asyncio.run(scenario())


def test_a_closed_pool_refuses_calls(broker: BrokerProcess) -> None:
    async def scenario() -> None:
        pool = pool_of(broker.url)
        await pool.request(calls.ping(), 10)
        await pool.close()
        assert pool.closed
        with pytest.raises(errors.BrokerUnreachable, match="closed"):
            await pool.request(calls.ping(), 10)

    asyncio.run(scenario())


def test_each_event_loop_gets_its_own_connection(broker: BrokerProcess) -> None:
    pool = pool_of(broker.url)
    for _ in range(2):  # the second run's loop cannot use the first one's connection
        asyncio.run(pool.request(calls.ping(), 10))
    asyncio.run(pool.close())


def test_a_request_that_never_left_is_sent_again_after_the_broker_restarts(broker: BrokerProcess) -> None:
    async def scenario() -> None:
        pool = pool_of(broker.url)
        try:
            await pool.request(calls.enqueue("again", b"before"), 10)
            broker.kill()  # blocks the loop: the pool finds the connection dropped when it next sends
            broker.restart()
            await pool.request(calls.enqueue("again", b"after"), 10)
        finally:
            await pool.close()

    asyncio.run(scenario())
    with Client(broker.url) as client:
        assert [task.data for task in client.peek("again")] == [b"before", b"after"]


# ------------------------------------------------ close() during a reconnect


async def reconnecting(pool: AsyncPool, callers: int) -> list[asyncio.Task[object]]:
    """`callers` calls waiting for a broker that is gone: one in the backoff, the others behind it."""
    waiting: list[asyncio.Task[object]] = [asyncio.create_task(pool.request(calls.ping(), None)) for _ in range(callers)]
    await asyncio.sleep(0.3)  # past the first attempts: the backoff has begun
    assert not any(task.done() for task in waiting)
    return waiting


def test_close_from_another_task_ends_a_reconnect_at_once(broker: BrokerProcess) -> None:
    async def scenario() -> None:
        pool = pool_of(broker.url)
        await pool.request(calls.ping(), 10)
        broker.kill()
        waiting = await reconnecting(pool, callers=3)
        await pool.close()
        done, pending = await asyncio.wait(waiting, timeout=ENDS_WITHIN_SECS)
        assert not pending, f"still reconnecting {ENDS_WITHIN_SECS}s after close()"
        for task in done:
            error = task.exception()
            assert isinstance(error, errors.BrokerUnreachable) and "closed" in error.message

    asyncio.run(scenario())


def test_close_from_another_thread_ends_a_reconnect_at_once(broker: BrokerProcess) -> None:
    pool = pool_of(broker.url)
    loop = asyncio.new_event_loop()
    outcome: list[BaseException] = []
    in_backoff = threading.Event()

    async def call() -> None:
        await pool.request(calls.ping(), 10)
        broker.kill()
        waiting = await reconnecting(pool, callers=1)
        in_backoff.set()
        try:
            await waiting[0]
        except errors.KittiwakeError as exc:
            outcome.append(exc)

    thread = threading.Thread(target=loop.run_until_complete, args=(call(),))
    thread.start()
    try:
        assert in_backoff.wait(timeout=30)
        asyncio.run(pool.close())  # another thread, another loop: the pause is woken thread-safely
        thread.join(timeout=ENDS_WITHIN_SECS)
        assert not thread.is_alive(), f"still reconnecting {ENDS_WITHIN_SECS}s after close()"
    finally:
        thread.join(timeout=2 * CONNECT_BUDGET_SECS)
        loop.close()
    [error] = outcome
    assert isinstance(error, errors.BrokerUnreachable) and "closed while connecting" in str(error)


def test_a_cancel_that_meets_the_reply_still_cancels(broker: BrokerProcess) -> None:
    """A request task cancelled in the very turn its reply arrives must end cancelled: on Python 3.11
    `asyncio.wait_for` returned the reply and swallowed the cancellation, so a loop of requests being
    cancelled at shutdown went on (the class of hang the announcer had)."""

    async def scenario() -> None:
        pool = pool_of(broker.url)
        await pool.request(calls.enqueue("met", b"first"), 10)  # connected
        connection = pool._connection
        assert connection is not None
        sending = connection.send
        caller: list[asyncio.Task[Any]] = []

        def send_then_cancel_on_reply(request_id: int, frame: bytes) -> asyncio.Future[Any]:
            future = sending(request_id, frame)
            future.add_done_callback(lambda _reply: caller[0].cancel())  # in the turn the reply lands
            return future

        connection.send = send_then_cancel_on_reply  # type: ignore[method-assign]
        try:
            task = asyncio.create_task(pool.request(calls.enqueue("met", b"second"), 10))
            caller.append(task)
            with pytest.raises(asyncio.CancelledError):
                await asyncio.wait_for(task, ENDS_WITHIN_SECS)
        finally:
            connection.send = sending  # type: ignore[method-assign]
            await pool.close()

    asyncio.run(scenario())
