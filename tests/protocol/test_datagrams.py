"""UDP datagrams: the header around a protocol body, and what is not a datagram of ours."""

from __future__ import annotations

import pytest

from kittiwake.protocol.datagrams import (
    HEADER_BYTES,
    MAX_DATAGRAM_BYTES,
    NotADatagram,
    decode_datagram,
    encode_datagram,
)
from kittiwake.protocol.messages import encode_request


def test_a_datagram_carries_the_producer_id_and_the_body() -> None:
    body = encode_request("ping", 3, {})
    datagram = decode_datagram(encode_datagram(2**64 - 1, body))
    assert datagram.producer_id == 2**64 - 1
    assert datagram.body == body


@pytest.mark.parametrize("data", [b"", b"KWU", b"KWU\x01\x00\x00", b"GET / HTTP/1.1\r\n\r\n", b"KWU\x02" + bytes(8)])
def test_bytes_without_our_header_are_not_a_datagram(data: bytes) -> None:
    with pytest.raises(NotADatagram):
        decode_datagram(data)


def test_the_size_fits_an_ethernet_frame() -> None:
    assert HEADER_BYTES == 12
    assert MAX_DATAGRAM_BYTES + 40 + 8 <= 1500  # IPv6 and UDP headers
