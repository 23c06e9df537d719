"""Fuzz target `requests`: `decode_request` on any frame body.

Half the inputs are a body as it is (the rest of the bytes after the first);
the other half build one from `request_bodies`: a real op with well-typed
fields most of the time, and any msgpack value, repeated or invented keys, or
broken encodings some of the time. Properties:

* `decode_request` returns a request of the type its op names, or raises
  `RequestError` carrying a `MALFORMED_FRAME`, `UNKNOWN_OP` or `BAD_REQUEST`
  error that encodes as a reply; nothing else escapes;
* the error carries the body's own id whenever a plain msgpack reading of the
  body finds an integer `id` and a string `op` (a client can match it);
* a decoded request encodes and decodes again to the same bytes;
* the peak allocation stays within a multiple of the body's size.
"""

from __future__ import annotations

from typing import Any

import msgspec

from kittiwake import errors
from kittiwake.protocol import REQUEST_TYPES, RequestError, decode_request, encode_error

from .allocation import allocation_budget
from .fuzz_input import FuzzInput
from .request_bodies import Vocabulary, request_body

DECODE_ERROR_CODES = frozenset({errors.MalformedFrame.code, errors.UnknownOperation.code, errors.BadRequest.code})
ALLOCATION_PER_BYTE = 128  # a 3-byte msgpack map entry can become a 200-byte dict or Struct
ALLOCATION_SLACK_BYTES = 256 * 1024


def plain_envelope(body: bytes) -> tuple[int, str] | None:
    """(id, op) as a plain msgpack reading of the body finds them, if it does."""
    try:
        value: Any = msgspec.msgpack.decode(body)
    except Exception:  # any failure: this reading only serves as an oracle when it works
        return None
    if isinstance(value, dict) and type(value.get("id")) is int and type(value.get("op")) is str:
        return value["id"], value["op"]
    return None


def check_body(body: bytes) -> None:
    envelope = plain_envelope(body)
    with allocation_budget(ALLOCATION_PER_BYTE * len(body) + ALLOCATION_SLACK_BYTES, "decode_request"):
        try:
            request = decode_request(body)
        except RequestError as exc:
            failure: RequestError | None = exc
        else:
            failure = None
    if failure is not None:
        assert isinstance(failure.error, errors.KittiwakeError)
        assert failure.error.code in DECODE_ERROR_CODES, failure.error
        assert type(failure.request_id) is int
        encode_error(failure.request_id, failure.error)
        if envelope is not None:
            assert failure.request_id == envelope[0], (failure.request_id, envelope)
        return
    assert type(request) is REQUEST_TYPES[request.op], (type(request), request.op)
    if envelope is not None:
        assert (request.id, request.op) == envelope
    again = msgspec.msgpack.encode(request)
    assert msgspec.msgpack.encode(decode_request(again)) == again


def check(data: bytes) -> None:
    source = FuzzInput(data)
    if source.boolean():
        body = source.rest()
    else:
        body = request_body(source, Vocabulary(), request_id=source.choice((0, 1, 7, 2**63 - 1, -1)))
    check_body(body)
