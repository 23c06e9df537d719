"""The broker's request path in one process, without sockets: bytes in, reply frames out.

A real `Connection` (framing, decoding, backpressure, half-close) hands its
requests to a real `GroupCommit` (the pass, long-polls, cancel_wait, reply
budget, commit) over a real `Engine` on the `MemoryStore`; only the socket is
replaced, by `MemoryTransport`, which keeps what the broker writes. The event
loop is a plain asyncio loop stepped by hand, and the broker's clock is a
`HandClock` that only the caller moves, so one byte string always makes the
same run. `tick` asks for what the server's timer asks for (a sweep, and
maintenance), as `Broker._tick` does.

Whatever the broker logs at ERROR or above (a bug caught in a pass, a decoder
that raised) is kept in `errors_logged`: the broker survives those, but they
are bugs.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from kittiwake.broker.connection import Connection
from kittiwake.broker.config import DEFAULT_MAX_BUFFERED_MB
from kittiwake.broker.group_commit import GroupCommit
from kittiwake.broker.read_budget import ReadBudget
from kittiwake.engine import Engine
from kittiwake.model import Limits
from kittiwake.protocol import FrameReader, Reply, decode_reply
from kittiwake.protocol.messages import Request
from kittiwake.store.memory import MemoryStore

START_SECS = 1_700_000_000.0
PEER = ("127.0.0.1", 40_000)
MAX_LOOP_ROUNDS = 1_000  # passes one settle may take before the broker is taken to spin


class HandClock:
    """The broker's wall and monotonic clocks while the run lasts, moved by hand."""

    def __init__(self, now: float = START_SECS) -> None:
        self.now = now

    def time(self) -> float:
        return self.now

    def monotonic(self) -> float:
        return self.now - START_SECS


class MemoryTransport:
    """The transport a connection writes to: keeps the bytes, closes as asyncio's would."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.protocol: Connection | None = None
        self.written = bytearray()
        self.reading = True
        self._closing = False

    def write(self, data: bytes) -> None:
        assert not self._closing, "a write after close"
        self.written += data

    def is_closing(self) -> bool:
        return self._closing

    def close(self) -> None:
        if not self._closing:
            self._closing = True
            assert self.protocol is not None
            self.loop.call_soon(self.protocol.connection_lost, None)

    abort = close

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return PEER if name == "peername" else default


class ErrorLog(logging.Handler):
    """Keeps the broker's ERROR records, with their tracebacks."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(logging.Formatter().format(record))


class SocketlessBroker:
    """One broker and one client connection to it; use as a context manager."""

    def __init__(self, *, max_frame: int, head_tasks: int = 4, cache_bytes: int = 64 * 1024) -> None:
        self.clock = HandClock()
        self.loop = asyncio.new_event_loop()
        self.store = MemoryStore()
        self.max_frame = max_frame
        self.budget = ReadBudget(DEFAULT_MAX_BUFFERED_MB * 1024 * 1024, max_frame)
        store = self.store

        def make_engine() -> Engine:
            return Engine(store, limits=Limits(), head_tasks=head_tasks, cache_bytes=cache_bytes)

        self.group = GroupCommit(self.loop, store, make_engine, max_frame,
                                 wall_clock=self.clock.time, monotonic_clock=self.clock.monotonic)
        self.transport = MemoryTransport(self.loop)
        self.connection = Connection(self)
        self.transport.protocol = self.connection
        self.replies_read = 0
        self._replies = FrameReader(max_frame=(1 << 32) - 1)
        self._error_log = ErrorLog()

    # ------------------------------------------------------ ConnectionHost

    def admit(self, connection: Connection) -> str | None:
        return None

    def admit_user(self, connection: Connection, user: str) -> str | None:
        return None

    def submit(self, connection: Connection, item: Request | bytes) -> None:
        self.group.submit(connection, item)

    def resubmit(self, connection: Connection, items: list[Request | bytes]) -> None:
        self.group.resubmit(connection, items)

    def forget(self, connection: Connection) -> None:
        self.budget.forget(connection)
        self.group.drop_connection(connection)

    def end_waits(self, connection: Connection) -> None:
        self.group.end_waits(connection)

    def output_drained(self, connection: Connection) -> None:
        self.group.wake_connection(connection)

    def open_session(self, connection: Connection) -> None:
        return None  # no auth file: every request goes straight to the passes

    # ------------------------------------------------------------- running

    def __enter__(self) -> SocketlessBroker:
        logging.getLogger("kittiwake").addHandler(self._error_log)
        self.group.start(self.clock.time())
        self.connection.connection_made(self.transport)  # type: ignore[arg-type]
        return self

    def __exit__(self, *exc_info: object) -> None:
        logging.getLogger("kittiwake").removeHandler(self._error_log)
        self.loop.close()

    @property
    def errors_logged(self) -> list[str]:
        return self._error_log.records

    @property
    def closed(self) -> bool:
        return self.connection.closed

    def send(self, data: bytes) -> None:
        """Bytes from the client; first lets the broker catch up if it stopped reading."""
        if self.connection.closed or self.connection.reader.rejected is not None:
            return  # the broker reads no more of this stream: the bytes stay in the socket
        if not self.transport.reading:
            self.settle()
        assert self.transport.reading, "the connection stopped reading and nothing resumes it"
        self.connection.data_received(data)

    def settle(self) -> None:
        """Run the loop until a round runs no pass: every request received is served or parked."""
        for _ in range(MAX_LOOP_ROUNDS):
            passes = self.group.passes.passes
            self.loop.call_soon(self.loop.stop)
            self.loop.run_forever()
            if self.group.passes.passes == passes:
                return
        raise AssertionError(f"the broker ran {MAX_LOOP_ROUNDS} passes and still has work scheduled")

    def tick(self, maintenance: bool) -> None:
        self.group.request_sweep()
        if maintenance:
            self.group.request_maintenance()

    def end(self) -> None:
        """The client half-closes: everything received must still be answered."""
        if not self.connection.closed:
            self.connection.eof_received()
        self.settle()

    def replies(self) -> list[Reply]:
        """Every reply written since the last call, decoded."""
        data = bytes(self.transport.written)
        self.transport.written.clear()
        found = [decode_reply(body) for body in self._replies.feed(data)]
        self.replies_read += len(found)
        return found
