"""Leasing the next messages while the consumer runs the current ones.

A consumer that asked the broker for its next message only when it was idle
would wait one round trip — a commit on the broker's disk — between batches.
So the connection keeps one lease request in flight on a thread of its own:
the moment a delivery leaves room under the consumer's prefetch limit, it
leases that many more (without waiting), and when the consumer runs out it
waits on that request, or on a long-poll, instead of asking anew. The acks
waiting go out beside each request (`LeaseBook.flush_soon`), so the broker
commits both in one group commit. Leased messages wait in `ready` until kombu asks for
them; together with the unacked ones they never exceed the prefetch limit.
"""

from __future__ import annotations

import collections
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout

from kittiwake.client import Client, LeasedTask
from kittiwake.kombu.lease_book import LeaseBook


class Prefetch:
    """One lease request in flight at a time, and the messages it brought."""

    def __init__(self, broker: Client, leases: LeaseBook) -> None:
        self._broker = broker
        self._leases = leases
        self._executor: ThreadPoolExecutor | None = None
        self._in_flight: Future[list[LeasedTask]] | None = None
        self.in_flight_tasks = 0  # how many the request in flight may bring
        self.ready: collections.deque[LeasedTask] = collections.deque()

    @property
    def in_flight(self) -> bool:
        return self._in_flight is not None

    def start(self, queues: list[str], max_tasks: int, wait_secs: float) -> None:
        """Ask for up to `max_tasks` messages of `queues`, waiting up to `wait_secs` for the first."""
        assert self._in_flight is None
        if self._executor is None:
            self._executor = ThreadPoolExecutor(1, thread_name_prefix="kittiwake-kombu-prefetch")
        lease_secs = self._leases.lease_secs

        def lease() -> list[LeasedTask]:
            self._leases.flush_soon()
            return self._broker.lease(queues, max_tasks=max_tasks, lease_secs=lease_secs, wait_secs=wait_secs)

        self._in_flight = self._executor.submit(lease)
        self.in_flight_tasks = max_tasks

    def collect(self, timeout: float | None) -> bool:
        """Wait up to `timeout` for the request in flight; True once its messages are in `ready`.
        A failed request raises here (a connection error reaches kombu, which reconnects)."""
        future = self._in_flight
        if future is None:
            return True
        try:
            tasks = future.result(timeout=timeout)
        except FutureTimeout:
            return False
        finally:
            if future.done():
                self._in_flight = None
                self.in_flight_tasks = 0
        self.ready.extend(tasks)
        return True

    def done(self) -> bool:
        return self._in_flight is not None and self._in_flight.done()

    def close(self, timeout: float) -> list[LeasedTask]:
        """Stop; the messages leased and never delivered, for the caller to give back."""
        left: list[LeasedTask] = list(self.ready)
        self.ready.clear()
        if self._in_flight is not None:
            try:
                left.extend(self._in_flight.result(timeout=timeout))
            except Exception:
                pass  # lost or still waiting: such leases run out and their messages come back
            self._in_flight = None
        if self._executor is not None:
            self._executor.shutdown(wait=False)
        return left
