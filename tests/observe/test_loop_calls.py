"""`observe.loop_calls`: plain code in a worker thread whose reads run on a real event loop.

A loop runs in a background thread of its own, as the broker's does; the
test hands it work from the outside and checks where each part ran.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any, Iterator

import pytest

from kittiwake import errors
from kittiwake.observe.loop_calls import LoopCalls

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    running = asyncio.new_event_loop()
    thread = threading.Thread(target=running.run_forever, daemon=True)
    thread.start()
    yield running
    running.call_soon_threadsafe(running.stop)
    thread.join(timeout=10)
    running.close()


def on(loop: asyncio.AbstractEventLoop, coroutine: Any) -> Any:
    return asyncio.run_coroutine_threadsafe(coroutine, loop).result(timeout=10)


def test_the_work_runs_in_a_thread_and_its_reads_on_the_loop(loop: asyncio.AbstractEventLoop) -> None:
    async def make() -> LoopCalls:
        return LoopCalls(asyncio.get_running_loop())

    async def ident() -> int:
        return threading.get_ident()

    calls: LoopCalls = on(loop, make())
    loop_thread = on(loop, ident())

    def work() -> tuple[int, int]:
        read_on = calls.call(threading.get_ident)
        with pytest.raises(errors.TaskNotFound):  # a read's error comes back to the work as it was raised
            calls.call(lambda: (_ for _ in ()).throw(errors.TaskNotFound("no such task")))
        return threading.get_ident(), read_on

    async def run() -> tuple[int, int]:
        return await calls.run(work)

    worked_on, read_on = on(loop, run())
    assert read_on == loop_thread and worked_on != loop_thread and calls.calls == 2
    calls.close()


def test_reads_waiting_when_it_closes_fail_unavailable(loop: asyncio.AbstractEventLoop) -> None:
    async def make() -> LoopCalls:
        return LoopCalls(asyncio.get_running_loop())

    calls: LoopCalls = on(loop, make())
    release = threading.Event()
    loop.call_soon_threadsafe(release.wait, 10)  # the loop is busy: the next read waits behind it
    outcome: list[BaseException] = []

    def read() -> None:
        try:
            calls.call(lambda: "never")
        except errors.Unavailable as error:
            outcome.append(error)

    reader = threading.Thread(target=read)
    reader.start()
    while not calls.waiting:  # the read is waiting for the loop
        threading.Event().wait(0.005)
    calls.close()  # from here, as the observer closes it when the broker stops
    release.set()
    reader.join(timeout=10)
    assert len(outcome) == 1 and calls.calls == 0
    with pytest.raises(errors.Unavailable):
        calls.call(lambda: "after the end")
