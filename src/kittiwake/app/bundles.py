"""Sending bundles of tasks: one enqueue request in flight while the submitter prepares the next.

`App.map` submits `chunk` tasks per request (CloudKon's task bundling).
Preparing a bundle — ids, headers, the encoded calls, the handles — is the
submitter's work; storing it is the broker's. Done one after the other, a bulk
submit runs at the pace of the sum. A `BundleSender` sends each bundle from a
thread of its own (its own pooled connection), so the submitter prepares
bundle k + 1 while the broker stores bundle k, on another core: a bulk submit
runs at the pace of the slower of the two, the broker.

One bundle at a time is in flight, so bundles reach the broker in the order
they were made, and a failure stops the submission where it happened: the
bundles before the one that failed are enqueued, none after it is sent.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable, Generic, TypeVar

Bundle = TypeVar("Bundle")


class BundleSender(Generic[Bundle]):
    """Calls `send(bundle)` in a background thread, one bundle at a time; use it as a context manager."""

    def __init__(self, send: Callable[[Bundle], Any]) -> None:
        self._send = send
        self._executor: ThreadPoolExecutor | None = None
        self._in_flight: Future[Any] | None = None

    def send(self, bundle: Bundle) -> None:
        """Send `bundle` once the one before it has been answered; raises that one's error, if it failed
        (and then `bundle` is not sent)."""
        self.wait()
        if self._executor is None:
            self._executor = ThreadPoolExecutor(1, thread_name_prefix="kittiwake-bundles")
        self._in_flight = self._executor.submit(self._send, bundle)

    def wait(self) -> None:
        """Wait for the bundle in flight; raises its error, if it failed."""
        in_flight, self._in_flight = self._in_flight, None
        if in_flight is not None:
            in_flight.result()

    def close(self) -> None:
        """Wait for the bundle in flight (raising its error) and stop the thread."""
        try:
            self.wait()
        finally:
            if self._executor is not None:
                self._executor.shutdown(wait=True)
                self._executor = None

    def __enter__(self) -> BundleSender[Bundle]:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc_info: object) -> None:
        if exc_type is None:
            self.close()
            return
        try:  # the submitter failed: still let the bundle in flight finish, and raise the first error
            self.close()
        except Exception:
            pass
