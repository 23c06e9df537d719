"""Leasing the next messages while the consumer runs the current ones.

A consumer that asked the broker for its next messages only when it was idle
would wait one round trip — a commit on the broker's disk — between batches,
and kombu's prefetch limit (Celery: 4 per process) caps a batch. So the
connection keeps lease requests in flight on threads of its own: the moment a
delivery leaves room under the consumers' prefetch limit, it leases that many
more without waiting (up to `MAX_IN_FLIGHT` requests at once, so the round
trips overlap; while one is on its way the next waits for half the window to
be free, so a request carries a few messages, not one), and when the consumer runs out it waits on those requests, or
on a long-poll, instead of asking anew. The acks waiting go out beside each
request (`LeaseBook.flush_soon`), so the broker commits both in one group
commit. Leased messages wait in `ready` until kombu asks for them, their
leases renewed meanwhile (`LeaseBook.expect`); with the
ones in flight and the unacked ones they never exceed the prefetch limit.
"""

from __future__ import annotations

import collections
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait

from kittiwake.client import LeasedTask
from kittiwake.client.interfaces import QueueClient
from kittiwake.kombu.lease_book import LeaseBook

MAX_IN_FLIGHT = 4
"""Lease requests one connection keeps in flight at once."""


class Prefetch:
    """The lease requests in flight, and the messages they brought."""

    def __init__(self, broker: QueueClient, leases: LeaseBook) -> None:
        self._broker = broker
        self._leases = leases
        self._executor: ThreadPoolExecutor | None = None
        self._in_flight: dict[Future[list[LeasedTask]], int] = {}  # request -> the most it may bring
        self.ready: collections.deque[LeasedTask] = collections.deque()

    @property
    def in_flight(self) -> bool:
        return bool(self._in_flight)

    @property
    def in_flight_tasks(self) -> int:
        """How many messages the requests in flight may bring together."""
        return sum(self._in_flight.values())

    def can_start(self) -> bool:
        return len(self._in_flight) < MAX_IN_FLIGHT

    def start(self, queues: list[str], max_tasks: int, wait_secs: float) -> None:
        """Ask for up to `max_tasks` messages of `queues`, waiting up to `wait_secs` for the first."""
        if self._executor is None:
            self._executor = ThreadPoolExecutor(MAX_IN_FLIGHT, thread_name_prefix="kittiwake-kombu-prefetch")
        lease_secs = self._leases.lease_secs

        def lease() -> list[LeasedTask]:
            self._leases.flush_soon()
            return self._broker.lease(queues, max_tasks=max_tasks, lease_secs=lease_secs, wait_secs=wait_secs)

        self._in_flight[self._executor.submit(lease)] = max_tasks

    def collect(self, timeout: float | None) -> bool:
        """Wait up to `timeout` for a request in flight; True once the finished ones' messages are in
        `ready` (or none was in flight). A failed request raises here (a connection error reaches
        kombu, which reconnects)."""
        if not self._in_flight:
            return True
        done, _ = wait(list(self._in_flight), timeout=timeout, return_when=FIRST_COMPLETED)
        if not done:
            return False
        failure: BaseException | None = None
        for future in done:
            del self._in_flight[future]
            error = future.exception()
            if error is not None:
                failure = failure or error
            else:
                tasks = future.result()
                self._leases.expect(tasks)  # renewed while they wait in `ready`
                self.ready.extend(tasks)
        if failure is not None:
            raise failure
        return True

    def done(self) -> bool:
        return any(future.done() for future in self._in_flight)

    def close(self, timeout: float) -> list[LeasedTask]:
        """Stop; the messages leased and never delivered, for the caller to give back."""
        left: list[LeasedTask] = list(self.ready)
        self.ready.clear()
        if self._in_flight:
            done, _ = wait(list(self._in_flight), timeout=timeout)
            for future in done:
                if future.exception() is None:
                    left.extend(future.result())
            # the others are lost or still waiting: such leases run out and their messages come back
            self._in_flight.clear()
        if self._executor is not None:
            self._executor.shutdown(wait=False)
        return left
