"""A client closed while its broker is gone stops at once: `close()` from another thread ends a call
that waits out a reconnect backoff (or retransmits, over UDP) instead of leaving it to the connect
timeout (10 s) — what a worker told to stop relies on.

Each test kills the broker, starts a call in a thread, closes the client from the main thread and
expects the call to end well within the connect timeout, with a clear error.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Iterator

import pytest

from kittiwake import AsyncClient, Client, errors
from support.broker_process import BrokerProcess

# far above how long a closed client may take to end a call, far below the 10 s connect timeout
ENDS_WITHIN_SECS = 3.0
IN_BACKOFF_SECS = 0.3  # the call has made its first attempts and is waiting to retry


def call_in_thread(call: Callable[[], object]) -> tuple[threading.Thread, list[BaseException]]:
    """Run `call` in a thread; what it raised lands in the list."""
    raised: list[BaseException] = []

    def run() -> None:
        try:
            call()
        except BaseException as exc:  # noqa: BLE001 - the test reads it
            raised.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, raised


def ends_soon(thread: threading.Thread) -> None:
    thread.join(timeout=ENDS_WITHIN_SECS)
    assert not thread.is_alive(), f"the call still runs {ENDS_WITHIN_SECS}s after close()"


def test_close_ends_a_call_waiting_to_reconnect(broker: BrokerProcess) -> None:
    client = Client(broker.url)
    client.ping()
    broker.kill()
    thread, raised = call_in_thread(lambda: client.enqueue("gone", b"x"))
    time.sleep(IN_BACKOFF_SECS)
    assert thread.is_alive(), "the call should be retrying the connection"
    client.close()
    ends_soon(thread)
    [error] = raised
    assert isinstance(error, errors.BrokerUnreachable)
    assert "closed while connecting" in error.message and "not sent" in error.message


def test_close_ends_every_thread_waiting_to_reconnect(broker: BrokerProcess) -> None:
    client = Client(broker.url)
    broker.kill()
    started = [call_in_thread(lambda: client.lease("gone", wait_secs=5)) for _ in range(4)]
    time.sleep(IN_BACKOFF_SECS)
    client.close()
    for thread, raised in started:
        ends_soon(thread)
        assert [type(error) for error in raised] == [errors.BrokerUnreachable]


def test_close_ends_an_async_call_waiting_to_reconnect(broker: BrokerProcess) -> None:
    client = AsyncClient(broker.url)
    loop = asyncio.new_event_loop()
    running = threading.Thread(target=loop.run_forever, daemon=True)
    running.start()
    try:
        asyncio.run_coroutine_threadsafe(client.ping(), loop).result(timeout=30)
        broker.kill()
        call = asyncio.run_coroutine_threadsafe(client.enqueue("gone", b"x"), loop)
        time.sleep(IN_BACKOFF_SECS)
        assert not call.done(), "the call should be retrying the connection"
        asyncio.run_coroutine_threadsafe(client.close(), loop).result(timeout=ENDS_WITHIN_SECS)
        with pytest.raises(errors.BrokerUnreachable, match="closed while connecting"):
            call.result(timeout=ENDS_WITHIN_SECS)
    finally:
        loop.call_soon_threadsafe(loop.stop)
        running.join(timeout=30)
        loop.close()


def test_close_ends_a_producer_waiting_to_reconnect(broker: BrokerProcess) -> None:
    client = Client(broker.url)
    producer = client.producer()
    producer.enqueue("gone", b"first").sent(timeout=30)
    broker.kill()
    time.sleep(IN_BACKOFF_SECS)  # the producer's thread sees its connection end, and waits for work
    sending = producer.enqueue("gone", b"unsent")
    thread, raised = call_in_thread(lambda: sending.sent(timeout=30))
    time.sleep(IN_BACKOFF_SECS)
    assert thread.is_alive(), "the producer should be retrying the connection"
    client.close()
    ends_soon(thread)
    [error] = raised
    # never sent: the task is not enqueued, and says why
    assert isinstance(error, errors.BrokerUnreachable) and "closed while connecting" in error.message
    producer.close(timeout=5)


@pytest.fixture
def udp_broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path / "data", extra_args=["--udp-port", "0"])
    try:
        yield process
    finally:
        process.kill()


def test_close_ends_a_udp_call_retransmitting_to_a_gone_broker(udp_broker: BrokerProcess) -> None:
    client = Client(udp_broker.udp_url)
    client.ping()
    udp_broker.kill()
    thread, raised = call_in_thread(lambda: client.enqueue("gone", b"x"))
    time.sleep(IN_BACKOFF_SECS)
    assert thread.is_alive(), "the call should be retransmitting"
    client.close()
    ends_soon(thread)
    [error] = raised
    # the datagram left: the outcome is unknown
    assert isinstance(error, errors.ConnectionLost) and "closed before the reply" in error.message
