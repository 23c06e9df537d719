"""One blocking TCP connection to a broker, used by one thread at a time.

The blocking `Client` keeps a small pool of these; a thread takes one, writes
a request, reads frames until the reply with its id arrives, and gives it back.
One request at a time per connection keeps this simple and makes a stuck
long-poll cost one connection, not the whole client.

What a failure means for the request, which is what callers must know:

* `NotSent`: the request frame did not fully leave; the broker cannot have
  acted on a partial frame, so the caller may safely retry on a new
  connection.
* `ConnectionLost`: the request was sent but the connection broke before its
  reply; the outcome is unknown.
* `RequestTimeout`: no reply in time; the outcome is unknown. The connection
  is aborted (closed with a TCP reset), since its late reply would otherwise
  be read by the next request, and because a reset — unlike a plain close,
  which the broker may take for a half-close — makes the broker drop a
  long-poll still parked for it at once instead of leasing a task to it.

After any failure the connection is closed and must not be reused.

Opening one also does what `handshake` says: TLS for `kws://` (a
certificate the client cannot verify fails at once, with no retry), then the
`auth` request when the address carries credentials.
"""

from __future__ import annotations

import select
import socket
import ssl
import struct
import time
from typing import Any

from kittiwake import errors
from kittiwake.client.handshake import AUTH_REQUEST_ID, HandshakeRetry, auth_frame, auth_outcome, tls_context, tls_failure
from kittiwake.client.url import BrokerAddress
from kittiwake.client.wire import DEFAULT_MAX_REPLY_BYTES, NotSent, ReplyEnvelope, decode_envelope, error_of
from kittiwake.protocol import FrameReader

READ_CHUNK_BYTES = 256 * 1024


