"""Fuzz target `frames`: `FrameReader` fed any byte stream, cut into chunks at any points.

The input is a max frame (one of `MAX_FRAMES`), up to 15 chunk sizes, then
the stream itself. The stream is fed chunk by chunk and held to
`reference_frames`, a plain one-shot reading of the whole stream:

* the frames returned over all feeds are the reference's, in order, wherever
  the stream was cut;
* a length over the max frame is refused with `FrameTooLarge` exactly when
  the reference meets one, and every feed after that raises it again;
* no other exception escapes;
* between feeds the reader holds only the bytes not yet framed, fewer than a
  header plus the max frame;
* the peak allocation of all feeds stays within a small multiple of the bytes
  fed: nothing is set aside for a length announced but not sent.
"""

from __future__ import annotations

from kittiwake.errors import FrameTooLarge
from kittiwake.protocol import DEFAULT_MAX_FRAME, FrameReader
from kittiwake.protocol.frames import HEADER_BYTES

from .allocation import allocation_budget
from .fuzz_input import FuzzInput

MAX_FRAMES = (0, 1, 16, 255, 64 * 1024, DEFAULT_MAX_FRAME)
MAX_CHUNKS = 15
ALLOCATION_PER_BYTE = 16  # a 2-byte frame is a 35-byte bytes object plus its list slot
ALLOCATION_SLACK_BYTES = 64 * 1024


def reference_frames(stream: bytes, max_frame: int) -> tuple[list[bytes], bool]:
    """The frame bodies of a whole stream, and whether it reaches a length over `max_frame`."""
    frames = []
    at = 0
    while len(stream) - at >= HEADER_BYTES:
        length = int.from_bytes(stream[at : at + HEADER_BYTES], "big")
        if length > max_frame:
            return frames, True
        if at + HEADER_BYTES + length > len(stream):
            break
        frames.append(stream[at + HEADER_BYTES : at + HEADER_BYTES + length])
        at += HEADER_BYTES + length
    return frames, False


def cut(stream: bytes, sizes: list[int]) -> list[bytes]:
    """The stream in chunks of the given sizes, the rest as the last chunk."""
    chunks = []
    at = 0
    for size in sizes:
        chunks.append(stream[at : at + size])
        at += size
    chunks.append(stream[at:])
    return chunks


def feed(reader: FrameReader, chunks: list[bytes], max_frame: int) -> tuple[list[bytes], bool]:
    """Feed every chunk; the frames returned and whether a length was refused."""
    frames: list[bytes] = []
    refused = False
    unframed = 0
    for chunk in chunks:
        if refused:
            try:
                reader.feed(chunk)
            except FrameTooLarge:
                continue
            raise AssertionError("the reader took input after refusing a frame")
        try:
            got = reader.feed(chunk)
        except FrameTooLarge:
            assert reader.rejected is not None
            refused = True
            continue
        frames.extend(got)
        if reader.rejected is not None:
            refused = True
            continue
        unframed += len(chunk) - sum(HEADER_BYTES + len(body) for body in got)
        assert reader.buffered_bytes == unframed, (reader.buffered_bytes, unframed)
        assert reader.buffered_bytes < HEADER_BYTES + max_frame
    if refused:
        try:
            reader.feed(b"")
        except FrameTooLarge:
            pass
        else:
            raise AssertionError("the reader took input after refusing a frame")
    return frames, refused


def check(data: bytes) -> None:
    source = FuzzInput(data)
    max_frame = source.choice(MAX_FRAMES)
    sizes = [source.integer(0, 255) for _ in range(source.integer(0, MAX_CHUNKS))]
    stream = source.rest()
    chunks = cut(stream, sizes)
    expected, expect_refused = reference_frames(stream, max_frame)
    reader = FrameReader(max_frame)
    with allocation_budget(ALLOCATION_PER_BYTE * len(stream) + ALLOCATION_SLACK_BYTES, "FrameReader.feed"):
        frames, refused = feed(reader, chunks, max_frame)
    assert refused == expect_refused, f"refused {refused}, the reference {expect_refused}"
    assert frames == expected, f"{len(frames)} frames, the reference {len(expected)}"
