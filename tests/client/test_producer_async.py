"""`AsyncClient.producer()`: the batching producer on the asyncio client follows the same rules
(why a batch goes out read from `stats.sends`; the broker paused with SIGSTOP to hold batches in flight)."""

from __future__ import annotations

import asyncio
import os
import signal

import pytest

from kittiwake import AsyncClient, Client, errors
from kittiwake.constants import JOINS_QUEUE
from support.broker_process import BrokerProcess

WAIT_SECS = 30.0


async def until(condition, what: str) -> None:  # type: ignore[no-untyped-def]
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WAIT_SECS
    while not condition():
        if loop.time() > deadline:
            raise AssertionError(f"not within {WAIT_SECS} s: {what}")
        await asyncio.sleep(0.005)


def test_idle_size_and_reply_sends_keep_the_order(broker: BrokerProcess) -> None:
    async def scenario() -> list[str]:
        async with AsyncClient(broker.url) as client:
            async with client.producer(linger_ms=60_000, max_batch_tasks=4) as producer:
                first = await producer.enqueue("async", b"first")
                await first.sent(timeout=WAIT_SECS)
                os.kill(broker.pid, signal.SIGSTOP)
                try:
                    handles = [await producer.enqueue("async", b"%d" % i) for i in range(7)]
                    # one alone (idle), four full (size); two gather until a reply frees a place
                    assert producer.stats.sends == {"idle": 2, "size": 1, "linger": 0, "reply": 0, "flush": 0}
                finally:
                    os.kill(broker.pid, signal.SIGCONT)
                await handles[-1].sent(timeout=WAIT_SECS)
                assert producer.stats.sends["reply"] == 1
                return [(await handle.sent()).pid for handle in [first, *handles]]

    pids = asyncio.run(scenario())
    assert pids == sorted(pids) and len(set(pids)) == 8
    with Client(broker.url) as client:
        assert [task.data for task in client.peek("async", 100)] == [b"first", *(b"%d" % i for i in range(7))]


def test_a_lingering_batch_goes_out_behind_the_one_in_flight(broker: BrokerProcess) -> None:
    async def scenario() -> None:
        async with AsyncClient(broker.url) as client:
            producer = client.producer(linger_ms=20)
            await (await producer.enqueue("lingering", b"warm")).sent(timeout=WAIT_SECS)
            os.kill(broker.pid, signal.SIGSTOP)
            try:
                await producer.enqueue("lingering", b"first")
                await producer.enqueue("lingering", b"second")
                await until(lambda: producer.stats.sends["linger"] == 1, "the lingering batch sent")
            finally:
                os.kill(broker.pid, signal.SIGCONT)
            await producer.close()

    asyncio.run(scenario())


def test_a_refused_batch_fails_its_tasks_and_a_full_buffer_refuses(broker: BrokerProcess) -> None:
    async def scenario() -> None:
        async with AsyncClient(broker.url) as client:
            producer = client.producer(max_batch_tasks=2, max_buffer_tasks=3, block=False, linger_ms=60_000)
            await (await producer.enqueue("fine", b"warm")).sent(timeout=WAIT_SECS)
            os.kill(broker.pid, signal.SIGSTOP)
            try:
                await producer.enqueue("fine", b"alone")
                good = await producer.enqueue("fine", b"good")
                bad = await producer.enqueue(JOINS_QUEUE, b"not yours")
                with pytest.raises(errors.ProducerFull):
                    await producer.enqueue("fine", b"too many")
            finally:
                os.kill(broker.pid, signal.SIGCONT)
            for handle in (good, bad):
                with pytest.raises(errors.BadRequest):
                    await handle.sent(timeout=WAIT_SECS)
            with pytest.raises(errors.BadRequest, match="2 task"):
                await producer.flush()
            await producer.close()
            with pytest.raises(errors.ProducerClosed):
                await producer.enqueue("fine", b"late")
            with pytest.raises(errors.BadRequest):
                await producer.enqueue("bad name!", b"x")
            with pytest.raises(errors.BadRequest):
                client.producer(linger_ms=-1)

    asyncio.run(scenario())
