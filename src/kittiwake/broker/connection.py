"""One client connection: bytes in, decoded requests out to the broker, replies back.

An asyncio protocol rather than streams: `data_received` cuts frames and
decodes requests synchronously, with no task or future per request, which is
most of the cost at small request sizes. A *buffered* protocol: the
transport reads into a buffer the connection offers (one shared by all
connections, as each read is handed over before the next begins), so the
read budget decides how many bytes one read may bring.

What a connection guarantees about memory and fairness (docs/testing.md, bad input):

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
  requests ask for large replies; its parked long-polls are not retried
  meanwhile either (`long_polls`), and look again once it drains;
* requests are bounded: above `MAX_UNANSWERED` requests received but not yet
  answered (parked long-polls included) the connection stops reading until
  half of them are answered;
* after the client's EOF (half-close) the connection stays open until every
  request already received has been answered, then closes; its parked
  long-polls are answered with an empty list at once and none is parked
  again, so no task is leased to a client that has stopped listening;
* with an auth file, every decoded item passes the connection's `Session`
  (`kittiwake.broker.session`) first: credentials, then rights.
* the bytes of a frame still arriving are charged to the broker's read budget
  (`read_budget`), which stops reading from connections in the middle of a
  frame while all of them together hold too much; a frame not completed
  within the frame timeout, and a connection idle past the idle timeout, are
  closed (`timeouts`): the connection keeps when each frame started and when
  it was last active for that.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Protocol, cast

from kittiwake import errors
from kittiwake.broker.read_budget import FULL_READ_BYTES
from kittiwake.protocol import FrameReader, RequestError, decode_request, encode_error, encode_frame
from kittiwake.protocol.messages import Request

if TYPE_CHECKING:
    from kittiwake.broker.session import Session
    from kittiwake.broker.read_budget import ReadBudget

log = logging.getLogger("kittiwake.broker")

WRITE_BUFFER_HIGH = 4 * 1024 * 1024
MAX_UNANSWERED = 10_000


class ConnectionHost(Protocol):
    """What a connection needs from the broker that owns it."""

    max_frame: int
    budget: ReadBudget

    def admit(self, connection: Connection) -> str | None:
        """Count a new connection in: None, else why it is refused (a cap reached)."""

    def admit_user(self, connection: Connection, user: str) -> str | None:
        """Count the connection as `user`'s once authenticated: None, else why it is refused."""

    def submit(self, connection: Connection, item: Request | bytes) -> None:
        """Queue a decoded request, or an already encoded error reply, for the next pass."""

    def resubmit(self, connection: Connection, items: list[Request | bytes]) -> None:
        """Queue deferred items again, ahead of anything this connection sent after them."""

    def forget(self, connection: Connection) -> None:
        """The connection is gone: drop what waits on it."""

    def end_waits(self, connection: Connection) -> None:
        """The client sent EOF: answer its parked long-polls with nothing, now."""

    def output_drained(self, connection: Connection) -> None:
        """The connection's output drained: its parked long-polls may be answered again."""

    def open_session(self, connection: Connection) -> Session | None:
        """The connection's credentials checker, or None when the broker has no auth file."""


def error_frame(request_id: int, error: errors.KittiwakeError) -> bytes:
    return encode_frame(encode_error(request_id, error))


def format_peer(address: object) -> str | None:
    """`host:port` of a socket address (`[host]:port` for IPv6)."""
    if isinstance(address, tuple) and len(address) >= 2:
        host, port = address[0], address[1]
        return f"[{host}]:{port}" if ":" in str(host) else f"{host}:{port}"
    return None


_READ_BUFFER = memoryview(bytearray(FULL_READ_BYTES))


