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

import threading
from typing import Any, Callable, Generic, TypeVar

Bundle = TypeVar("Bundle")


class BundleSender(Generic[Bundle]):
    """Calls `send(bundle)` in a background thread, one bundle at a time; use it as a context manager.

    The thread is a daemon, started on the first bundle: a process may exit with a request in
    flight, as it may from any other blocking call.
    """

    def __init__(self, send: Callable[[Bundle], Any], name: str = "kittiwake-bundles") -> None:
        self._send = send
        self._name = name
        self._changed = threading.Condition()
        self._next: list[Bundle] = []  # the bundle handed over and not yet taken (at most one)
        self._busy = False  # a bundle handed over has not been answered yet
        self._error: BaseException | None = None
        self._closed = False
        self._thread: threading.Thread | None = None

    def send(self, bundle: Bundle) -> None:
        """Send `bundle` once the one before it has been answered; raises that one's error, if it failed
        (and then `bundle` is not sent)."""
        self.wait()
        with self._changed:
            if self._closed:
                raise RuntimeError("the bundle sender is closed")
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()
            self._next.append(bundle)
            self._busy = True
            self._changed.notify_all()

    def wait(self) -> None:
        """Wait for the bundle in flight; raises its error, if it failed."""
        with self._changed:
            self._changed.wait_for(lambda: not self._busy)
            error, self._error = self._error, None
        if error is not None:
            raise error

    def close(self) -> None:
        """Wait for the bundle in flight (raising its error) and stop the thread."""
        try:
            self.wait()
        finally:
            with self._changed:
                self._closed = True
                self._changed.notify_all()

    def _run(self) -> None:
        while True:
            with self._changed:
                self._changed.wait_for(lambda: self._next or self._closed)
                if not self._next:
                    return
                bundle = self._next.pop()
            error: BaseException | None = None
            try:
                self._send(bundle)
            except BaseException as exc:  # handed to the submitter's next call
                error = exc
            with self._changed:
                self._error = error
                self._busy = False
                self._changed.notify_all()

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
