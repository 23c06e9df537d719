"""One asyncio TCP connection carrying many requests at once, replies matched by id.

Theory of operation: `send` registers a future under the request id and
writes the frame; a single reader task cuts incoming bytes into frames and
resolves the future whose id the reply carries. Requests are therefore
pipelined: a long-poll lease waiting at the broker does not delay the replies
to requests sent after it. When the stream ends or breaks, every request
still waiting fails with `ConnectionLost` (its outcome is unknown) and the
connection is marked closed; `send` on a closed connection raises `NotSent`
so the client can reconnect and retry a request that never left.

Opening one also does what `handshake` says: TLS for `kws://`, then the
`auth` request when the address carries credentials, before any other
request can be sent.
"""

from __future__ import annotations

import asyncio
import select
import socket
import ssl
from contextlib import suppress
from typing import Any

from kittiwake import errors
from kittiwake.client.handshake import AUTH_REQUEST_ID, HandshakeRetry, auth_frame, auth_outcome, tls_context, tls_failure
from kittiwake.client.url import BrokerAddress
from kittiwake.client.wire import NotSent, ReplyEnvelope, decode_envelope, error_of
from kittiwake.protocol import FrameReader

READ_CHUNK_BYTES = 256 * 1024


class AsyncConnection:
    """A pipelined connection bound to the event loop that opened it."""

    def __init__(
        self,
        address: BrokerAddress,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        max_reply_bytes: int,
    ) -> None:
        self.address = address
        self.loop = asyncio.get_running_loop()
        self._reader = reader
        self._writer = writer
        self._frames = FrameReader(max_reply_bytes)
        self._pending: dict[int, asyncio.Future[ReplyEnvelope[Any]]] = {}
        self._failure: errors.KittiwakeError | None = None
        self.closed = False
        self._reading = asyncio.create_task(self._read_replies(), name=f"kittiwake-replies-{address}")

    @classmethod
    async def open(cls, address: BrokerAddress, timeout_secs: float, max_reply_bytes: int) -> AsyncConnection:
        """One connection attempt, handshake included; raises OSError (or TimeoutError) when it
        may be retried, `BrokerUnreachable` (TLS cannot work) or `Unauthorized` when it may not."""
        context = tls_context(address)
        try:
            if context is None:
                opening = asyncio.open_connection(address.host, address.port, limit=READ_CHUNK_BYTES)
            else:
                opening = asyncio.open_connection(address.host, address.port, limit=READ_CHUNK_BYTES, ssl=context,
                                                  server_hostname=address.host)
            async with asyncio.timeout(timeout_secs):  # not wait_for: on 3.11 it can swallow a cancel
                reader, writer = await opening
        except (ssl.SSLEOFError, ssl.SSLZeroReturnError):
            raise  # cut in the middle (a broker restarting?): retried
        except ssl.SSLError as exc:
            raise tls_failure(address, exc) from None
        sock = writer.get_extra_info("socket")
        if sock is not None:
            # requests are small frames: Nagle would only add latency
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        connection = cls(address, reader, writer, max_reply_bytes)
        frame = auth_frame(address)
        if frame is not None:
            try:
                await connection._authenticate(frame, timeout_secs)
            except BaseException:
                await connection.close()
                raise
        return connection

    async def _authenticate(self, frame: bytes, timeout_secs: float) -> None:
        try:
            async with asyncio.timeout(timeout_secs):
                reply = await self.send(AUTH_REQUEST_ID, frame)
        except (NotSent, errors.ConnectionLost, TimeoutError) as exc:
            raise HandshakeRetry(f"authenticating to {self.address}: {exc!r}") from None
        finally:
            self.forget(AUTH_REQUEST_ID)
        auth_outcome(self.address, reply)

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    def is_dropped(self) -> bool:
        """Whether this connection is known or found to be dead before a request is written.

        With nothing in flight the socket has nothing to say; if it is
        readable, the broker hung up (or sent something unasked) and the reader
        task simply has not run yet — e.g. the loop was blocked while the
        broker restarted. Checking the socket directly turns that into a clean
        reconnect instead of a request lost with an unknown outcome.
        """
        if self.closed or self._writer.is_closing():
            return True
        if self._pending:
            return False
        sock = self._writer.get_extra_info("socket")
        if sock is None:
            return False
        try:
            if hasattr(select, "poll"):
                poller = select.poll()
                poller.register(sock.fileno(), select.POLLIN)
                return bool(poller.poll(0))
            readable, _, _ = select.select([sock.fileno()], [], [], 0)
            return bool(readable)
        except (OSError, ValueError):
            return True

    def send(self, request_id: int, frame: bytes) -> asyncio.Future[ReplyEnvelope[Any]]:
        """Write a framed request; the returned future resolves with its reply."""
        if self.closed or self._writer.is_closing():
            raise NotSent(str(self._failure or "connection closed"))
        future: asyncio.Future[ReplyEnvelope[Any]] = self.loop.create_future()
        self._pending[request_id] = future
        self._writer.write(frame)
        return future

    async def drain(self) -> None:
        """Wait while the socket's send buffer is full (backpressure); errors surface through the replies."""
        with suppress(ConnectionError, OSError, RuntimeError):
            await self._writer.drain()

    def forget(self, request_id: int) -> None:
        """Stop waiting for a reply (timed out or cancelled); a late reply is dropped."""
        self._pending.pop(request_id, None)

    async def _read_replies(self) -> None:
        failure: errors.KittiwakeError = errors.ConnectionLost(
            f"{self.address} closed the connection before the reply; outcome unknown"
        )
        try:
            while True:
                data = await self._reader.read(READ_CHUNK_BYTES)
                if not data:
                    break
                for body in self._frames.feed(data):
                    self._route(decode_envelope(body))
        except errors.FrameTooLarge as exc:
            failure = exc  # said without an id: `_shut` gives it to the request when only one was waiting
        except errors.KittiwakeError as exc:
            failure = exc if isinstance(exc, errors.ConnectionLost) else errors.ConnectionLost(str(exc))
        except (OSError, asyncio.IncompleteReadError) as exc:
            failure = errors.ConnectionLost(f"connection to {self.address} broke: {exc}; outcome unknown")
        except asyncio.CancelledError:
            failure = errors.ConnectionLost("the client closed the connection; outcome unknown")
        finally:
            self._shut(failure)

    def _route(self, reply: ReplyEnvelope[Any]) -> None:
        future = self._pending.pop(reply.id, None)
        if future is not None:
            if not future.done():
                future.set_result(reply)
        elif reply.id == 0 and not reply.ok:
            # the broker could not read one of our frames and cannot say which
            raise error_of(reply)

    def _shut(self, failure: errors.KittiwakeError) -> None:
        self.closed = True
        self._failure = failure
        pending, self._pending = self._pending, {}
        # a frame the broker would not read was that request's, when it was the only one in flight: it
        # was not applied, and sending it again would be refused again
        alone = isinstance(failure, errors.FrameTooLarge) and len(pending) == 1
        if isinstance(failure, errors.FrameTooLarge) and not alone:
            failure = errors.ConnectionLost(str(failure))
        for future in pending.values():
            if not future.done():
                future.set_exception(failure if alone else errors.ConnectionLost(failure.message))
        with suppress(Exception):
            self._writer.close()

    async def close(self) -> None:
        """Close the connection; requests still waiting fail with ConnectionLost.

        With requests in flight the connection is aborted (TCP reset): a plain
        close looks like a half-close to the broker, which would keep a parked
        long-poll and lease a task to a connection nobody reads.
        """
        if self._pending and not self._writer.is_closing():
            self._writer.transport.abort()
        if not self._reading.done():
            self._reading.cancel()
            with suppress(asyncio.CancelledError, Exception):
                await self._reading
        self._shut(self._failure or errors.ConnectionLost("the client closed the connection; outcome unknown"))
        with suppress(Exception):
            await self._writer.wait_closed()
