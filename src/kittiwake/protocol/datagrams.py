"""The UDP form of the protocol (`kwu://`), sans-IO: one request or one reply per datagram.

CMQ (001) carries batched messages over UDP so that a lost packet costs one
retransmission of one small batch instead of a stalled stream. Kittiwake's
UDP transport keeps the TCP protocol's message bodies (`messages`, `replies`)
and only swaps the framing: a datagram is

    magic b"KWU" | version (1 byte) | producer id (8 bytes, big-endian) | msgpack body

with no length prefix (a datagram is its own frame). The body's `id` is the
request id; a client numbers its requests 1, 2, 3, … and a retransmission
reuses the id, so (producer id, request id) names one request for the
broker's retransmit window (`broker.retransmit_window`). A reply carries the
producer id it answers and the request's `id` in its body.

Size. A datagram is at most `MAX_DATAGRAM_BYTES` = 1,400 bytes of UDP
payload, both ways: 1,500 bytes of Ethernet MTU less 40 of IPv6 and 8 of UDP
header leave 1,452; 52 more are kept for tunnels, VLAN tags and PPPoE, so a
datagram is never fragmented on an ordinary LAN or the Internet path MTU of
most hosts. Fragmentation is what makes UDP lose badly: one lost fragment
loses the whole datagram, so a 8 kB datagram over 1.4% packet loss is lost
about 8% of the time. The cost is fewer tasks per request; an enqueue of many
tasks is split by the client, and a lease is answered with as many tasks as
fit (`Lease.max_reply_bytes`).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

MAGIC = b"KWU"
VERSION = 1
HEADER = struct.Struct(">3sBQ")
HEADER_BYTES = HEADER.size  # 12
MAX_DATAGRAM_BYTES = 1400
MAX_BODY_BYTES = MAX_DATAGRAM_BYTES - HEADER_BYTES
RECEIVE_BYTES = 65_535  # the largest UDP payload: read it whole to tell an oversize datagram apart
PRODUCER_ID_MAX = (1 << 64) - 1


@dataclass(frozen=True, slots=True)
class Datagram:
    """A datagram cut into its producer id and its msgpack body."""

    producer_id: int
    body: bytes


class NotADatagram(Exception):
    """The bytes do not start with the UDP header of this protocol version (dropped, never answered)."""


def encode_datagram(producer_id: int, body: bytes) -> bytes:
    """Header plus body; the caller checks the size against `MAX_DATAGRAM_BYTES`."""
    return HEADER.pack(MAGIC, VERSION, producer_id) + body


def decode_datagram(data: bytes) -> Datagram:
    """The producer id and body of a datagram; `NotADatagram` if the header is not ours."""
    if len(data) < HEADER_BYTES:
        raise NotADatagram(f"{len(data)} bytes is shorter than the {HEADER_BYTES}-byte header")
    magic, version, producer_id = HEADER.unpack_from(data, 0)
    if magic != MAGIC:
        raise NotADatagram("not a kittiwake datagram")
    if version != VERSION:
        raise NotADatagram(f"datagram version {version}, expected {VERSION}")
    return Datagram(producer_id, bytes(data[HEADER_BYTES:]))
