"""Request decoding at its edges: what reaches the client when a body cannot be served.

`decode_request` raises only `RequestError`, carrying a `KittiwakeError` and the best id it can
find, so the broker answers the request that failed instead of an anonymous error with id 0.
The fuzz target `requests` (tests/fuzz) holds it to that on any body; these are the cases it found.
"""

from __future__ import annotations

import pytest

from kittiwake import errors
from kittiwake.protocol import RequestError, decode_request

# msgpack: a map of 3 entries: "id": 7, "op": "ping", and a third entry
PING_7 = b"\x83\xa2id\x07\xa2op\xa4ping"


def test_an_error_reply_carries_the_id_of_a_map_with_a_key_that_is_not_a_string() -> None:
    body = PING_7 + b"\xcb" + bytes(8) + b"\xc0"  # the key 0.0 (float64), the value nil
    with pytest.raises(RequestError) as caught:
        decode_request(body)
    assert caught.value.request_id == 7
    assert caught.value.error.code == errors.MalformedFrame.code


def test_a_body_nested_deeper_than_the_recursion_limit_is_malformed_not_a_crash() -> None:
    # an unknown key whose value is 5,000 nested one-item arrays: msgspec raises RecursionError
    body = PING_7 + b"\xa3foo" + b"\x91" * 5000 + b"\x01"
    with pytest.raises(RequestError) as caught:
        decode_request(body)
    assert caught.value.error.code == errors.MalformedFrame.code
    assert "nested too deeply" in caught.value.error.message
