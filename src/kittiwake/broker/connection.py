"""One client connection: bytes in, decoded requests out to the broker, replies back.

An `asyncio.Protocol` rather than streams: `data_received` cuts frames and
decodes requests synchronously, with no task or future per request, which is
most of the cost at small request sizes.

What a connection guarantees about memory and fairness (TESTING.md, bad input):

* a frame's length prefix above the max frame (also what the first bytes of an
  HTTP request or a TLS ClientHello decode to) gets one `FRAME_TOO_LARGE`
  error frame with id 0 and the connection is closed: the stream is out of
  step and cannot be trusted further. Every request read before the bad
  length is answered first, whichever reads brought it;
* a request that decodes badly gets an error reply carrying its id (or 0) and
  the connection stays open;
* output is bounded: above `WRITE_BUFFER_HIGH` bytes of unsent replies the
  transport calls `pause_writing`; the connection then stops reading, and the
  group commit defers its requests already received (`defer`) instead of
  answering them into the buffer, until `resume_writing`. So a client that
  pipelines without reading stalls itself, not the broker — even when small
  requests ask for large replies;
* requests are bounded: above `MAX_UNANSWERED` requests received but not yet
  answered (parked long-polls included) the connection stops reading until
  half of them are answered;
* after the client's EOF (half-close) the connection stays open until every
  request already received has been answered, then closes; its parked
  long-polls are answered with an empty list at once and none is parked
  again, so no task is leased to a client that has stopped listening.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Protocol, cast

from kittiwake import errors
from kittiwake.protocol import FrameReader, RequestError, decode_request, encode_error, encode_frame
from kittiwake.protocol.messages import Request

log = logging.getLogger("kittiwake.broker")

WRITE_BUFFER_HIGH = 4 * 1024 * 1024
MAX_UNANSWERED = 10_000


class ConnectionHost(Protocol):
    """What a connection needs from the broker that owns it."""

    max_frame: int

    def admit(self, connection: Connection) -> bool:
        """Count a new connection in; False when the broker is full."""

    def submit(self, connection: Connection, item: Request | bytes) -> None:
        """Queue a decoded request, or an already encoded error reply, for the next pass."""

    def resubmit(self, connection: Connection, items: list[Request | bytes]) -> None:
        """Queue deferred items again, ahead of anything this connection sent after them."""

    def forget(self, connection: Connection) -> None:
        """The connection is gone: drop what waits on it."""

    def end_waits(self, connection: Connection) -> None:
        """The client sent EOF: answer its parked long-polls with nothing, now."""


def error_frame(request_id: int, error: errors.KittiwakeError) -> bytes:
    return encode_frame(encode_error(request_id, error))


def format_peer(address: object) -> str | None:
    """`host:port` of a socket address (`[host]:port` for IPv6)."""
    if isinstance(address, tuple) and len(address) >= 2:
        host, port = address[0], address[1]
        return f"[{host}]:{port}" if ":" in str(host) else f"{host}:{port}"
    return None


class Connection(asyncio.Protocol):
    """Per-connection state; the broker's group-commit pass answers its requests."""

    def __init__(self, host: ConnectionHost) -> None:
        self.host = host
        self.reader = FrameReader(host.max_frame)
        self.transport: asyncio.Transport | None = None
        self.peer: str | None = None
        self.closed = False  # no reply can be written any more
        self.admitted = False
        self.unanswered = 0
        self.deferred: list[Request | bytes] = []  # received, not run while the output is full
        self._eof = False
        self._paused_for_writes = False
        self._paused_for_backlog = False
        self._paused_by_broker = False
        self._reading = True

    # ------------------------------------------------------------- asyncio

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement the interface without subclassing it
        self.transport = cast(asyncio.Transport, transport)
        self.peer = format_peer(transport.get_extra_info("peername"))
        if not self.host.admit(self):
            self.fail(errors.TooManyConnections("the broker is at its connection limit"))
            return
        self.admitted = True
        self.transport.set_write_buffer_limits(high=WRITE_BUFFER_HIGH)

    def data_received(self, data: bytes) -> None:
        if self.closed:
            return
        try:
            bodies = self.reader.feed(data)
        except errors.FrameTooLarge:
            bodies = []  # the bad length came first in this read; `reader.rejected` holds it
        host = self.host
        for body in bodies:
            item: Request | bytes
            try:
                item = decode_request(body)
            except RequestError as exc:
                item = error_frame(exc.request_id, exc.error)
            except Exception:  # the decoder must never take the broker down
                log.exception("request decoder failed on a %d-byte frame from %s", len(body), self.peer)
                item = error_frame(0, errors.MalformedFrame("the request could not be decoded"))
            self.unanswered += 1
            host.submit(self, item)
        if self.reader.rejected is not None:
            # As at the client's EOF: answer every request read before the bad
            # length, in this read or an earlier one (parked long-polls with an
            # empty list), then close with the error. Where the reads happened
            # to split the stream must not decide which requests get replies.
            log.info("closing %s after its replies: %s", self.peer, self.reader.rejected.message)
            self._eof = True
            self._paused_by_broker = True
            self._update_reading()
            self.host.end_waits(self)
            if not self.closed and self.unanswered <= 0:
                self.fail(self.reader.rejected)
            return
        if self.unanswered > MAX_UNANSWERED and not self._paused_for_backlog:
            self._paused_for_backlog = True
            self._update_reading()

    def eof_received(self) -> bool:
        self._eof = True
        # A client that closes its side while a long-poll is parked would
        # otherwise be handed tasks that nobody reads, leased until expiry.
        self.host.end_waits(self)
        # keep the write half open until every request received is answered
        return self.unanswered > 0

    @property
    def ended(self) -> bool:
        """The client sent EOF: it may still read replies, but must not be handed new leases by a wait."""
        return self._eof

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.admitted:
            self.host.forget(self)

    def pause_writing(self) -> None:
        self._paused_for_writes = True
        self._update_reading()

    def resume_writing(self) -> None:
        self._paused_for_writes = False
        self._resubmit_deferred()
        self._update_reading()

    # -------------------------------------------------------------- broker

    @property
    def write_paused(self) -> bool:
        return self._paused_for_writes

    def defer(self, item: Request | bytes) -> None:
        """Hold a received item until the output drains (it stays unanswered)."""
        self.deferred.append(item)

    def deliver(self, frames: list[bytes]) -> None:
        """Write the replies of one pass in one call; they answer `len(frames)` requests."""
        transport = self.transport
        if self.closed or transport is None or transport.is_closing():
            return
        transport.write(frames[0] if len(frames) == 1 else b"".join(frames))
        self.unanswered -= len(frames)
        if self._paused_for_backlog and self.unanswered <= MAX_UNANSWERED // 2:
            self._paused_for_backlog = False
            self._update_reading()
        if not self._paused_for_writes:
            # deferred for the pass's own reply budget, and the socket took it all
            self._resubmit_deferred()
        if self._eof and self.unanswered <= 0:
            if self.reader.rejected is not None:
                self.fail(self.reader.rejected)
            else:
                self.close()

    def _resubmit_deferred(self) -> None:
        if self.deferred and not self.closed:
            items, self.deferred = self.deferred, []
            self.host.resubmit(self, items)

    def fail(self, error: errors.KittiwakeError) -> None:
        """Send one error frame with id 0 and close after it is flushed."""
        transport = self.transport
        if transport is not None and not transport.is_closing():
            transport.write(error_frame(0, error))
        self.close()

    def close(self) -> None:
        self.closed = True
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()  # flushes what is buffered first

    def stop_reading(self) -> None:
        """The broker is shutting down: take no more requests."""
        self._paused_by_broker = True
        self._update_reading()

    def _update_reading(self) -> None:
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        want = not (self._paused_for_writes or self._paused_for_backlog or self._paused_by_broker)
        if want == self._reading:
            return
        self._reading = want
        if want:
            transport.resume_reading()
        else:
            transport.pause_reading()
