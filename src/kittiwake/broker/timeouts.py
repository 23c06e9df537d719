"""Deadlines of client connections: a frame must arrive whole in time, and an idle connection goes.

* Frame timeout: a frame whose first byte arrived more than
  `frame_timeout_secs` ago and that is still incomplete gets one
  `FRAME_TIMEOUT` error frame with id 0, and the connection is closed. A
  client that sends a length prefix and half a frame, or trickles a byte now
  and then (slowloris), holds nothing for longer than that. The clock runs
  while the broker is not reading from the connection too (its output is
  full, or the read budget stopped it): a frame that cannot complete in time
  for any reason frees its bytes for the others.
* Idle timeout: a connection with nothing in flight — no request received and
  unanswered (a parked long-poll counts as in flight), no reply waiting to be
  sent, no partial frame — for `idle_timeout_secs` gets one `IDLE_TIMEOUT`
  error frame with id 0 and is closed. Nothing is lost: the broker decides
  between two reads, so every request it received has been answered. Clients
  check a pooled connection before reusing it and connect again. 0 turns the
  idle timeout off.

One timer walks every connection a few times per timeout (at least once a
second), which is cheaper than a timer per connection at ten thousand
connections, and at most a second late; it also drives the read budget's
progress check.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Callable, Iterable

from kittiwake import errors
from kittiwake.broker.connection import Connection
from kittiwake.broker.read_budget import ReadBudget

log = logging.getLogger("kittiwake.broker")

MAX_CHECK_SECS = 1.0
MIN_CHECK_SECS = 0.02
PROGRESS_CHECK_SECS = 1.0  # the read budget's finisher must receive something this often


def expired(connection: Connection, now: float, frame_timeout_secs: float, idle_timeout_secs: float) -> errors.KittiwakeError | None:
    """The error to close `connection` with at `now` (monotonic seconds), or None."""
    started = connection.frame_started_at
    if started is not None and now - started > frame_timeout_secs:
        return errors.FrameTimeout(f"a frame was not completed within {frame_timeout_secs:g} s")
    if (
        idle_timeout_secs
        and started is None
        and connection.unanswered <= 0
        and not connection.deferred
        and now - connection.active_at > idle_timeout_secs
        and (connection.transport is None or connection.transport.get_write_buffer_size() == 0)
    ):
        return errors.IdleTimeout(f"nothing in flight for {idle_timeout_secs:g} s")
    return None


class ConnectionTimeouts:
    """The timer that closes connections past their deadlines."""

    def __init__(
        self,
        connections: Callable[[], Iterable[Connection]],
        budget: ReadBudget,
        frame_timeout_secs: float,
        idle_timeout_secs: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.connections = connections
        self.budget = budget
        self.frame_timeout_secs = frame_timeout_secs
        self.idle_timeout_secs = idle_timeout_secs
        self.clock = clock
        timeouts = [frame_timeout_secs] + ([idle_timeout_secs] if idle_timeout_secs else [])
        self.check_secs = max(MIN_CHECK_SECS, min(MAX_CHECK_SECS, min(timeouts) / 4))
        self._handle: asyncio.TimerHandle | None = None
        self._progress_checked_at = clock()
        self.closed = 0

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._handle = loop.call_later(self.check_secs, self._tick, loop)

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _tick(self, loop: asyncio.AbstractEventLoop) -> None:
        try:
            self.check(self.clock())
        except Exception:  # the timer must keep running
            log.exception("checking connection deadlines failed")
        self._handle = loop.call_later(self.check_secs, self._tick, loop)

    def check(self, now: float) -> None:
        """Close every connection past a deadline; let the read budget check its finisher."""
        for connection in list(self.connections()):
            if connection.closed:
                continue
            error = expired(connection, now, self.frame_timeout_secs, self.idle_timeout_secs)
            if error is not None:
                log.info("closing %s: %s", connection.peer, error.message)
                self.closed += 1
                connection.fail(error)
                transport = connection.transport
                if transport is not None and transport.get_write_buffer_size() > 0:
                    transport.abort()  # a client that does not read must not keep its socket open
        if now - self._progress_checked_at >= PROGRESS_CHECK_SECS:
            self._progress_checked_at = now
            self.budget.check_progress()
