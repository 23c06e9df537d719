"""Length-prefixed framing, sans-IO: bytes in, whole frames out, bytes back.

A frame is a 4-byte unsigned big-endian length N followed by N bytes of
msgpack body. `FrameReader.feed` buffers partial input and returns every
complete body; a length above `max_frame` is refused *before* any memory is
set aside for it, and the reader refuses further input afterwards (the stream
can no longer be trusted to be in step). The good frames in front of a bad
length are still returned: `feed` raises `FrameTooLarge` only when it has no
frame to return, and otherwise leaves the error in `rejected` for the caller
to act on after serving those frames. Zero-length frames are
legal at this layer and rejected by the message layer as malformed.
"""

from __future__ import annotations

import struct

from kittiwake.errors import FrameTooLarge

HEADER = struct.Struct(">I")
HEADER_BYTES = HEADER.size
DEFAULT_MAX_FRAME = 16 * 1024 * 1024


def encode_frame(body: bytes) -> bytes:
    """One frame: length prefix plus body."""
    return HEADER.pack(len(body)) + body


class FrameReader:
    """Accumulates a byte stream and cuts it into frame bodies."""

    __slots__ = ("_buffer", "_max_frame", "rejected")

    def __init__(self, max_frame: int = DEFAULT_MAX_FRAME) -> None:
        self._buffer = bytearray()
        self._max_frame = max_frame
        self.rejected: FrameTooLarge | None = None

    @property
    def buffered_bytes(self) -> int:
        """Bytes received of the frame in progress (0 between frames): what the reader holds."""
        return len(self._buffer)

    @property
    def frame_bytes(self) -> int:
        """The size, prefix included, of the frame in progress as its prefix announces it (only
        the prefix's size while the prefix is incomplete; 0 between frames). Nothing is set
        aside for it: the reader holds only `buffered_bytes`."""
        buffered = len(self._buffer)
        if buffered < HEADER_BYTES:
            return HEADER_BYTES if buffered else 0
        length: int = HEADER.unpack_from(self._buffer, 0)[0]
        return HEADER_BYTES + length

    def feed(self, data: bytes | memoryview) -> list[bytes]:
        if self.rejected is not None:
            raise self.rejected
        buffer = self._buffer
        buffer += data
        frames: list[bytes] = []
        start = 0
        end = len(buffer)
        while end - start >= HEADER_BYTES:
            (length,) = HEADER.unpack_from(buffer, start)
            if length > self._max_frame:
                self.rejected = FrameTooLarge(f"frame of {length} bytes is over the limit of {self._max_frame}")
                buffer.clear()
                if not frames:
                    raise self.rejected
                return frames
            stop = start + HEADER_BYTES + length
            if stop > end:
                break
            frames.append(bytes(buffer[start + HEADER_BYTES : stop]))
            start = stop
        if start:
            del buffer[:start]
        return frames