class Connection(asyncio.BufferedProtocol):
    """Per-connection state; the broker's group-commit pass answers its requests."""

    def __init__(self, host: ConnectionHost) -> None:
        self.host = host
        self.reader = FrameReader(host.max_frame)
        self.transport: asyncio.Transport | None = None
        self.peer: str | None = None
        self.tls = False
        self.closed = False  # no reply can be written any more
        self.admitted = False
        self.counted_user: str | None = None  # the user whose connections count this one
        self._source = "-"
        self.unanswered = 0
        self.deferred: list[Request | bytes] = []  # received, not run while the output is full
        self._eof = False
        self._paused_for_writes = False
        self._paused_for_backlog = False
        self._paused_by_broker = False
        self._paused_for_auth = False
        self._paused_for_budget = False
        self._reading = True
        self.session: Session | None = None
        self.frame_started_at: float | None = None  # monotonic; the frame in progress arrived from then
        self.active_at = time.monotonic()  # last bytes received or replies sent
        self._charged = False  # the read budget counts bytes of ours

    # ------------------------------------------------------------- asyncio

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement the interface without subclassing it
        self.transport = cast(asyncio.Transport, transport)
        self.peer = format_peer(transport.get_extra_info("peername"))
        self.tls = transport.get_extra_info("sslcontext") is not None
        address = transport.get_extra_info("peername")
        self._source = str(address[0]) if isinstance(address, tuple) and address else (self.peer or "-")
        refusal = self.host.admit(self)
        if refusal is not None:
            self.fail(errors.TooManyConnections(f"the broker is at its connection limit: {refusal}"))
            return
        self.admitted = True
        self.transport.set_write_buffer_limits(high=WRITE_BUFFER_HIGH)
        self.session = self.host.open_session(self)

    def get_buffer(self, sizehint: int) -> memoryview:
        return _READ_BUFFER[: self.host.budget.read_bytes(self)]

    def buffer_updated(self, nbytes: int) -> None:
        self.data_received(_READ_BUFFER[:nbytes])

    def data_received(self, data: bytes | memoryview) -> None:
        # `data` may be a view of the shared read buffer, valid during this call only: copy what is kept
        if self.closed:
            return
        try:
            bodies = self.reader.feed(data)
        except errors.FrameTooLarge:
            bodies = []  # the bad length came first in this read; `reader.rejected` holds it
        self._note_received(bool(bodies))
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
            if self.session is not None:
                screened = self.session.screen(item)
                if screened is None:
                    if self.closed:
                        return
                    continue
                item = screened
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

    def _note_received(self, completed: bool) -> None:
        """Times for the deadlines, and what the reader holds for the budget."""
        now = self.active_at = time.monotonic()
        held = self.reader.buffered_bytes
        if not held:
            self.frame_started_at = None
        elif completed or self.frame_started_at is None:
            self.frame_started_at = now  # the partial frame began after the last whole one
        if held or self._charged:
            self._charged = held > 0
            self.host.budget.charge(self, held, self.reader.frame_bytes, completed)

    def hold_for_budget(self, held: bool) -> None:
        """The read budget stops (True) or resumes (False) reading from this connection."""
        self._paused_for_budget = held
        self._update_reading()

    def eof_received(self) -> bool:
        self._eof = True
        # A client that closes its side while a long-poll is parked would
        # otherwise be handed tasks that nobody reads, leased until expiry.
        self.host.end_waits(self)
        # keep the write half open until every request received is answered
        # (TLS has no half-close: its transport closes after close_notify whatever we say)
        return self.unanswered > 0 and not self.tls

    @property
    def ended(self) -> bool:
        """The client sent EOF: it may still read replies, but must not be handed new leases by a wait."""
        return self._eof

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.session is not None:
            self.session.close()
        if self.admitted:
            self.host.forget(self)

    def pause_writing(self) -> None:
        self._paused_for_writes = True
        self._update_reading()

    def resume_writing(self) -> None:
        self._paused_for_writes = False
        self._resubmit_deferred()
        self._update_reading()
        if not self.closed:
            self.host.output_drained(self)

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
        self.active_at = time.monotonic()
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

    def fail(self, error: errors.KittiwakeError, request_id: int = 0) -> None:
        """Send one error frame (id 0 unless given) and close after it is flushed."""
        transport = self.transport
        if transport is not None and not transport.is_closing():
            transport.write(error_frame(request_id, error))
        self.close()

    # ------------------------------------------------------------- session

    @property
    def source(self) -> str:
        """The client's address without its port: what failed authentications and connection caps count by."""
        return self._source

    def admit_user(self, user: str) -> str | None:
        """Count this connection as `user`'s (it authenticated): None, else why the user may have no more."""
        refusal = self.host.admit_user(self, user)
        if refusal is None:
            self.counted_user = user
        return refusal

    def accept(self, item: Request | bytes) -> None:
        """Submit an item the session held while it checked credentials."""
        if not self.closed:
            self.unanswered += 1
            self.host.submit(self, item)

    def send_now(self, frame: bytes) -> None:
        transport = self.transport
        if transport is not None and not transport.is_closing():
            transport.write(frame)

    def hold_reading(self, hold: bool) -> None:
        """The session stops (True) or resumes (False) reading while credentials are checked."""
        self._paused_for_auth = hold
        self._update_reading()

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
        want = not (self._paused_for_writes or self._paused_for_backlog or self._paused_by_broker
                    or self._paused_for_auth or self._paused_for_budget)
        if want == self._reading:
            return
        self._reading = want
        if want:
            transport.resume_reading()
        else:
            transport.pause_reading()
