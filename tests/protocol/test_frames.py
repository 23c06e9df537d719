"""Framing, sans-IO: what a reader holds of a frame in progress, and what its prefix announces."""

from __future__ import annotations

import struct

from kittiwake.protocol import FrameReader, encode_frame


def test_a_reader_holds_what_arrived_never_what_the_prefix_announces() -> None:
    reader = FrameReader(max_frame=1 << 24)
    prefix = struct.pack(">I", 1 << 24)
    assert (reader.buffered_bytes, reader.frame_bytes) == (0, 0)
    assert reader.feed(prefix[:2]) == []
    assert (reader.buffered_bytes, reader.frame_bytes) == (2, 4)  # the prefix itself is all it knows of
    assert reader.feed(prefix[2:] + b"abc") == []
    assert (reader.buffered_bytes, reader.frame_bytes) == (7, 4 + (1 << 24))


def test_after_whole_frames_the_next_frame_in_progress_is_described() -> None:
    reader = FrameReader()
    second = encode_frame(b"0123456789")
    assert reader.feed(memoryview(encode_frame(b"one") + second[:6])) == [b"one"]
    assert (reader.buffered_bytes, reader.frame_bytes) == (6, 14)
    assert reader.feed(second[6:]) == [b"0123456789"]
    assert (reader.buffered_bytes, reader.frame_bytes) == (0, 0)
