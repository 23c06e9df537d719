"""Plain reading code run off the event loop, each of its reads answered on the loop.

`kittiwake.flow.runs` derives a run's state through the read calls of a
`Client` (`list_queues`, `peek`, `get`), one after another, as many as the
run's record names. The flows view runs that same code rather than a second
copy of it: in a worker thread (`LoopCalls.run`), where each read it makes is
handed to the event loop (`LoopCalls.call`) and answered there, between
group-commit passes, from the engine. The loop is so held for one read at a
time (one page of one queue), and serves everything else between them while
the thread waits; the engine is only ever touched on the loop.

At most `THREADS` such views run at once; the others wait their turn. A read
that the loop has not answered within `CALL_TIMEOUT_SECS`, or that was
waiting when the observer stopped (`close`), fails with UNAVAILABLE, so a
thread never outlives the broker's loop for long.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, TypeVar

from kittiwake import errors

T = TypeVar("T")

THREADS = 2
CALL_TIMEOUT_SECS = 30.0


class LoopCalls:
    """Worker threads for plain code whose reads run on `loop`."""

    def __init__(self, loop: asyncio.AbstractEventLoop, threads: int = THREADS,
                 call_timeout_secs: float = CALL_TIMEOUT_SECS) -> None:
        self.loop = loop
        self.call_timeout_secs = call_timeout_secs
        self._executor = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="kittiwake-views")
        self._waiting: set[concurrent.futures.Future[Any]] = set()  # reads of every result type
        self._lock = threading.Lock()
        self._closed = False
        self.calls = 0  # reads answered on the loop, for tests

    async def run(self, function: Callable[[], T]) -> T:
        """On the loop: `function()` in a worker thread, awaited."""
        if self._closed:
            raise errors.Unavailable("the broker is stopping")
        return await self.loop.run_in_executor(self._executor, function)

    def call(self, function: Callable[[], T]) -> T:
        """In a worker thread: `function()` run on the loop; its result, or the exception it raised."""
        future: concurrent.futures.Future[T] = concurrent.futures.Future()

        def answer() -> None:
            if not future.set_running_or_notify_cancel():
                return  # given up on (`close`)
            self.calls += 1
            try:
                result = function()
            except Exception as exc:
                future.set_exception(exc)
            else:
                future.set_result(result)

        with self._lock:
            if self._closed:
                raise errors.Unavailable("the broker is stopping")
            self._waiting.add(future)
        try:
            try:
                self.loop.call_soon_threadsafe(answer)
            except RuntimeError:  # the loop is closed
                raise errors.Unavailable("the broker is stopping") from None
            try:
                return future.result(self.call_timeout_secs)
            except (concurrent.futures.CancelledError, concurrent.futures.TimeoutError):
                future.cancel()  # the loop is stopping or stuck: give up on this read
                raise errors.Unavailable("the broker's loop did not answer a read of this view") from None
        finally:
            with self._lock:
                self._waiting.discard(future)

    @property
    def waiting(self) -> int:
        """Reads handed to the loop and not answered yet."""
        return len(self._waiting)

    def close(self) -> None:
        """Fail the reads waiting for the loop and take no more work (the threads end as their work fails)."""
        with self._lock:
            self._closed = True
            waiting = list(self._waiting)
        for future in waiting:
            future.cancel()
        self._executor.shutdown(wait=False, cancel_futures=True)
