"""`AsyncClient.producer()`: the batching producer on the asyncio client follows the same rules
(why a batch goes out read from `stats.sends`; the broker paused with SIGSTOP to hold batches in flight)."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import pytest

from kittiwake import AsyncClient, Client, errors
from kittiwake.constants import JOINS_QUEUE
from support.auth_users import PRODUCER, ROOT, write_auth_file
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


def test_a_refused_task_fails_alone_and_a_full_buffer_refuses(broker: BrokerProcess) -> None:
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
            # the batch of both was refused whole (BAD_REQUEST): sent again by queue, only the bad one fails
            assert (await good.sent(timeout=WAIT_SECS)).queue == "fine"
            with pytest.raises(errors.BadRequest, match="_joins"):
                await bad.sent(timeout=WAIT_SECS)
            with pytest.raises(errors.BadRequest, match="1 task"):
                await producer.flush()
            assert (producer.stats.split_sends, producer.stats.tasks_failed) == (2, 1)
            await producer.close()
            with pytest.raises(errors.ProducerClosed):
                await producer.enqueue("fine", b"late")
            with pytest.raises(errors.BadRequest):
                await producer.enqueue("bad name!", b"x")
            with pytest.raises(errors.BadRequest):
                client.producer(linger_ms=-1)

    asyncio.run(scenario())


def test_a_task_into_a_forbidden_queue_fails_alone_and_the_rest_of_its_batch_is_enqueued(tmp_path: Path) -> None:
    auth = write_auth_file(tmp_path / "users.json", {
        ROOT[0]: (ROOT[1], {"*": ["all"]}), PRODUCER[0]: (PRODUCER[1], {"tests.*": ["produce"]})})

    async def scenario(broker: BrokerProcess) -> list[str]:
        async with AsyncClient(broker.client_url(*PRODUCER)) as client:
            async with client.producer(linger_ms=60_000) as producer:
                await (await producer.enqueue("tests.warm", b"warm")).sent(timeout=WAIT_SECS)
                os.kill(broker.pid, signal.SIGSTOP)
                try:  # one task in flight alone; the 101 after it gather into one batch
                    await producer.enqueue("tests.warm", b"alone")
                    good = [await producer.enqueue("tests.good", b"good-%03d" % i) for i in range(50)]
                    bad = await producer.enqueue("other.queue", b"bad")
                    good += [await producer.enqueue("tests.good", b"good-%03d" % i) for i in range(50, 100)]
                finally:
                    os.kill(broker.pid, signal.SIGCONT)
                with pytest.raises(errors.Forbidden, match="other.queue"):
                    await bad.sent(timeout=WAIT_SECS)
                pids = [(await handle.sent(timeout=WAIT_SECS)).pid for handle in good]
                with pytest.raises(errors.Forbidden, match="1 task"):
                    await producer.flush()
                assert (producer.stats.batches_sent, producer.stats.split_sends) == (3, 2)
                return pids

    with BrokerProcess(tmp_path / "data", auth_file=auth) as broker:
        pids = asyncio.run(scenario(broker))
        with Client(broker.client_url(*ROOT)) as root:
            assert [task.data for task in root.peek("tests.good", 1000)] == [b"good-%03d" % i for i in range(100)]
            assert [task.pid for task in root.peek("tests.good", 1000)] == pids
            assert root.stats(["other.queue"])[0].size == 0
