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
    """Accumulates a byte stream and cuts it into frame bodies.

    Each body is copied once: a frame that arrives whole in one `feed` is cut straight from the
    input; a frame that spans reads keeps its prefix and the pieces of its body received so far
    (copies: the input may be a view of a buffer its owner reuses) and joins them when the last
    piece arrives. (Appending every read to one buffer and slicing bodies out of it copied a
    large body three to four times.)"""

    __slots__ = ("_prefix", "_pieces", "_held", "_max_frame", "rejected")

    def __init__(self, max_frame: int = DEFAULT_MAX_FRAME) -> None:
        self._prefix = bytearray()  # the length prefix of the frame in progress, as far as it came
        self._pieces: list[bytes | memoryview] = []  # its body so far
        self._held = 0  # bytes of the frame in progress, prefix included
        self._max_frame = max_frame
        self.rejected: FrameTooLarge | None = None

    @property
    def buffered_bytes(self) -> int:
        """Bytes received of the frame in progress (0 between frames): what the reader holds."""
        return self._held

    @property
    def frame_bytes(self) -> int:
        """The size, prefix included, of the frame in progress as its prefix announces it (only
        the prefix's size while the prefix is incomplete; 0 between frames). Nothing is set
        aside for it: the reader holds only `buffered_bytes`."""
        if len(self._prefix) < HEADER_BYTES:
            return HEADER_BYTES if self._held else 0
        length: int = HEADER.unpack(self._prefix)[0]
        return HEADER_BYTES + length

    def feed(self, data: bytes | memoryview) -> list[bytes]:
        if self.rejected is not None:
            raise self.rejected
        view = memoryview(data)
        end = len(view)
        frames: list[bytes] = []
        source: bytes | memoryview = data if isinstance(data, bytes) else view  # a slice of bytes is bytes
        start = 0
        if self._held:
            start = self._continue(view, frames)
            if start < 0:
                return frames
        while end - start >= HEADER_BYTES:
            (length,) = HEADER.unpack_from(data, start)
            if length > self._max_frame:
                return self._reject(length, frames)
            stop = start + HEADER_BYTES + length
            if stop > end:
                break
            body = source[start + HEADER_BYTES : stop]
            frames.append(body if isinstance(body, bytes) else bytes(body))
            start = stop
        if start < end:  # the start of the next frame: keep a copy
            self._held = end - start
            self._prefix += view[start : min(end, start + HEADER_BYTES)]
            if end - start > HEADER_BYTES:
                self._pieces.append(bytes(view[start + HEADER_BYTES : end]))
        return frames

    def _continue(self, view: memoryview, frames: list[bytes]) -> int:
        """Carry the frame in progress on with `view`: where the rest of `view` starts, or -1 when
        all of it went to that frame (still incomplete, or refused)."""
        start = 0
        end = len(view)
        missing = HEADER_BYTES - len(self._prefix)
        if missing > 0:
            taken = min(missing, end)
            self._prefix += view[:taken]
            self._held += taken
            start = taken
            if len(self._prefix) < HEADER_BYTES:
                return -1
        length: int = HEADER.unpack(self._prefix)[0]
        if length > self._max_frame:
            self._reject(length, frames)
            return -1
        need = HEADER_BYTES + length - self._held
        if end - start < need:
            if end > start:
                self._pieces.append(bytes(view[start:end]))
                self._held += end - start
            return -1
        self._pieces.append(view[start : start + need])  # joined below, while `view` is valid
        frames.append(b"".join(self._pieces))
        self._pieces.clear()
        self._prefix.clear()
        self._held = 0
        return start + need

    def _reject(self, length: int, frames: list[bytes]) -> list[bytes]:
        self.rejected = FrameTooLarge(f"frame of {length} bytes is over the limit of {self._max_frame}")
        self._pieces.clear()
        self._prefix.clear()
        self._held = 0
        if not frames:
            raise self.rejected
        return frames
