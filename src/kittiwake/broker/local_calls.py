"""Protocol requests from inside the broker: submit to the group commit, await the reply.

A face that is not a binary connection (the SQS API, the dashboard's actions,
a future broker link) speaks to the engine exactly as a TCP client does: it
builds requests of `kittiwake.protocol.messages`, hands each to its host
(`faces.Host.submit`) and gets the encoded reply after the pass that ran it
committed, so its answer is as durable as any ack and passes the same access
rules. Each call is its own `Caller` of the pass (`LocalCall`), as a UDP
datagram is: it has one reply, delivered to a future.

A call whose awaiting handler went away (its HTTP client hung up during a
long poll) is *abandoned*: a parked long-poll is withdrawn from the pass, and
tasks a lease reply still brings are handed back at once (a reject, no
attempt counted), so nothing stays invisible for a lease that nobody will
ever end.
"""

from __future__ import annotations

import asyncio
import itertools
from typing import TYPE_CHECKING, Any

from kittiwake import errors
from kittiwake.protocol import messages as m
from kittiwake.protocol.frames import HEADER_BYTES
from kittiwake.protocol.replies import LeasedTask, decode_envelope, error_of, result_decoder

if TYPE_CHECKING:
    from kittiwake.broker.faces import Host

_ids = itertools.count(1)


class LocalCall:
    """One request's `Caller` in a pass: its reply resolves `future`."""

    __slots__ = ("future", "peer", "closed")

    ended = False
    write_paused = False
    deferred: tuple[()] = ()

    def __init__(self, future: asyncio.Future[bytes], peer: str | None) -> None:
        self.future = future
        self.peer = peer
        self.closed = False

    def deliver(self, frames: list[bytes]) -> None:
        for frame in frames:
            body = frame[HEADER_BYTES:]
            if not self.future.done():
                self.future.set_result(body)
            # else: answered after it was abandoned; `LocalCalls.call` hands back what it leased

    def defer(self, item: object) -> None:  # never asked: `write_paused` is always False
        raise AssertionError("an in-process call is never deferred")


class LocalCalls:
    """Requests run through a host's group commit, one awaited reply each."""

    def __init__(self, host: Host) -> None:
        self.host = host

    async def call(self, request: m.Request, peer: str | None = None) -> Any:
        """The decoded result of `request`; raises the `kittiwake.errors` error of an error reply,
        or `errors.Unavailable` when the broker is stopping."""
        host = self.host
        if not host.accepting:
            raise errors.Unavailable("the broker is stopping")
        loop = asyncio.get_running_loop()
        future: asyncio.Future[bytes] = loop.create_future()
        caller = LocalCall(future, peer)
        host.submit(caller, request)
        try:
            body = await asyncio.shield(future)
        except asyncio.CancelledError:
            caller.closed = True
            host.withdraw(caller)  # a parked long-poll: withdrawn
            if type(request) is m.Lease:
                future.add_done_callback(lambda done: self._hand_back(done, request.op))
            raise
        envelope = decode_envelope(body)
        if not envelope.ok:
            raise error_of(envelope)
        return result_decoder(request.op)(envelope.result)

    def _hand_back(self, future: asyncio.Future[bytes], op: str) -> None:
        """Tasks leased for a call nobody awaits any more go back to their queues at once."""
        if future.cancelled():
            return
        envelope = decode_envelope(future.result())
        if not envelope.ok:
            return
        tasks: list[LeasedTask] = result_decoder(op)(envelope.result)
        if tasks:
            release = m.Release(id=next(_ids), op="release", leases=[task.lease_ref() for task in tasks], reject=True)
            self.host.submit(LocalCall(asyncio.get_running_loop().create_future(), None), release)


def request_id() -> int:
    """An id for a request built here: each call is its own caller, so any id does; these are distinct."""
    return next(_ids)
