"""UDP datagrams: the header around a protocol body, padding, what is not a datagram of ours, and
the bound of three times the request on every reply."""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kittiwake import errors
from kittiwake.protocol import decode_reply
from kittiwake.protocol.datagrams import (
    HEADER_BYTES,
    MAX_DATAGRAM_BYTES,
    PADDED_REQUEST_BYTES,
    NotADatagram,
    decode_datagram,
    encode_datagram,
    error_datagram,
    reply_limit_bytes,
)
from kittiwake.protocol.messages import encode_request


def test_a_datagram_carries_the_producer_id_and_the_body() -> None:
    body = encode_request("ping", 3, {})
    datagram = decode_datagram(encode_datagram(2**64 - 1, body))
    assert datagram.producer_id == 2**64 - 1
    assert datagram.body == body


def test_padding_makes_the_datagram_larger_and_is_never_read() -> None:
    body = encode_request("lease", 3, {"queues": ["q"]})
    padded = encode_datagram(7, body, padded_to=PADDED_REQUEST_BYTES)
    assert len(padded) == PADDED_REQUEST_BYTES
    assert decode_datagram(padded).body == body
    assert decode_datagram(padded[:-1] + b"\xff").body == body  # whatever the padding holds
    assert encode_datagram(7, body, padded_to=10) == encode_datagram(7, body)  # never shorter


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"KWU",
        b"KWU\x02\x00\x00",
        b"GET / HTTP/1.1\r\n\r\n",
        b"KWU\x02" + bytes(8),  # no body length
        b"KWU\x01" + bytes(8) + b"\x80",  # version 1: no body length, no padding
        b"KWU\x02" + bytes(8) + b"\x00\x05" + b"\x80",  # a body of 5 announced, 1 there
    ],
)
def test_bytes_without_our_header_are_not_a_datagram(data: bytes) -> None:
    with pytest.raises(NotADatagram):
        decode_datagram(data)


def test_the_size_fits_an_ethernet_frame() -> None:
    assert HEADER_BYTES == 14
    assert MAX_DATAGRAM_BYTES + 40 + 8 <= 1500  # IPv6 and UDP headers


def test_a_reply_is_at_most_three_times_its_request_and_a_padded_request_may_get_a_full_datagram() -> None:
    assert reply_limit_bytes(20) == 60
    assert reply_limit_bytes(PADDED_REQUEST_BYTES) == MAX_DATAGRAM_BYTES
    assert reply_limit_bytes(PADDED_REQUEST_BYTES - 1) < MAX_DATAGRAM_BYTES
    assert reply_limit_bytes(60_000) == MAX_DATAGRAM_BYTES


def test_an_error_too_long_for_the_bound_keeps_its_code_and_the_start_of_its_message() -> None:
    error = errors.Unauthorized("this broker needs credentials (kwu://USER:TOKEN@HOST:PORT): send auth first")
    datagram = error_datagram(5, 1, error, 100)
    assert datagram is not None and len(datagram) <= 100
    reply = decode_reply(decode_datagram(datagram).body)
    assert (reply.id, reply.error["code"]) == (1, "UNAUTHORIZED")
    assert error.message.startswith(reply.error["message"]) and reply.error["message"]
    assert error_datagram(5, 1, error, 40) is None  # not even the code fits


@given(st.text(max_size=300), st.integers(0, 2**63), st.integers(1, MAX_DATAGRAM_BYTES))
def test_an_error_datagram_is_never_over_its_bound(message: str, request_id: int, limit: int) -> None:
    error = errors.BadRequest(message)
    datagram = error_datagram(9, request_id, error, limit)
    if datagram is None:  # only when not even an empty message fits
        bare = encode_datagram(9, msgspec.msgpack.encode({"id": request_id, "ok": False,
                                                          "error": {"code": "BAD_REQUEST", "message": ""}}))
        assert len(bare) > limit
        return
    assert len(datagram) <= limit
    reply = decode_reply(decode_datagram(datagram).body)
    assert reply.error["code"] == "BAD_REQUEST" and error.message.startswith(reply.error["message"])
