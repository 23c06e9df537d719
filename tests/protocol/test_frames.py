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


# ------------------------------------------------------------- any split, against a model

from hypothesis import given, settings
from hypothesis import strategies as st


def _model_frames(stream: bytes, max_frame: int) -> tuple[list[bytes], bool]:
    """The frames of a whole stream read at once, and whether a bad length stopped it."""
    frames, start = [], 0
    while len(stream) - start >= 4:
        (length,) = struct.unpack_from(">I", stream, start)
        if length > max_frame:
            return frames, True
        if start + 4 + length > len(stream):
            break
        frames.append(stream[start + 4 : start + 4 + length])
        start += 4 + length
    return frames, False


@settings(max_examples=300, deadline=None)
@given(
    bodies=st.lists(st.binary(max_size=300), max_size=8),
    cuts=st.lists(st.integers(min_value=0, max_value=3000), max_size=12),
    as_views=st.booleans(),
    tail=st.binary(max_size=6),
)
def test_frames_come_out_whole_however_the_stream_is_cut(
    bodies: list[bytes], cuts: list[int], as_views: bool, tail: bytes,
) -> None:
    """Cut anywhere, fed as bytes or as a view of a buffer reused after each feed (as the broker's
    shared read buffer is), the reader returns the model's frames, holds what arrived of the frame
    in progress, and refuses a length over its limit at the same frame."""
    max_frame = 200
    stream = b"".join(encode_frame(body) for body in bodies) + tail
    expected, refused = _model_frames(stream, max_frame)
    reader = FrameReader(max_frame=max_frame)
    got: list[bytes] = []
    scratch = bytearray(len(stream) + 1)
    points = sorted({min(cut, len(stream)) for cut in cuts} | {len(stream)})
    previous = 0
    stopped = False
    for point in points:
        piece = stream[previous:point]
        previous = point
        if not piece:
            continue
        try:
            if as_views:
                scratch[: len(piece)] = piece
                got += reader.feed(memoryview(scratch)[: len(piece)])
                scratch[: len(piece)] = b"\xee" * len(piece)  # the owner reuses its buffer
            else:
                got += reader.feed(piece)
        except Exception as exc:  # noqa: BLE001 - the refusal is what is checked
            assert type(exc).__name__ == "FrameTooLarge"
            stopped = True
            break
        if reader.rejected is not None:
            stopped = True
            break
    assert got == expected
    assert stopped == refused
    if not refused:
        consumed = sum(4 + len(frame) for frame in expected)
        assert reader.buffered_bytes == len(stream) - consumed
