"""The UDP form of the protocol (`kwu://`), sans-IO: one request or one reply per datagram.

CMQ (001) carries batched messages over UDP so that a lost packet costs one
retransmission of one small batch instead of a stalled stream. Kittiwake's
UDP transport keeps the TCP protocol's message bodies (`messages`, `replies`)
and only swaps the framing: a datagram is

    magic b"KWU" | version 2 (1 byte) | producer id (8 bytes, big-endian)
    | body length (2 bytes, big-endian) | msgpack body | padding

The body's `id` is the request id; a client numbers its requests 1, 2, 3, …
and a retransmission reuses the id, so (producer id, request id) names one
request of one sender for the broker's retransmit window
(`broker.udp.retransmit_window`). A reply carries the producer id it answers
and the request's `id` in its body. Whatever follows the body is padding
(zero bytes, by convention; never read): it makes a request large enough to
be answered in full (below).

Size. A datagram is at most `MAX_DATAGRAM_BYTES` = 1,400 bytes of UDP
payload, both ways: 1,500 bytes of Ethernet MTU less 40 of IPv6 and 8 of UDP
header leave 1,452; 52 more are kept for tunnels, VLAN tags and PPPoE, so a
datagram is never fragmented on an ordinary LAN or the Internet path MTU of
most hosts. Fragmentation is what makes UDP lose badly: one lost fragment
loses the whole datagram, so a 8 kB datagram over 1.4% packet loss is lost
about 8% of the time. The cost is fewer tasks per request; an enqueue of many
tasks is split by the client, and a lease is answered with as many tasks as
fit (`Lease.max_reply_bytes`).

Amplification. UDP's source address is only claimed, so a reply may go to a
forged address: the broker would reflect, and amplify, what an attacker
sends. As QUIC bounds what it sends to an address it has not verified
(RFC 9000 §8: three times what it received), the broker answers a datagram
of n bytes with at most `reply_limit_bytes(n)` = min(3 × n, 1,400) bytes,
whoever sent it; a reply that would be larger becomes a short error (its
message cut to fit: `error_datagram`), or nothing when not even that fits. A
request of `PADDED_REQUEST_BYTES` (467) or more may get a full datagram back,
so the client pads the requests whose replies may be large (a lease, a read)
to that size, the way QUIC pads its first packets to 1,200 bytes.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from kittiwake.errors import KittiwakeError
from kittiwake.protocol.replies import encode_error

MAGIC = b"KWU"
VERSION = 2
HEADER = struct.Struct(">3sBQH")
HEADER_BYTES = HEADER.size  # 14
MAX_DATAGRAM_BYTES = 1400
MAX_BODY_BYTES = MAX_DATAGRAM_BYTES - HEADER_BYTES
RECEIVE_BYTES = 65_535  # the largest UDP payload: read it whole to tell an oversize datagram apart
PRODUCER_ID_MAX = (1 << 64) - 1
AMPLIFICATION_FACTOR = 3  # a reply is at most this many times the datagram it answers
PADDED_REQUEST_BYTES = -(-MAX_DATAGRAM_BYTES // AMPLIFICATION_FACTOR)  # 467: room for a full datagram back


@dataclass(frozen=True, slots=True)
class Datagram:
    """A datagram cut into its producer id and its msgpack body (its padding left out)."""

    producer_id: int
    body: bytes


class NotADatagram(Exception):
    """The bytes do not start with the UDP header of this protocol version (dropped, never answered)."""


def encode_datagram(producer_id: int, body: bytes, padded_to: int = 0) -> bytes:
    """Header plus body, padded with zeros to `padded_to` bytes if shorter; the caller checks the
    size against `MAX_DATAGRAM_BYTES`."""
    datagram = HEADER.pack(MAGIC, VERSION, producer_id, len(body)) + body
    if len(datagram) < padded_to:
        datagram += bytes(padded_to - len(datagram))
    return datagram


def decode_datagram(data: bytes) -> Datagram:
    """The producer id and body of a datagram; `NotADatagram` if the header is not ours."""
    if len(data) < HEADER_BYTES:
        raise NotADatagram(f"{len(data)} bytes is shorter than the {HEADER_BYTES}-byte header")
    magic, version, producer_id, body_bytes = HEADER.unpack_from(data, 0)
    if magic != MAGIC:
        raise NotADatagram("not a kittiwake datagram")
    if version != VERSION:
        raise NotADatagram(f"datagram version {version}, expected {VERSION}")
    if HEADER_BYTES + body_bytes > len(data):
        raise NotADatagram(f"a body of {body_bytes} bytes announced, {len(data) - HEADER_BYTES} there")
    return Datagram(producer_id, bytes(data[HEADER_BYTES : HEADER_BYTES + body_bytes]))


def reply_limit_bytes(request_bytes: int) -> int:
    """The most the broker sends back for a datagram of `request_bytes` (padding included)."""
    return min(MAX_DATAGRAM_BYTES, AMPLIFICATION_FACTOR * request_bytes)


def error_datagram(producer_id: int, request_id: int, error: KittiwakeError, limit_bytes: int) -> bytes | None:
    """The datagram of an error reply of at most `limit_bytes`, its message cut short to fit
    (down to nothing: the code stays whole); None when not even that fits."""
    datagram = encode_datagram(producer_id, encode_error(request_id, error))
    excess = len(datagram) - limit_bytes
    if excess <= 0:
        return datagram
    message = error.message.encode()
    # `excess` bytes fewer always fit: a shorter string's msgpack header is never longer
    cut = message[: max(0, len(message) - excess)].decode(errors="ignore")  # never half a character
    datagram = encode_datagram(producer_id, encode_error(request_id, error, message=cut))
    return datagram if len(datagram) <= limit_bytes else None
