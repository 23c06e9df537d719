"""Msgpack values a fuzz input decodes into, including encodings no encoder makes.

`any_value` makes any msgpack value: nil, bools, ints of every size class up to
uint64 and down to int64, floats with NaN and the infinities, strs, bins,
arrays, maps with keys of any type and repeated keys, ext types, strs that are
not UTF-8, and containers whose header announces more items than follow. It
returns encoded bytes, because several of those cannot be built from Python
objects; `msgspec.Raw` carries them into a larger message.
"""

from __future__ import annotations

import struct

import msgspec

from .fuzz_input import FuzzInput

_encode = msgspec.msgpack.Encoder().encode

MAX_DEPTH = 3
MAX_ITEMS = 6

INT_EDGES = (
    0, 1, -1, 127, 128, -32, -33, 255, 256, -128, -129, 65535, 65536, -32768, -32769,
    2**31 - 1, 2**31, -(2**31), -(2**31) - 1, 2**32 - 1, 2**32, 2**53 + 1,
    2**63 - 1, 2**63, -(2**63), 2**64 - 1,
)
FLOAT_EDGES = (0.0, -0.0, 0.5, 1e-300, 1e300, float("nan"), float("inf"), float("-inf"), 30.0, 43200.0001)
TEXT = ("", "q", "id", "op", "a#b", "\x00", "é", "\U0001f600", "x" * 300, "q.dead")


def array_header(count: int) -> bytes:
    if count < 16:
        return bytes([0x90 | count])
    if count < 1 << 16:
        return b"\xdc" + struct.pack(">H", count)
    return b"\xdd" + struct.pack(">I", count)


def map_header(count: int) -> bytes:
    if count < 16:
        return bytes([0x80 | count])
    if count < 1 << 16:
        return b"\xde" + struct.pack(">H", count)
    return b"\xdf" + struct.pack(">I", count)


def str_header(size: int) -> bytes:
    if size < 32:
        return bytes([0xA0 | size])
    if size < 1 << 8:
        return b"\xd9" + bytes([size])
    if size < 1 << 16:
        return b"\xda" + struct.pack(">H", size)
    return b"\xdb" + struct.pack(">I", size)


def encode_map(pairs: list[tuple[bytes, bytes]]) -> bytes:
    """A map from already encoded keys and values, in order, repeats kept."""
    return map_header(len(pairs)) + b"".join(key + value for key, value in pairs)


def encode_array(items: list[bytes]) -> bytes:
    return array_header(len(items)) + b"".join(items)


def any_value(source: FuzzInput, depth: int = 0) -> bytes:
    """One encoded msgpack value of any type."""
    kind = source.integer(0, 15)
    if depth >= MAX_DEPTH and kind >= 9:
        kind %= 9
    if kind == 0:
        return b"\xc0"
    if kind == 1:
        return _encode(source.boolean())
    if kind == 2:
        return _encode(source.integer(-32, 127))
    if kind == 3:
        return _encode(source.choice(INT_EDGES))
    if kind == 4:
        return _encode(source.choice(FLOAT_EDGES))
    if kind == 5:
        return b"\xcb" + source.take(8).ljust(8, b"\x00")  # any float64 bit pattern
    if kind == 6:
        return _encode(source.choice(TEXT))
    if kind == 7:
        raw = source.take(source.integer(0, 40))
        return str_header(len(raw)) + raw  # a str whose bytes need not be UTF-8
    if kind == 8:
        return _encode(source.take(source.integer(0, 40)))
    if kind in (9, 10):
        return encode_array([any_value(source, depth + 1) for _ in range(source.integer(0, MAX_ITEMS))])
    if kind in (11, 12):
        count = source.integer(0, MAX_ITEMS)
        return encode_map([(any_value(source, depth + 1), any_value(source, depth + 1)) for _ in range(count)])
    if kind == 13:
        return _encode(msgspec.msgpack.Ext(source.integer(-128, 127), source.take(source.integer(0, 20))))
    if kind == 14:
        # a container that announces far more than follows
        header = source.choice((b"\xdd", b"\xdf", b"\xdb", b"\xc6"))
        return header + source.take(4).ljust(4, b"\xff")
    return source.take(source.integer(1, 8))  # any bytes: most are not one whole value
