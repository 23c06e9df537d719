"""Group commit on the event loop: when passes run, and where their replies go.

The asyncio shell around `passes.Passes`, which holds the policy (what a pass
runs, parks, commits and answers). Connections hand decoded requests to
`submit`; the first one since the last pass schedules a pass with `call_soon`,
so everything that arrives while the loop is busy — above all while a commit
runs — rides the next pass together. After a pass, the shell defers what the
pass could not answer on its connection, then writes each connection's
replies in one `transport.write` (`Connection.deliver`). The real clocks are
read here and handed to the passes. What a committed pass did (its tally of
task moves, its commit's time) goes to every listener added with
`on_commit` (the metrics of `kittiwake.observe`, say); each gets the function
that removes it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Callable, Sequence

from kittiwake.broker.connection import WRITE_BUFFER_HIGH
from kittiwake.broker.extensions import RequestExtension
from kittiwake.broker.pass_replies import Caller
from kittiwake.broker.passes import Item, PassLimits, PassOutcome, Passes
from kittiwake.engine import Engine, TaskStore
from kittiwake.engine.tally import Tally

log = logging.getLogger("kittiwake.broker")


class GroupCommit:
    """The passes of one broker, scheduled on its event loop."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        store: TaskStore,
        make_engine: Callable[[], Engine],
        max_frame: int,
        *,
        wall_clock: Callable[[], float] = time.time,
        monotonic_clock: Callable[[], float] = time.monotonic,
        extensions: Sequence[RequestExtension] = (),
    ) -> None:
        self.loop = loop
        self.store = store
        limits = PassLimits(max_frame=max_frame, max_held_bytes=WRITE_BUFFER_HIGH)
        self.passes = Passes(
            store, make_engine, limits, wall_clock=wall_clock, monotonic_clock=monotonic_clock, extensions=extensions
        )
        self._scheduled: asyncio.Handle | None = None
        self._commit_listeners: list[Callable[[Tally, float | None], None]] = []  # (moves, commit secs or None)

    # -------------------------------------------------------------- inputs

    def start(self, now: float) -> None:
        """Build the first engine from the store; raises if the store cannot be read."""
        self.passes.start(now)

    def on_commit(self, listener: Callable[[Tally, float | None], None]) -> Callable[[], None]:
        """Call `listener` with the tally and commit seconds of every committed pass; returns its removal."""
        self._commit_listeners.append(listener)

        def remove() -> None:
            if listener in self._commit_listeners:
                self._commit_listeners.remove(listener)

        return remove

    def submit(self, connection: Caller, item: Item) -> None:
        self.passes.submit(connection, item)
        self._schedule()

    def resubmit(self, connection: Caller, items: list[Item]) -> None:
        self.passes.resubmit(connection, items)
        self._schedule()

    def request_sweep(self) -> None:
        self.passes.request_sweep()
        self._schedule()

    def request_maintenance(self) -> None:
        self.passes.request_maintenance()
        self._schedule()

    def wake(self, queues: list[str] | None) -> None:
        """Other brokers changed these queues (None: perhaps any): parked long-polls look again."""
        self.passes.wake(queues)
        self._schedule()

    def wake_connection(self, connection: Caller) -> None:
        """`connection`'s output drained: its parked long-polls look again in the next pass."""
        self.passes.wake_connection(connection)
        self._schedule()

    def drop_connection(self, connection: Caller) -> None:
        self.passes.drop_connection(connection)

    def end_waits(self, connection: Caller) -> None:
        """Answer a half-closed connection's parked long-polls with an empty list, now."""
        frames = self.passes.end_waits(connection)
        if frames:
            connection.deliver(frames)

    def _schedule(self) -> None:
        if self._scheduled is None:
            self._scheduled = self.loop.call_soon(self.run_pass)

    def _unschedule(self) -> None:
        if self._scheduled is not None:
            self._scheduled.cancel()
            self._scheduled = None

    # ---------------------------------------------------------------- pass

    def run_pass(self) -> None:
        """One group-commit pass, then its replies; never raises."""
        self._scheduled = None
        outcome = self.passes.run()
        if outcome.tally is not None:
            for listener in list(self._commit_listeners):
                try:
                    listener(outcome.tally, outcome.commit_secs)
                except Exception:
                    log.exception("a listener of committed passes failed")
        if self.passes.pending or self.passes.long_polls.more:  # over a pass's bounds: the rest goes next
            self._schedule()
        self._deliver(outcome)

    def _deliver(self, outcome: PassOutcome) -> None:
        # deferred before the replies go: a delivery that drains the output resubmits them
        for connection, item in outcome.deferred:
            connection.defer(item)
        for connection, frames in outcome.replies.items():
            connection.deliver(frames)

    # ------------------------------------------------------------ shutdown

    def finish(self) -> None:
        """Shutdown: serve everything pending, answer every long-poll with nothing, close the store."""
        try:
            while self.passes.pending:
                self._unschedule()
                self.run_pass()
            self._unschedule()
            for connection, frames in self.passes.end_every_wait().items():
                connection.deliver(frames)
        finally:
            self.store.close()  # whatever failed above: the store lets its data directory go (`directory_lock`)
