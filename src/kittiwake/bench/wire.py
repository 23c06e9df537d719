"""The benchmarks' one raw connection to the broker: numbered request frames out, reply bodies in.

`ops`, `latency` and `scale` speak the wire protocol directly, below `kittiwake.client`, so what
they measure is the broker and not a client's cost per request (`tasks` runs real clients, see
`task_processes`). Requests go out as `kittiwake.protocol` frames them (`encode_request` +
`encode_frame`, an id per request, so requests can be pipelined); replies come in through its
`FrameReader`. `RawConnection` is an `asyncio.Protocol`, for the event loop of a load process
(uvloop when installed: `use_uvloop`), and reads replies one of two ways:

* given a `receive` callback, every reply body goes to it in order, from `data_received`: a load
  connection's closed loop writes its next request from there, with no task, future or coroutine
  per request, which keeps the client's cost per request to a few tens of microseconds;
* without one, `call` returns a future that the reply carrying its request id resolves (probes,
  several requests in flight on one connection).

`BlockingConnection` runs one on an event loop of its own for the parent process's few set-up
calls, one at a time.

Replies are decoded only as far as a benchmark needs. The load's decoders (`decode_status`,
`decode_lease`, `decode_items`) read `ok`, the error and, of leased tasks, only `queue`, `pid` and
`lease_id`: msgspec skips the rest (the 1 KB data) without building objects. `call` decodes the
whole reply with `protocol.decode_reply`.
"""

from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Callable, TypeVar

import msgspec

from kittiwake.protocol import FrameReader, Reply, decode_reply, encode_frame, encode_request

T = TypeVar("T")

# Replies can be far larger than requests: a list_queues over 100K queues, a lease of many tasks.
MAX_REPLY_BYTES = 512 * 1024 * 1024
# A set-up call of the parent process (a connect, a list_queues over every queue) fails after this.
SET_UP_TIMEOUT_SECS = 60.0

Receive = Callable[[bytes], None]
Lost = Callable[[Exception | None], None]

# ------------------------------------------------------------ event loop


def use_uvloop() -> None:
    """In a helper process: run asyncio on uvloop when it is installed."""
    try:
        import uvloop
    except ImportError:
        return
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())


def event_loop_name() -> str:
    """The event loop the load processes run on, for the report."""
    try:
        import uvloop
    except ImportError:
        return "asyncio"
    return f"uvloop {uvloop.__version__}"


# ---------------------------------------------------------------- replies


class ErrorBody(msgspec.Struct):
    code: str = "INTERNAL"
    message: str = ""


class Status(msgspec.Struct):
    """Any reply, read only as far as ok / error."""

    id: int
    ok: bool
    error: ErrorBody | None = None


class LeasedRef(msgspec.Struct):
    """The part of a leased task that names its lease; encodes back as a lease ref."""

    queue: str
    pid: str
    lease_id: int


class LeaseReply(msgspec.Struct):
    id: int
    ok: bool
    result: list[LeasedRef] | None = None
    error: ErrorBody | None = None


class ItemStatus(msgspec.Struct):
    """One item's outcome in the reply to a batch of leases (dequeue, renew, release)."""

    ok: bool
    code: str | None = None
    message: str | None = None


class ItemsReply(msgspec.Struct):
    id: int
    ok: bool
    result: list[ItemStatus] | None = None
    error: ErrorBody | None = None


decode_status = msgspec.msgpack.Decoder(Status).decode
decode_lease = msgspec.msgpack.Decoder(LeaseReply).decode
decode_items = msgspec.msgpack.Decoder(ItemsReply).decode


def error_text(what: str, code: str | None, message: str | None) -> str:
    """How a benchmark reports an error reply: `what: CODE: message`."""
    return f"{what}: {code}: {message}"


def checked(reply: Reply, what: str) -> Any:
    """The result of an ok reply; raises RuntimeError naming `what` for an error reply."""
    if not reply.ok:
        error = reply.error or {}
        raise RuntimeError(error_text(what, error.get("code"), error.get("message")))
    return reply.result


def lease_refs(leased: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The lease refs (queue, pid, lease_id) of tasks a lease reply returned, to dequeue them."""
    return [{"queue": task["queue"], "pid": task["pid"], "lease_id": task["lease_id"]} for task in leased]


# ------------------------------------------------------------- connection


class RawConnection(asyncio.Protocol):
    """One connection to the broker on raw frames; see the module docstring for its two modes."""

    def __init__(self, receive: Receive | None = None, lost: Lost | None = None) -> None:
        self.reader = FrameReader(MAX_REPLY_BYTES)
        self.transport: asyncio.Transport | None = None
        self.last_id = 0
        self.open = False
        self.waiting: dict[int, asyncio.Future[Reply]] = {}
        self._receive = receive if receive is not None else self._resolve
        self._lost = lost

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.open = True

    def send(self, op: str, fields: dict[str, Any]) -> int:
        """Write one request; its id."""
        self.last_id = request_id = self.last_id + 1
        assert self.transport is not None
        self.transport.write(encode_frame(encode_request(op, request_id, fields)))
        return request_id

    def call(self, op: str, fields: dict[str, Any]) -> asyncio.Future[Reply]:
        """Write one request; a future for its reply (a connection without a `receive` callback)."""
        if not self.open:
            raise ConnectionError("the connection to the broker is closed")
        future: asyncio.Future[Reply] = asyncio.get_running_loop().create_future()
        self.waiting[self.send(op, fields)] = future
        return future

    def data_received(self, data: bytes) -> None:
        receive = self._receive
        for body in self.reader.feed(data):
            receive(body)

    def _resolve(self, body: bytes) -> None:
        reply = decode_reply(body)
        future = self.waiting.pop(reply.id, None)
        if future is not None and not future.done():
            future.set_result(reply)

    def connection_lost(self, exc: Exception | None) -> None:
        self.open = False
        for future in self.waiting.values():
            if not future.done():
                future.set_exception(ConnectionError(f"broker closed the connection: {exc}"))
        self.waiting.clear()
        if self._lost is not None:
            self._lost(exc)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


async def open_connection(host: str, port: int, receive: Receive | None = None,
                          lost: Lost | None = None) -> RawConnection:
    """A `RawConnection` to the broker at host:port, connected."""
    loop = asyncio.get_running_loop()
    _, connection = await loop.create_connection(lambda: RawConnection(receive, lost), host, port)
    return connection


class BlockingConnection:
    """A `RawConnection` on an event loop of its own, one call at a time: the parent's set-up calls."""

    def __init__(self, host: str, port: int, timeout_secs: float = SET_UP_TIMEOUT_SECS) -> None:
        self.timeout_secs = timeout_secs
        self._loop = asyncio.new_event_loop()
        try:
            self._connection = self._run(open_connection(host, port))
        except BaseException:
            self._loop.close()
            raise

    def _run(self, awaitable: Awaitable[T]) -> T:
        return self._loop.run_until_complete(asyncio.wait_for(awaitable, self.timeout_secs))

    async def _call(self, op: str, fields: dict[str, Any]) -> Reply:
        return await self._connection.call(op, fields)

    def request(self, op: str, **fields: Any) -> Any:
        """Send one request and wait for its reply; its result, or RuntimeError for an error reply."""
        return checked(self._run(self._call(op, fields)), op)

    def close(self) -> None:
        if self._loop.is_closed():
            return
        self._connection.close()
        self._loop.run_until_complete(asyncio.sleep(0))  # the transport's close runs on the loop
        self._loop.close()

    def __enter__(self) -> BlockingConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
