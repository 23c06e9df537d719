"""The broker's HTTP/1.1 listener: h11 on the broker's event loop, with routes other modules register.

A small server for the broker's HTTP faces (the SQS API today; a dashboard
and /metrics can share the port): `HttpServer` owns the sockets and the
HTTP framing, `Routes` maps a path to an async handler. A module adds its
routes with `routes.add(prefix, handler)`; the longest matching prefix wins,
so `/` can be one module's catch-all while `/metrics` is another's.

h11 is sans-IO: this module feeds it bytes from an `asyncio.Protocol` and
writes what it produces, so there is no thread and no second event loop; a
handler awaits whatever it needs (the SQS API awaits replies of the group
commit) while other connections are served.

What the server promises, whatever a client sends:

* keep-alive: requests on one connection are answered in order, one at a
  time (a pipelined request waits, unread, until the previous answer is
  written); a connection is closed after `idle_timeout_secs` with no request;
* bounds: a head over `max_head_bytes` gets 431, a body over `max_body_bytes`
  gets 413 (at once when Content-Length says so), bytes that are not HTTP/1.1
  get 400, a path no route takes gets 404; each closes the connection but
  the 404, which is an ordinary answer;
* a body over `CHECKED_BODY_BYTES` (or chunked) is read only once the face's
  `check_head` let its head through; a check may answer later (credentials
  that need a key derivation), and until it does the connection reads
  nothing more: what came with the head waits in h11's buffer, unread;
* a connection that ends (EOF) or breaks while its handler runs cancels the
  handler: nobody is left to read the answer (a long poll stops waiting);
* a request must arrive whole within `request_timeout_secs` of its first
  byte (a slow sender cannot hold a connection forever: 408 and close);
* a client that pipelines requests and does not read the answers: once the
  connection's write buffer passes the transport's high-water mark, its next
  requests are neither read nor answered until the buffer drains
  (`pause_writing`), so unread answers cannot pile up in the broker;
* a handler that raises gets 500 and a logged traceback; the broker goes on;
* streams: a response may carry an async iterator of chunks (`stream`)
  instead of a body, sent as they come (chunked), for as long as the
  iterator runs (server-sent events); the connection's handler task runs it,
  so a client that goes away ends it as above. A client that stops reading
  while the stream goes on, so that more than `max_stream_buffer_bytes` wait
  unsent, is cut off (`streams_cut`): memory stays bounded and the broker goes
  on. An iterator that raises ends the stream and closes the connection,
  with a logged traceback (its head is sent: no 500 can follow).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import AsyncIterator, Awaitable, Callable, cast

import h11

from kittiwake.broker.connection_slots import ConnectionSlots
from kittiwake.broker.http_hosts import HostNames
from kittiwake.broker.read_budget import SMALL_READ_BYTES, ReadBudget

log = logging.getLogger("kittiwake.broker.http")

DEFAULT_MAX_BODY_BYTES = 2 * 1024 * 1024
DEFAULT_MAX_HEAD_BYTES = 32 * 1024
DEFAULT_REQUEST_TIMEOUT_SECS = 30.0
DEFAULT_IDLE_TIMEOUT_SECS = 75.0
DEFAULT_MAX_CONNECTIONS = 10_000
DEFAULT_MAX_STREAM_BUFFER_BYTES = 1024 * 1024
SERVER_NAME = b"kittiwake"
CHECKED_BODY_BYTES = 64 * 1024  # a body larger than this is announced to `check_head` before it is read
_FULL_TEXT = b"the broker is at its connection limit\n"
FULL_RESPONSE = (  # a connection over the cap gets this, written whole before any request is read
    b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain; charset=utf-8\r\n"
    b"content-length: %d\r\nconnection: close\r\n\r\n%s" % (len(_FULL_TEXT), _FULL_TEXT)
)


@dataclass(slots=True)
class HttpRequest:
    method: str
    path: str  # without the query string
    query: str
    headers: dict[str, str]  # names lower-cased; a repeated header keeps its last value
    body: bytes
    peer: str | None
    # the face calls it with the user once the request's credentials checked out: the connection then
    # counts as that user's, not as its address's (`connection_slots`)
    authenticated: Callable[[str], None] | None = field(default=None, compare=False, repr=False)


@dataclass(slots=True)
class HttpResponse:
    status: int
    body: bytes = b""
    content_type: str = "text/plain; charset=utf-8"
    headers: list[tuple[str, str]] = field(default_factory=list)
    stream: AsyncIterator[bytes] | None = None  # sent chunk by chunk instead of `body`, until it ends


Handler = Callable[[HttpRequest], Awaitable[HttpResponse]]
# a request with its body still to come (empty) -> a refusal, None to read the body, or an awaitable of either
HeadCheck = Callable[[HttpRequest], "HttpResponse | None | Awaitable[HttpResponse | None]"]


def text_response(status: int, text: str) -> HttpResponse:
    return HttpResponse(status, (text + "\n").encode())


class Routes:
    """Path prefixes to handlers; the longest prefix that matches a request's path serves it."""

    def __init__(self) -> None:
        self._routes: dict[str, Handler] = {}

    def add(self, prefix: str, handler: Handler) -> None:
        if not prefix.startswith("/"):
            raise ValueError(f"a route starts with '/', got {prefix!r}")
        if prefix in self._routes:
            raise ValueError(f"the route {prefix!r} is taken")
        self._routes[prefix] = handler

    def find(self, path: str) -> Handler | None:
        best: str | None = None
        for prefix in self._routes:
            if path.startswith(prefix) and (best is None or len(prefix) > len(best)):
                best = prefix
        return self._routes[best] if best is not None else None