class BlockingConnection:
    """A connected socket plus the frame reader for its replies."""

    __slots__ = ("address", "_sock", "_frames", "closed")

    def __init__(self, address: BrokerAddress, sock: socket.socket | ssl.SSLSocket, max_reply_bytes: int) -> None:
        self.address = address
        self._sock = sock
        self._frames = FrameReader(max_reply_bytes)
        self.closed = False

    @classmethod
    def open(
        cls, address: BrokerAddress, timeout_secs: float, max_reply_bytes: int = DEFAULT_MAX_REPLY_BYTES
    ) -> BlockingConnection:
        """One connection attempt, handshake included; raises OSError when it may be retried,
        `BrokerUnreachable` (TLS cannot work) or `Unauthorized` when it may not."""
        context = tls_context(address)
        sock: socket.socket | ssl.SSLSocket = socket.create_connection((address.host, address.port), timeout=timeout_secs)
        try:
            # requests are small frames answered one by one: Nagle would only add latency
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if context is not None:
                try:
                    sock = context.wrap_socket(sock, server_hostname=address.host)
                except (ssl.SSLEOFError, ssl.SSLZeroReturnError):
                    raise  # cut in the middle (a broker restarting?): retried
                except ssl.SSLError as exc:
                    raise tls_failure(address, exc) from None
            connection = cls(address, sock, max_reply_bytes)
            frame = auth_frame(address)
            if frame is not None:
                connection._authenticate(frame, timeout_secs)
        except BaseException:
            sock.close()
            raise
        return connection

    def _authenticate(self, frame: bytes, timeout_secs: float) -> None:
        try:
            reply = self.exchange(frame, AUTH_REQUEST_ID, timeout_secs)
        except (NotSent, errors.ConnectionLost, errors.RequestTimeout) as exc:
            raise HandshakeRetry(f"authenticating to {self.address}: {exc}") from None
        auth_outcome(self.address, reply)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            try:
                self._sock.close()
            except OSError:
                pass

    def abort(self) -> None:
        """Close with a TCP reset: the broker forgets this connection and its parked requests at once."""
        if not self.closed:
            try:
                self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            except OSError:
                pass
            self.close()

    def is_dropped(self) -> bool:
        """Whether an idle connection went bad while it sat in the pool.

        An idle connection has nothing to read; if it is readable, the broker
        closed it (EOF) or sent something unasked, and a request written to it
        would be lost with an unknown outcome. Checking first (as urllib3 does)
        turns a broker restart into a clean reconnect instead of an error.
        """
        if self.closed:
            return True
        try:
            if hasattr(select, "poll"):
                poller = select.poll()
                poller.register(self._sock, select.POLLIN)
                return bool(poller.poll(0))
            readable, _, _ = select.select([self._sock], [], [], 0)
            return bool(readable)
        except (OSError, ValueError):
            return True

    def exchange(self, frame: bytes, request_id: int, timeout_secs: float | None) -> ReplyEnvelope[Any]:
        """Send one framed request and return its reply's envelope."""
        deadline = None if timeout_secs is None else time.monotonic() + timeout_secs
        self._send(frame, timeout_secs)
        try:
            return self._receive(request_id, deadline)
        except BaseException:
            # abandoned before its reply (timeout, broken stream, interrupt)
            self.abort()
            raise

    # ------------------------------------------------ pipelined use (the batching producer)

    def fileno(self) -> int:
        return self._sock.fileno()

    def send_frame(self, frame: bytes) -> None:
        """Write one framed request without waiting for its reply (`NotSent` if it did not leave whole)."""
        self._send(frame, None)

    def read_replies(self) -> list[ReplyEnvelope[Any]]:
        """The replies one read brings (call it when the socket is readable); ConnectionLost if it broke."""
        try:
            self._sock.settimeout(None)
            data = self._sock.recv(READ_CHUNK_BYTES)
        except OSError as exc:
            self.close()
            raise errors.ConnectionLost(f"connection to {self.address} broke: {exc}; outcome unknown") from None
        if not data:
            self.close()
            raise errors.ConnectionLost(f"{self.address} closed the connection; outcome unknown")
        try:
            return [decode_envelope(body) for body in self._frames.feed(data)]
        except errors.KittiwakeError:
            self.close()
            raise

    def _send(self, frame: bytes, timeout_secs: float | None) -> None:
        try:
            self._sock.settimeout(timeout_secs)
            self._sock.sendall(frame)
        except TimeoutError:
            self.abort()
            # sendall stopped short, so the broker holds at most part of a frame
            raise errors.RequestTimeout(
                f"could not send the request to {self.address} within {timeout_secs}s; it had no effect"
            ) from None
        except OSError as exc:
            refusal = self._frame_refused()
            self.close()
            if refusal is not None:
                raise refusal from None
            raise NotSent(str(exc)) from None

    def _frame_refused(self) -> errors.FrameTooLarge | None:
        """After a send that broke: the broker's FRAME_TOO_LARGE, when that is why it closed (it says so,
        without an id, before closing); a new connection would only be refused again."""
        try:
            self._sock.settimeout(0)
            data = self._sock.recv(READ_CHUNK_BYTES)
            for body in self._frames.feed(data):
                reply = decode_envelope(body)
                if reply.id == 0 and not reply.ok:
                    error = error_of(reply)
                    if isinstance(error, errors.FrameTooLarge):
                        return error
        except (OSError, errors.KittiwakeError):
            pass
        return None

    def _receive(self, request_id: int, deadline: float | None) -> ReplyEnvelope[Any]:
        while True:
            if deadline is not None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise errors.RequestTimeout(f"no reply from {self.address} in time; outcome unknown")
                self._sock.settimeout(remaining)
            else:
                self._sock.settimeout(None)
            try:
                data = self._sock.recv(READ_CHUNK_BYTES)
            except TimeoutError:
                raise errors.RequestTimeout(f"no reply from {self.address} in time; outcome unknown") from None
            except OSError as exc:
                raise errors.ConnectionLost(
                    f"connection to {self.address} broke before the reply: {exc}; outcome unknown"
                ) from None
            if not data:
                raise errors.ConnectionLost(
                    f"{self.address} closed the connection before the reply; outcome unknown"
                )
            for body in self._frames.feed(data):
                reply = decode_envelope(body)
                if reply.id == request_id:
                    return reply
                if reply.id == 0 and not reply.ok:
                    # the broker could not read our frame at all and says so without an id
                    raise error_of(reply)
                # anything else is a reply nobody waits for any more: skip it
