"""Calls to frames and frames to results: the client's half of the protocol, sans-IO.

A request goes out as `kittiwake.protocol` frames it (length prefix, msgpack
map with `id` and `op`). A reply is first read only as far as its envelope —
`id`, `ok`, and the `result` left as raw msgpack — so the connection can route
it to its waiting call by id; the call then decodes the raw result straight
into its typed records (one pass, no intermediate dicts). An error reply
becomes the `kittiwake.errors` class for its code.

Also here: the client-side timing rules shared by both clients.
"""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec

from kittiwake import errors
from kittiwake.client.calls import Call
from kittiwake.protocol import encode_frame, encode_request

T = TypeVar("T")

# A long-poll lease may be held by the broker for `wait_secs`; the client waits
# this much longer for the reply before it calls the request timed out.
LONG_POLL_MARGIN_SECS = 5.0
# Replies can be much larger than requests (a lease of many big tasks).
DEFAULT_MAX_REPLY_BYTES = 256 * 1024 * 1024


class NotSent(Exception):
    """A request did not leave this side whole, so the broker cannot have acted
    on it: safe to retry on a new connection. Never escapes the client."""


class ErrorBody(msgspec.Struct):
    code: str
    message: str = ""


class ReplyEnvelope(msgspec.Struct):
    id: int
    ok: bool
    result: msgspec.Raw = msgspec.Raw()
    error: ErrorBody | None = None


_envelope_decoder = msgspec.msgpack.Decoder(ReplyEnvelope)


def encode_call(call: Call[Any], request_id: int) -> bytes:
    """The framed request for a call."""
    return encode_frame(encode_request(call.op, request_id, call.fields))


def decode_envelope(body: bytes) -> ReplyEnvelope:
    """The envelope of a reply frame; a body that is not a reply breaks the connection."""
    try:
        return _envelope_decoder.decode(body)
    except msgspec.DecodeError as exc:
        raise errors.ConnectionLost(f"the broker sent a frame that is not a reply: {exc}") from None


def error_of(reply: ReplyEnvelope) -> errors.KittiwakeError:
    """The `kittiwake.errors` error an error reply carries."""
    body = reply.error or ErrorBody("INTERNAL", "error reply without an error")
    return errors.error_for_code(body.code, body.message)


def result_of(call: Call[T], reply: ReplyEnvelope) -> T:
    """The call's typed result, or the broker's error raised as its kittiwake.errors class."""
    if not reply.ok:
        raise error_of(reply)
    try:
        return call.decode(bytes(reply.result) if reply.result else msgspec.msgpack.encode(None))
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