class HttpServer:
    """One HTTP port of the broker."""

    def __init__(
        self,
        routes: Routes,
        *,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
        max_head_bytes: int = DEFAULT_MAX_HEAD_BYTES,
        request_timeout_secs: float = DEFAULT_REQUEST_TIMEOUT_SECS,
        idle_timeout_secs: float = DEFAULT_IDLE_TIMEOUT_SECS,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        max_stream_buffer_bytes: int = DEFAULT_MAX_STREAM_BUFFER_BYTES,
        name: str = "http",
        slots: ConnectionSlots | None = None,
        budget: ReadBudget | None = None,
        host_names: HostNames | None = None,
        check_head: HeadCheck | None = None,
    ) -> None:
        self.routes = routes
        self.name = name
        self.slots = slots if slots is not None else ConnectionSlots(max_connections)
        self.budget = budget
        self.host_names = host_names
        self.check_head = check_head
        self.max_stream_buffer_bytes = max_stream_buffer_bytes
        self.max_body_bytes = max_body_bytes
        self.max_head_bytes = max_head_bytes
        self.request_timeout_secs = request_timeout_secs
        self.idle_timeout_secs = idle_timeout_secs
        self.connections: set[HttpConnection] = set()
        self.port: int | None = None
        self._server: asyncio.AbstractServer | None = None
        self.requests = 0  # served, for tests and logs
        self.handler_errors = 0
        self.streams_cut = 0  # streams closed because their client stopped reading

    async def start(self, host: str, port: int) -> int:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: HttpConnection(self), host, port, backlog=1024)
        self.port = self._server.sockets[0].getsockname()[1]
        return self.port

    def stop_accepting(self) -> None:
        if self._server is not None:
            self._server.close()

    async def stop(self) -> None:
        """Close the listener and every connection; running handlers are cancelled."""
        self.stop_accepting()
        for connection in list(self.connections):
            connection.abort()
        if self._server is not None:
            await self._server.wait_closed()


