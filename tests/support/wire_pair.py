"""A client and a broker joined by bytes in memory: every op's round trip without a socket.

The shape of h11's `ConnectionPair`. The client half is the real client code:
a `calls` call is encoded to a frame by `wire.encode_call`, and the reply
frame is read back by `wire.decode_envelope` and `wire.result_of`. The broker
half is the real broker code below the sockets: a `FrameReader`,
`messages.decode_request`, `dispatch.execute` against an `Engine` on the
in-memory store, then `replies.encode_ok` / `encode_error`. Only the bytes
cross between the halves, so whatever passes here passes the wire.

Left out is what sits between the two in a real broker: the group-commit pass
(here each request runs alone and is committed at once), parked long-polls
(a lease answers at once, as `execute` does: `cancel_wait` finds nothing to
cancel), sessions and rights (every request is let in).

`PairClient` and `PairAsyncClient` are `Client` and `AsyncClient` whose
requests go through a pair instead of a connection: every public method of
the two clients, end to end, in microseconds.
"""

from __future__ import annotations

import itertools
from typing import Any, TypeVar

from kittiwake import errors
from kittiwake.broker import dispatch
from kittiwake.client import AsyncClient, Client
from kittiwake.client.calls import Call
from kittiwake.client.url import parse_url
from kittiwake.client.wire import decode_envelope, encode_call, result_of
from kittiwake.engine import Engine
from kittiwake.model import Limits
from kittiwake.protocol import FrameReader, RequestError, decode_request, encode_error, encode_frame, encode_ok
from kittiwake.protocol import messages as m
from kittiwake.protocol.replies import CancelWaitResult
from kittiwake.store.memory import MemoryStore

T = TypeVar("T")

START = 1_000.0
PEER = "127.0.0.1:40000"


class WirePair:
    """An engine on the in-memory store behind the broker's decoding and the client's encoding.

    `now` is the broker's clock, moved by the test. `requests` and `replies` hold
    every frame body that crossed, in order, and `ops` the op of each request."""

    def __init__(self, *, limits: Limits | None = None, now: float = START, extension: Any = None) -> None:
        """`extension`: a request extension (`kittiwake.broker.extensions`) whose check and ops apply."""
        self.store = MemoryStore()
        self.extension = extension
        self.handlers = {**dispatch.HANDLERS, **extension.ops()} if extension is not None else dispatch.HANDLERS
        id_class = extension.id_class if extension is not None else (0, 1)
        self.engine = Engine(self.store, limits=limits, id_class=id_class)
        self.now = now
        self.engine.recover(now)
        self.requests: list[bytes] = []
        self.replies: list[bytes] = []
        self.ops: list[str] = []
        self._ids = itertools.count(1)
        self._broker_reader = FrameReader()
        self._client_reader = FrameReader()

    def call(self, call: Call[T]) -> T:
        """The call's result, or the error its reply carries, after a round trip through bytes."""
        request_id = next(self._ids)
        reply_frames = self.broker_receive(encode_call(call, request_id))
        [body] = self._client_reader.feed(reply_frames)
        reply = decode_envelope(body)
        assert reply.id == request_id, f"reply {reply.id} to request {request_id}"
        return result_of(call, reply)

    def broker_receive(self, data: bytes) -> bytes:
        """The broker's side: request frames in, reply frames out."""
        out = []
        for body in self._broker_reader.feed(data):
            self.requests.append(body)
            reply = self._serve(body)
            self.replies.append(reply)
            out.append(encode_frame(reply))
        return b"".join(out)

    def _serve(self, body: bytes) -> bytes:
        try:
            request = decode_request(body)
        except RequestError as exc:
            return encode_error(exc.request_id, exc.error)
        self.ops.append(request.op)
        if isinstance(request, m.CancelWait):
            return encode_ok(request.id, CancelWaitResult(False))  # nothing is ever parked here
        try:
            if self.extension is not None:
                self.extension.check(request)
            result = dispatch.execute(self.engine, request, PEER, self.now, self.handlers)
            reply = encode_ok(request.id, result)  # at once: the engine's objects are live
        except errors.KittiwakeError as exc:
            return encode_error(request.id, exc)
        self.store.commit()
        return reply


class PairClient(Client):
    """A `Client` whose requests cross a `WirePair` instead of a connection."""

    def __init__(self, pair: WirePair, *, worker: str | None = None) -> None:
        self.pair = pair
        self.address = parse_url("kw://127.0.0.1:7370")
        self.timeout = None
        self.worker = worker

    def _run(self, call: Call[T], timeout: float | None) -> T:
        return self.pair.call(call)

    def close(self) -> None:
        pass


class PairAsyncClient(AsyncClient):
    """An `AsyncClient` whose requests cross a `WirePair` instead of a connection."""

    def __init__(self, pair: WirePair, *, worker: str | None = None) -> None:
        super().__init__("kw://127.0.0.1:7370", worker=worker)
        self.pair = pair

    async def _run(self, call: Call[T], timeout: float | None) -> T:
        return self.pair.call(call)


def any_client(pair: WirePair, kind: str, **options: Any) -> Any:
    """A `PairClient`, or a `PairAsyncClient` whose coroutine methods run to completion when called."""
    if kind == "Client":
        return PairClient(pair, **options)
    return _Completed(PairAsyncClient(pair, **options))


class _Completed:
    def __init__(self, client: AsyncClient) -> None:
        self.client = client

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.client, name)

        def run(*args: Any, **kwargs: Any) -> Any:
            coroutine = method(*args, **kwargs)
            try:
                coroutine.send(None)  # nothing here ever suspends
            except StopIteration as done:
                return done.value
            raise AssertionError(f"{name} suspended: a pair answers at once")

        return run
