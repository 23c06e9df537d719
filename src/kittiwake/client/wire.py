"""Calls to frames and frames to results: the client's half of the protocol, sans-IO.

A request goes out as its `kittiwake.protocol.messages` Struct, framed. A
reply is first read only as far as its envelope (`replies.decode_envelope`:
`id`, `ok`, and the `result` left as raw msgpack) so the connection can route
it to its waiting call by id; the call then decodes the raw result straight
into its typed records. An error reply becomes the `kittiwake.errors` class
for its code.

Also here: the client-side timing rules shared by both clients.
"""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec

from kittiwake import errors
from kittiwake.client.calls import Call
from kittiwake.protocol import encode_frame
from kittiwake.protocol.messages import encode
from kittiwake.protocol.replies import ReplyEnvelope, error_of
from kittiwake.protocol.replies import decode_envelope as _decode_envelope

T = TypeVar("T")

# A long-poll lease may be held by the broker for `wait_secs`; the client waits
# this much longer for the reply before it calls the request timed out.
LONG_POLL_MARGIN_SECS = 5.0
# Replies can be much larger than requests (a lease of many big tasks).
DEFAULT_MAX_REPLY_BYTES = 256 * 1024 * 1024

_NIL = msgspec.msgpack.encode(None)

__all__ = ["NotSent", "ReplyEnvelope", "decode_envelope", "effective_timeout", "encode_call", "error_of", "result_of"]


class NotSent(Exception):
    """A request did not leave this side whole, so the broker cannot have acted
    on it: safe to retry on a new connection. Never escapes the client."""


def encode_call(call: Call[Any], request_id: int) -> bytes:
    """The framed request for a call, under `request_id`."""
    request = call.request
    request.id = request_id
    return encode_frame(encode(request))


def decode_envelope(body: bytes) -> ReplyEnvelope[msgspec.Raw]:
    """The envelope of a reply frame; a body that is not a reply breaks the connection."""
    try:
        return _decode_envelope(body)
    except msgspec.DecodeError as exc:
        raise errors.ConnectionLost(f"the broker sent a frame that is not a reply: {exc}") from None


def result_of(call: Call[T], reply: ReplyEnvelope[msgspec.Raw]) -> T:
    """The call's typed result, or the broker's error raised as its kittiwake.errors class."""
    if not reply.ok:
        raise error_of(reply)
    try:
        return call.decode(reply.result or _NIL)
    except msgspec.DecodeError as exc:
        raise errors.InternalError(f"unexpected reply to {call.op}: {exc}") from None


def effective_timeout(call: Call[Any], timeout: float | None, client_timeout: float | None) -> float | None:
    """How long to wait for a reply: the call's own timeout if given; otherwise the
    client's, which for a long-poll counts from the end of the broker's wait
    (and a long-poll never waits forever: wait_secs + margin at most by default)."""
    if timeout is not None:
        return timeout
    if call.wait_secs > 0:
        base = LONG_POLL_MARGIN_SECS if client_timeout is None else client_timeout
        return call.wait_secs + base
    return client_timeout