class HttpConnection(asyncio.Protocol):
    """One client connection: h11 framing, one request handled at a time."""

    def __init__(self, server: HttpServer) -> None:
        self.server = server
        self.loop = asyncio.get_running_loop()
        self.h11 = h11.Connection(h11.SERVER, max_incomplete_event_size=server.max_head_bytes)
        self.transport: asyncio.Transport | None = None
        self.peer: str | None = None
        self.source: str | None = None  # the peer's address without its port
        self.counted_user: str | None = None  # the user whose connections count this one, once known
        self._request: h11.Request | None = None
        self._body = bytearray()
        self._task: asyncio.Task[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._closing = False
        self._receiving = False  # a request has started arriving: its timer runs
        self._slot = False  # holds a slot of the connection cap
        self._charged = False  # the read budget counts bytes of ours
        self._held_for_budget = False
        self._held_for_handler = False  # bytes pipelined behind a running handler fill a head
        self._held_for_output = False  # the transport's write buffer is over its high-water mark
        self._held_for_check = False  # a head check runs (in `_task`): its body is not read before it says so
        self._body_bytes = 0  # announced by Content-Length; 0 when unknown

    # ------------------------------------------------------------- asyncio

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        address = transport.get_extra_info("peername")
        self.peer = f"{address[0]}:{address[1]}" if isinstance(address, tuple) and len(address) >= 2 else None
        # counted by address until a request of it shows valid credentials (`_authenticated`)
        self.source = str(address[0]) if isinstance(address, tuple) and address else None
        if self.server.slots.take(self.loop.time(), self.server.name, self.source) is not None:
            self._closing = True
            cast(asyncio.Transport, transport).write(FULL_RESPONSE)  # uvloop's does not subclass it
            transport.close()
            return
        self._slot = True
        self.server.connections.add(self)
        self._arm(self.server.idle_timeout_secs, self._idle)

    def connection_lost(self, exc: Exception | None) -> None:
        self.server.connections.discard(self)
        if self._slot:
            self._slot = False
            self.server.slots.give_back(self.source, self.counted_user)
        if self.server.budget is not None:
            self.server.budget.forget(self)
            self._charged = False
        self._disarm()
        if self._task is not None and not self._task.done():
            self._task.cancel()  # nobody is left to read the answer

    def data_received(self, data: bytes) -> None:
        try:
            self.h11.receive_data(data)
            self._events()
            self._charge()
        except Exception:  # one connection's bytes must never take the broker down
            log.exception("HTTP connection %s failed", self.peer)
            self.abort()

    # ------------------------------------------------------------- budgets

    def hold_for_budget(self, held: bool) -> None:
        """The read budget stops (True) or resumes (False) this connection's reading."""
        self._held_for_budget = held
        self._set_reading()

    def pause_writing(self) -> None:
        # the client does not read its answers: read and answer no more of its pipelined requests
        # until they drain, or answers would pile up in the broker without bound
        self._held_for_output = True
        self._set_reading()

    def resume_writing(self) -> None:
        self._held_for_output = False
        self._set_reading()
        if self._task is None and not self._closing:
            try:
                self._events()
                self._charge()
            except Exception:
                log.exception("HTTP connection %s failed", self.peer)
                self.abort()

    def _set_reading(self) -> None:
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        if self._held_for_budget or self._held_for_handler or self._held_for_output or self._held_for_check:
            transport.pause_reading()
        else:
            transport.resume_reading()

    def _charge(self, completed: bool = False) -> None:
        """Tell the read budget how many bytes of a request this connection holds now."""
        budget = self.server.budget
        buffered = len(self.h11.trailing_data[0])
        if self._task is not None:
            # a handler runs: what arrives behind its request waits unread; a head's worth at most
            held_for_handler = buffered > self.server.max_head_bytes
            if held_for_handler != self._held_for_handler:
                self._held_for_handler = held_for_handler
                self._set_reading()
        if budget is None:
            return
        held = len(self._body) + buffered if self._receiving else buffered
        if not held and not self._charged and not completed:
            return
        frame = max(held + SMALL_READ_BYTES, self._body_bytes + buffered) if held else 0
        budget.charge(self, held, frame, completed)
        self._charged = bool(held)

    def eof_received(self) -> bool | None:
        # HTTP clients do not half-close and wait: EOF means gone, so a running handler
        # (a long poll) is cancelled rather than left to answer nobody
        if self._task is not None and not self._task.done():
            self._task.cancel()
            self._closing = True
            return False
        try:
            self.h11.receive_data(b"")
            self._events()
        except Exception:
            self.abort()
        return True  # keep the transport: the answer to a request read before the EOF may still be written

    # --------------------------------------------------------------- input

    def _events(self) -> None:
        while self._task is None and not self._closing and not self._held_for_output:
            try:
                event = self.h11.next_event()
            except h11.RemoteProtocolError as exc:
                self._fail(exc.error_status_hint, f"bad request: {exc}")
                return
            if event is h11.NEED_DATA:
                if not self._receiving and (self.h11.their_state is h11.SEND_BODY or self.h11.trailing_data[0]):
                    self._receiving = True  # the first bytes of a request: it has this long to arrive whole
                    self._arm(self.server.request_timeout_secs, self._slow)
                return
            if event is h11.PAUSED:
                return
            if isinstance(event, h11.Request):
                self._request = event
                self._body.clear()
                if not self._receiving:
                    self._receiving = True
                    self._arm(self.server.request_timeout_secs, self._slow)
                # h11 bounds a head that arrives in pieces; one that came whole is measured here
                if len(event.target) + sum(len(name) + len(value) + 4 for name, value in event.headers) > self.server.max_head_bytes:
                    self._fail(431, f"the request head is over {self.server.max_head_bytes} bytes")
                    return
                length = _content_length(event)
                if length is not None and length > self.server.max_body_bytes:
                    self._fail(413, f"the body is over {self.server.max_body_bytes} bytes")
                    return
                refusal = self._check_head(event, length)
                if isinstance(refusal, HttpResponse):
                    self._refuse_head(refusal)
                    return
                if refusal is not None:  # the check answers later: the body waits, unread, until it does
                    self._held_for_check = True
                    self._set_reading()
                    self._task = self.loop.create_task(self._await_head_check(refusal, length or 0))
                    return
                self._body_bytes = length or 0
            elif isinstance(event, h11.Data):
                self._body += event.data
                if len(self._body) > self.server.max_body_bytes:
                    self._fail(413, f"the body is over {self.server.max_body_bytes} bytes")
                    return
            elif isinstance(event, h11.EndOfMessage):
                self._receiving = False
                self._body_bytes = 0
                self._disarm()
                self._charge(completed=True)
                self._dispatch()
            elif isinstance(event, h11.ConnectionClosed):
                self.close()
                return

    def _check_head(self, event: h11.Request, length: int | None) -> HttpResponse | Awaitable[HttpResponse | None] | None:
        """A refusal of a request from its head alone: a host name not served, or a large body the face
        will not take from this client (or an awaitable of that refusal or None)."""
        headers = _headers(event)
        host_names = self.server.host_names
        if host_names is not None and not host_names.allows(headers.get("host")):
            return text_response(421, host_names.refusal(headers.get("host")))
        check = self.server.check_head
        chunked = "chunked" in headers.get("transfer-encoding", "").lower()
        if check is not None and (chunked or (length or 0) > CHECKED_BODY_BYTES):
            return check(self._request_of(event, headers, b""))
        return None

    async def _await_head_check(self, check: Awaitable[HttpResponse | None], body_bytes: int) -> None:
        try:
            refusal = await check
        except asyncio.CancelledError:
            raise
        except Exception:
            self.server.handler_errors += 1
            log.exception("HTTP head check for %s failed", self.peer)
            refusal = text_response(500, "internal error")
        self._task = None
        self._held_for_check = False
        if self._closing:
            return
        try:
            if refusal is not None:
                self._refuse_head(refusal)
                return
            self._body_bytes = body_bytes
            self._held_for_handler = False
            self._set_reading()
            self._events()  # the body, now let through
            self._charge()
        except Exception:  # as in data_received: one connection must never take the broker down
            log.exception("HTTP connection %s failed", self.peer)
            self.abort()

    def _refuse_head(self, refusal: HttpResponse) -> None:
        self._disarm()
        self._respond(refusal, close=True)
        self.close()

    def _request_of(self, event: h11.Request, headers: dict[str, str], body: bytes) -> HttpRequest:
        target = event.target.decode("latin-1")
        path, _, query = target.partition("?")
        return HttpRequest(event.method.decode("latin-1"), path, query, headers, body, self.peer, self._authenticated)

    def _authenticated(self, user: str) -> None:
        """A request of this connection showed `user`'s credentials: count it as the user's from now on
        (when the user's cap allows; else it stays its address's)."""
        if self._slot and self.counted_user is None:
            if self.server.slots.to_user(self.loop.time(), self.server.name, self.source, user) is None:
                self.counted_user = user

    def _dispatch(self) -> None:
        request = self._request
        assert request is not None
        http_request = self._request_of(request, _headers(request), bytes(self._body))
        path = http_request.path
        self._body.clear()
        handler = self.server.routes.find(path)
        self.server.requests += 1
        if handler is None:
            self._respond(text_response(404, f"no such path: {path[:200]}"))
            return
        self._task = self.loop.create_task(self._run(handler, http_request))

    async def _run(self, handler: Handler, request: HttpRequest) -> None:
        try:
            response = await handler(request)
        except asyncio.CancelledError:
            raise
        except Exception:
            self.server.handler_errors += 1
            log.exception("HTTP handler for %s %s failed", request.method, request.path[:200])
            response = text_response(500, "internal error")
        if response.stream is not None:
            try:
                finished = await self._send_stream(response, request)
            finally:
                close = getattr(response.stream, "aclose", None)  # an async generator's cleanup runs however it ends
                if close is not None:
                    await close()
            self._task = None
            if finished:
                self._next_request()
            return
        self._task = None
        if not self._closing:
            self._respond(response)
            self._release_handler_hold()
            self._events()  # a pipelined request may be waiting
            self._charge()

    # -------------------------------------------------------------- output

    def _respond(self, response: HttpResponse, *, close: bool = False) -> None:
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        headers = [
            ("content-type", response.content_type),
            ("content-length", str(len(response.body))),
            ("server", "kittiwake"),
            *response.headers,
        ]
        if close:
            headers.append(("connection", "close"))
        try:
            data = self.h11.send(h11.Response(status_code=response.status, headers=headers))
            data += self.h11.send(h11.Data(data=response.body)) if response.body else b""
            data += self.h11.send(h11.EndOfMessage())
        except h11.LocalProtocolError:
            self.abort()
            return
        transport.write(data)
        if close or self.h11.our_state is not h11.DONE or self.h11.their_state is not h11.DONE:
            self.close()
            return
        self.h11.start_next_cycle()
        self._request = None
        self._arm(self.server.idle_timeout_secs, self._idle)

    async def _send_stream(self, response: HttpResponse, request: HttpRequest) -> bool:
        """Send the head, then each chunk as the stream yields it; True when it ended and was sent whole."""
        transport = self.transport
        stream = response.stream
        assert stream is not None
        if transport is None or transport.is_closing() or self._closing:
            return False
        # no content-length: h11 frames the body chunked (or to the close, for an HTTP/1.0 client)
        headers = [("content-type", response.content_type), ("server", "kittiwake"), *response.headers]
        try:
            transport.write(self.h11.send(h11.Response(status_code=response.status, headers=headers)))
            async for chunk in stream:
                if self._closing or transport.is_closing():
                    return False
                if chunk:
                    transport.write(self.h11.send(h11.Data(data=chunk)))
                if transport.get_write_buffer_size() > self.server.max_stream_buffer_bytes:
                    self.server.streams_cut += 1
                    log.info("HTTP stream %s to %s cut off: its client stopped reading (over %d bytes wait)",
                             request.path[:200], self.peer, self.server.max_stream_buffer_bytes)
                    self.abort()
                    return False
            transport.write(self.h11.send(h11.EndOfMessage()))
        except asyncio.CancelledError:
            raise
        except Exception:
            self.server.handler_errors += 1
            log.exception("HTTP stream for %s %s failed", request.method, request.path[:200])
            self.abort()
            return False
        return True

    def _next_request(self) -> None:
        """After a whole answer: read the next request on a kept-alive connection, or close."""
        self._release_handler_hold()
        if self._closing:
            return
        if self.h11.our_state is not h11.DONE or self.h11.their_state is not h11.DONE:
            self.close()
            return
        self.h11.start_next_cycle()
        self._request = None
        self._arm(self.server.idle_timeout_secs, self._idle)
        self._events()
        self._charge()

    def _release_handler_hold(self) -> None:
        if self._held_for_handler:
            self._held_for_handler = False
            self._set_reading()

    def _fail(self, status: int, text: str) -> None:
        """Answer a request that cannot be read with `status`, then close."""
        self._disarm()
        if self.h11.our_state in (h11.IDLE, h11.SEND_RESPONSE):
            self._respond(text_response(status, text), close=True)
        self.close()

    def close(self) -> None:
        self._closing = True
        self._disarm()
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()  # flushes what was written first

    def abort(self) -> None:
        self._closing = True
        self._disarm()
        if self.transport is not None:
            self.transport.abort()

    # -------------------------------------------------------------- timers

    def _arm(self, secs: float, callback: Callable[[], None]) -> None:
        self._disarm()
        if secs > 0:
            self._timer = self.loop.call_later(secs, callback)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _idle(self) -> None:
        self._timer = None
        if self._task is None:
            self.close()

    def _slow(self) -> None:
        self._timer = None
        if self._task is not None and self._held_for_check:
            self._task.cancel()  # a head check that takes this long: the request is not let in
        elif self._task is not None:
            return  # a handler runs: the request arrived whole
        self._fail(408, f"the request did not arrive whole within {self.server.request_timeout_secs:g} s")


def _headers(request: h11.Request) -> dict[str, str]:
    """Header names lower-cased; a repeated header keeps its last value."""
    return {name.decode("latin-1").lower(): value.decode("latin-1") for name, value in request.headers}


def _content_length(request: h11.Request) -> int | None:
    for name, value in request.headers:
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None
